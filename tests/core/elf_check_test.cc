// checkElfSharedObject against real ELF files cut short and with corrupted headers (this test binary itself, a
// position-independent executable: ET_DYN like a plugin). Part of the hostile-input suite (ctest -R Hostile).
#include "taehv/elf_check.h"

#include <elf.h>
#include <gtest/gtest.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <cstdlib>
#include <random>
#include <fstream>
#include <sstream>
#include <string>

namespace taehv {
namespace {

namespace fs = std::filesystem;

std::string readAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

class HostileElfCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    bytes_ = readAll("/proc/self/exe");
    ASSERT_GT(bytes_.size(), sizeof(ElfW(Ehdr)));
    const auto* ehdr = reinterpret_cast<const ElfW(Ehdr)*>(bytes_.data());
    if (ehdr->e_type != ET_DYN) GTEST_SKIP() << "the test binary is not position-independent";
    path_ = (fs::temp_directory_path() / ("taehv-elf-check-" + std::to_string(::getpid()) + ".so")).string();
  }
  void TearDown() override { fs::remove(path_); }

  std::string check(const std::string& content) {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << content;
    return checkElfSharedObject(path_).error;
  }
  ElfW(Ehdr) header() const { return *reinterpret_cast<const ElfW(Ehdr)*>(bytes_.data()); }
  std::string withHeader(const ElfW(Ehdr)& h, std::size_t size) const {
    std::string out = bytes_.substr(0, size);
    out.replace(0, sizeof h, reinterpret_cast<const char*>(&h), sizeof h);
    return out;
  }

  std::string bytes_;
  std::string path_;
};

TEST_F(HostileElfCheck, TheWholeFilePasses) { EXPECT_EQ(check(bytes_), ""); }

TEST_F(HostileElfCheck, EveryCutShortCopyIsRefused) {
  // At the 100,000 bytes, inside the header, at page boundaries and one byte short of the end.
  for (std::size_t size : {std::size_t{0}, std::size_t{3}, std::size_t{4}, std::size_t{20}, sizeof(ElfW(Ehdr)),
                           std::size_t{1000}, std::size_t{4096}, std::size_t{100000}, bytes_.size() / 2,
                           bytes_.size() - 1}) {
    if (size >= bytes_.size()) continue;
    SCOPED_TRACE(size);
    EXPECT_NE(check(bytes_.substr(0, size)), "");
  }
}

TEST_F(HostileElfCheck, ACutInsideASegmentIsFoundWithoutTheSectionHeaders) {
  // Without section headers (stripped to the bone), only the segment check can see the cut.
  ElfW(Ehdr) h = header();
  h.e_shoff = 0;
  h.e_shnum = 0;
  h.e_shstrndx = 0;
  EXPECT_EQ(check(withHeader(h, bytes_.size())), "");
  const std::string why = check(withHeader(h, 100000));
  EXPECT_NE(why.find("cut short: segment"), std::string::npos) << why;
  EXPECT_NE(why.find("the file has 100000 bytes"), std::string::npos) << why;
}

TEST_F(HostileElfCheck, CorruptedHeadersAreRefusedWithoutOverflow) {
  ElfW(Ehdr) h = header();
  h.e_phoff = ~static_cast<decltype(h.e_phoff)>(0) - 8;  // offset + size wraps around
  EXPECT_NE(check(withHeader(h, bytes_.size())), "");
  h = header();
  h.e_phnum = 0xffff;
  EXPECT_NE(check(withHeader(h, bytes_.size())), "");
  h = header();
  h.e_phentsize = 7;
  EXPECT_NE(check(withHeader(h, bytes_.size())), "");
  h = header();
  h.e_shoff = ~static_cast<decltype(h.e_shoff)>(0);
  EXPECT_NE(check(withHeader(h, bytes_.size())), "");
  h = header();
  h.e_type = ET_REL;
  EXPECT_NE(check(withHeader(h, bytes_.size())).find("not a shared library"), std::string::npos);
  h = header();
  h.e_ident[EI_CLASS] = ELFCLASS32;
  EXPECT_NE(check(withHeader(h, bytes_.size())).find("other class"), std::string::npos);
  EXPECT_EQ(check("this is text, not ELF\n"), "no ELF header");
}

