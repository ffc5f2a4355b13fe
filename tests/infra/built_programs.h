// Where this build put its programs, compiled into every test by taehv_add_gtest (TAEHV_TEST_BIN_DIR,
// TAEHV_TEST_WITH_TRAINER): a test finds them the same way inside ctest and out of it, and a program it needs that
// is missing fails it. Only a build configured without the trainer (TAEHV_WITH_TRAINER=OFF) skips the trainer's runs.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

namespace taehv::testing {

/// `relative`, a path compiled in relative to this test program's folder (CMake's taehv_test_path, e.g. "../bin"),
/// made absolute: the folder of /proc/self/exe joined with it, each leading "../" taking one folder off.
inline std::string besideThisTest(const std::string& relative) {
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  std::string dir = n > 0 ? std::string(exe, static_cast<std::size_t>(n)) : std::string(".");
  dir.erase(dir.rfind('/') == std::string::npos ? 0 : dir.rfind('/'));
  std::string rest = relative;
  while (rest == ".." || rest.rfind("../", 0) == 0) {
    dir.erase(dir.rfind('/') == std::string::npos ? 0 : dir.rfind('/'));
    rest.erase(0, rest.size() > 2 ? 3 : 2);
  }
  if (rest.empty() || rest == ".") return dir.empty() ? "/" : dir;
  return dir + "/" + rest;
}

/// This build's program folder (bin/: taehv-run, taehv-train).
inline std::string builtBinDir() { return besideThisTest(TAEHV_TEST_BIN_DIR); }

/// The path of this build's program `name`, e.g. builtProgram("taehv-run"); ASSERT_PROGRAM_BUILT checks it is there.
inline std::string builtProgram(const std::string& name) { return builtBinDir() + "/" + name; }

/// Whether this build was configured with the trainer (TAEHV_WITH_TRAINER=ON).
inline constexpr bool kBuiltWithTrainer = TAEHV_TEST_WITH_TRAINER;

}  // namespace taehv::testing

/// Fails the test (fatally) when the program at `path` is missing: a test that needs it never passes without it.
#define ASSERT_PROGRAM_BUILT(path) \
  ASSERT_EQ(::access(std::string(path).c_str(), X_OK), 0) << (path) << " is missing: build its target first"

/// Skips the test in a build configured without the trainer, and fails it when the trainer should be there but is
/// not. Use at the start of a test (or SetUp) that runs taehv-train.
#define SKIP_WITHOUT_TRAINER_OR_ASSERT_BUILT()                                              \
  do {                                                                                     \
    if (!::taehv::testing::kBuiltWithTrainer) {                                            \
      GTEST_SKIP() << "this build has no trainer (configured with TAEHV_WITH_TRAINER=OFF)"; \
    }                                                                                      \
    ASSERT_PROGRAM_BUILT(::taehv::testing::builtProgram("taehv-train"));                    \
  } while (false)
