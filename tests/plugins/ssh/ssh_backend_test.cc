// The ssh backend's files (plugins/ssh/src/ssh_backend.cc) through the real taehv-run: the hostfile and the
// .taehv_env files are read by taehv::files' one reader. Part of the hostile-input suite (ctest -R Hostile).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "run_process.h"

namespace taehv::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Issue 38, defects 11 and 12: the hostfile was opened before its type was checked and read without a bound, so
// `--hostfile /dev/zero` grew by ~1 GB/s for ever and a FIFO blocked. Each is now one line at once. The address
// space is capped at 1 GiB (ulimit -v) so that the unbounded read of the old code ends instead of filling the machine.
TEST(HostileSshFiles, AHostfileThatIsDevZeroAFifoOrAFolderIsOneLineAtOnce) {
  const std::string dir = tempDir();
  const std::string fifo = dir + "/hosts";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  struct Case {
    std::string hostfile;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{{"/dev/zero", "--hostfile /dev/zero: a character device, not a regular file"},
                                         {fifo, "--hostfile " + fifo + ": a FIFO (named pipe), not a regular file"},
                                         {dir, "--hostfile " + dir + ": a folder, not a regular file"}}) {
    const auto start = std::chrono::steady_clock::now();
    const auto r = runProcess({"/bin/sh", "-c", "ulimit -v 1048576; exec \"$0\" \"$@\"", taehvRun(), "describe",
                               "--backend", "ssh", "--hostfile", c.hostfile, "--", "/bin/true"},
                              cleanEnv(), 20s);
    EXPECT_FALSE(r.timed_out) << c.hostfile;
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << c.hostfile;
    EXPECT_EQ(r.exit_code, 2) << c.hostfile << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace taehv::test