// Issue 38, defect 20: a plugin built for another CPU was refused with dlopen's "No such file or directory". The
// header says which machine it was built for; the check names it and this one.
TEST_F(HostileElfCheck, AnotherMachineIsNamed) {
  const std::string here = sizeof(void*) == 8 && header().e_machine == EM_X86_64 ? "x86-64" : "";
  if (here.empty()) GTEST_SKIP() << "the names below are written for an x86-64 host";
  ElfW(Ehdr) h = header();
  h.e_machine = EM_AARCH64;
  EXPECT_EQ(check(withHeader(h, bytes_.size())), "built for AArch64 (ARM 64-bit), but this taehv-run runs on x86-64");
  h.e_machine = 4242;
  EXPECT_EQ(check(withHeader(h, bytes_.size())), "built for machine 4242, but this taehv-run runs on x86-64");
  // A big-endian file: its machine is read in its own byte order (IBM S/390 is 22, 0x0016).
  h = header();
  h.e_ident[EI_DATA] = ELFDATA2MSB;
  h.e_machine = 0x1600;
  EXPECT_EQ(check(withHeader(h, bytes_.size())), "built for IBM S/390, but this taehv-run runs on x86-64");
}

TEST_F(HostileElfCheck, ASegmentPastTheEndIsRefused) {
  // A program header whose segment lies past the end of an otherwise whole file.
  std::string content = bytes_;
  const ElfW(Ehdr) h = header();
  auto* ph = reinterpret_cast<ElfW(Phdr)*>(content.data() + h.e_phoff);
  for (int i = 0; i < h.e_phnum; ++i) {
    if (ph[i].p_type != PT_LOAD) continue;
    ph[i].p_offset = content.size() - 10;
    ph[i].p_filesz = std::min<decltype(ph[i].p_memsz)>(ph[i].p_memsz, 4096);
    break;
  }
  EXPECT_NE(check(content).find("cut short: segment"), std::string::npos);
}

// A small deterministic fuzz run over a real plugin (the test backend alpha, ~60 KiB): the whole file or a
// prefix of it, with random bytes written into its first 4 KiB (the headers). The check must never crash, and
// whatever it accepts has every loadable segment inside the file.
TEST_F(HostileElfCheck, RandomlyCorruptedPluginsNeverCrashAndAcceptOnlyWhatFits) {
  const char* build = std::getenv("TAEHV_BUILD_DIR");
  ASSERT_NE(build, nullptr) << "ctest sets TAEHV_BUILD_DIR";
  const std::string plugin = readAll(std::string(build) + "/tests/core/plugins/alpha/taehv_plugin_alpha.so");
  ASSERT_GT(plugin.size(), 4096u);
  ASSERT_EQ(check(plugin), "");
  constexpr int kExecutions = 1000;
  std::mt19937 random(17);
  int accepted = 0;
  for (int run = 0; run < kExecutions; ++run) {
    const std::size_t size = run % 2 == 0 ? plugin.size() : 1 + random() % plugin.size();
    std::string content = plugin.substr(0, size);
    const int flips = 1 + static_cast<int>(random() % 8);
    for (int f = 0; f < flips; ++f) {
      const std::size_t at = random() % std::min<std::size_t>(content.size(), 4096);
      content[at] = static_cast<char>(random());
    }
    if (random() % 4 == 0 && content.size() >= sizeof(ElfW(Ehdr))) {  // a table with no section headers
      auto* h = reinterpret_cast<ElfW(Ehdr)*>(content.data());
      h->e_shnum = 0;
    }
    if (!check(content).empty()) continue;
    ++accepted;
    const auto* h = reinterpret_cast<const ElfW(Ehdr)*>(content.data());
    for (int i = 0; i < h->e_phnum; ++i) {
      const auto* ph = reinterpret_cast<const ElfW(Phdr)*>(content.data() + h->e_phoff) + i;
      if (ph->p_type == PT_LOAD) {
        EXPECT_LE(ph->p_offset + ph->p_filesz, content.size()) << "run " << run;
      }
    }
  }
  RecordProperty("executions", kExecutions);
  RecordProperty("accepted", accepted);
}

}  // namespace
}  // namespace taehv
