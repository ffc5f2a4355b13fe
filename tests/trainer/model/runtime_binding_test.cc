// The programs' std::filesystem calls run the C++ runtime's code, not the static copy some libtorch builds export
// (cmake/TaehvTorch.cmake): that copy's remove_all crashed every test with a temporary folder on an H100 image with
// torch 2.11, where the link option then in use did not put libstdc++ ahead of libtorch. This test program links
// libtorch as every program does; it runs itself again under the dynamic loader's LD_DEBUG=bindings and names each
// std::filesystem function that the program or libstdc++ took from another library.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace taehv {
namespace {

namespace fs = std::filesystem;

// Also what the check below runs under the loader's eye: a folder tree made and removed, as TempDir and checkpoint
// pruning do (a tensor first, so that libtorch is loaded and in use, as in the programs).
TEST(RuntimeBinding, AFolderTreeIsMadeAndRemoved) {
  EXPECT_EQ(torch::ones({2}).sum().item<float>(), 2.0f);
  const fs::path top = fs::temp_directory_path() / ("taehv-binding-" + std::to_string(::getpid()));
  fs::create_directories(top / "a" / "b");
  std::ofstream(top / "a" / "b" / "file") << "x";
  EXPECT_TRUE(fs::exists(top / "a" / "b" / "file"));
  std::error_code error;
  EXPECT_GT(fs::remove_all(top, error), 0u) << error.message();
  EXPECT_FALSE(error) << error.message();
  EXPECT_FALSE(fs::exists(top));
}

TEST(RuntimeBinding, StdFilesystemCallsBindToTheCxxRuntime) {
  std::array<char, 4096> self{};
  const ssize_t n = ::readlink("/proc/self/exe", self.data(), self.size() - 1);
  ASSERT_GT(n, 0);
  const std::string program(self.data(), static_cast<size_t>(n));
  const std::string command = "LD_DEBUG=bindings '" + program +
                              "' --gtest_filter=RuntimeBinding.AFolderTreeIsMadeAndRemoved 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string line;
  std::vector<std::string> wrong;
  int from_program = 0;
  bool passed = false;
  std::array<char, 8192> buf{};
  while (std::fgets(buf.data(), buf.size(), pipe)) {
    line = buf.data();
    if (line.find("[  PASSED  ] 1 test") != std::string::npos) passed = true;
    // "<pid>: binding file <from> [0] to <to> [0]: normal symbol `<name>' [<version>]"
    const auto file = line.find("binding file ");
    const auto to = line.find(" to ", file);
    const auto symbol = line.find("symbol `_ZNSt10filesystem", to);
    if (file == std::string::npos || to == std::string::npos || symbol == std::string::npos) continue;
    const std::string from_file = line.substr(file + 13, line.find(' ', file + 13) - (file + 13));
    const std::string to_file = line.substr(to + 4, line.find(' ', to + 4) - (to + 4));
    const bool ours = from_file == program;
    if (!ours && from_file.find("libstdc++") == std::string::npos) continue;  // libtorch's own calls: its business
    from_program += ours ? 1 : 0;
    if (to_file.find("libstdc++") == std::string::npos) {
      wrong.push_back(fs::path(from_file).filename().string() + " -> " + fs::path(to_file).filename().string() +
                      ": " + line.substr(symbol + 8, line.find('\'', symbol) - (symbol + 8)));
    }
  }
  ::pclose(pipe);
  ASSERT_TRUE(passed) << "the folder test did not pass when run again under LD_DEBUG=bindings";
  EXPECT_GT(from_program, 0) << "no std::filesystem binding of the program seen: LD_DEBUG output not understood";
  std::string list;
  for (const auto& w : wrong) list += "\n  " + w;
  EXPECT_TRUE(wrong.empty()) << wrong.size() << " std::filesystem function(s) bound outside libstdc++ (libstdc++ must "
                             << "come before libtorch among the program's libraries: cmake/TaehvTorch.cmake):" << list;
}

}  // namespace
}  // namespace taehv
