// The SSH fan-out with many hosts, through the real taehv-run and a fake `ssh` on PATH that never answers (it
// contacts nothing: no network is used). Part of the hostile-input suite (ctest -R Hostile).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "run_process.h"

namespace taehv::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class HostileSshScale : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tempDir();
    ASSERT_FALSE(dir_.empty());
    fs::create_directories(dir_ + "/bin");
    fs::create_directories(dir_ + "/started");
    // Each fake ssh leaves a file named by its pid, writes how many had started so far, and hangs like a host
    // that does not answer.
    std::ofstream(dir_ + "/bin/ssh") << "#!/bin/sh\n"
                                     << "touch " << dir_ << "/started/$$\n"
                                     << "ls " << dir_ << "/started | wc -l >> " << dir_ << "/counts\n"
                                     << "exec sleep 30\n";
    fs::permissions(dir_ + "/bin/ssh", fs::perms::owner_all);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string hostfile(int hosts) {
    const std::string path = dir_ + "/hosts";
    std::ofstream out(path);
    for (int i = 0; i < hosts; ++i) out << "node" << i << ".invalid slots=1\n";
    return path;
  }
  ProcessResult launch(std::vector<std::string> args) {
    auto env = cleanEnv();
    env["PATH"] = dir_ + "/bin:/usr/bin:/bin";
    args.insert(args.begin(), {taehvRun(), "--backend", "ssh"});
    args.insert(args.end(), {"--", "/bin/true"});
    return runProcess(args, env, 60s);
  }
  std::size_t started() const {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_ + "/started")) ++n;
    return n;
  }
  int mostAtOnce() const {
    std::ifstream in(dir_ + "/counts");
    int most = 0;
    for (int n = 0; in >> n;) most = std::max(most, n);
    return most;
  }

  std::string dir_;
};

TEST_F(HostileSshScale, ThePreflightRunsAtMostNSshAtOnceAndEndsAtItsDeadline) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = launch({"--hostfile", hostfile(300), "--ssh-parallel", "8", "--preflight-timeout", "1"});
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_LT(took, 6s) << "the deadline is for the whole preflight";
  EXPECT_EQ(started(), 8u) << "only the first 8 hosts' turn came within the deadline";
  EXPECT_LE(mostAtOnce(), 8);
  EXPECT_NE(r.err.find("host node0.invalid: no answer within 1 s"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("host node8.invalid: not checked: the preflight's 1 s were over before its turn (8 hosts"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("... and 280 more host(s) not ready"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("preflight failed on 300 of 300 host(s); nothing was started"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("300 hosts: the ssh backend has been tested with up to 16 hosts"), std::string::npos) << r.err;
  EXPECT_LT(std::count(r.err.begin(), r.err.end(), '\n'), 30) << "one line per host would be 300";
}

TEST_F(HostileSshScale, TheDefaultBoundIs64AndHugeHostfilesAndBadBoundsAreRefused) {
  auto r = launch({"--hostfile", hostfile(100), "--preflight-timeout", "1"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(started(), 64u);
  EXPECT_LE(mostAtOnce(), 64);

  r = launch({"--hostfile", hostfile(4097), "--preflight-timeout", "1"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("4097 hosts: the ssh backend starts one ssh client per host"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("at most 4096"), std::string::npos) << r.err;
  for (const char* bad : {"0", "1025", "-1", "many"}) {
    r = launch({"--hostfile", hostfile(2), "--ssh-parallel", bad});
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_NE(r.err.find("--ssh-parallel '" + std::string(bad) + "' must be a whole number from 1 to 1024"),
              std::string::npos)
        << r.err;
  }
  EXPECT_EQ(started(), 64u) << "refused launches start no ssh";
}

// --shutdown-grace is core's to check, for the ssh backend too: the backend used to read it again from the command
// line and silently drop a value core refuses, then start every host (whose taehv-run refused it in turn). Now
// taehv-run answers with core's message and no ssh client starts.
TEST_F(HostileSshScale, ABadShutdownGraceIsRefusedByCoreBeforeAnySshStarts) {
  for (const char* bad : {"-1", "nan", "86401"}) {
    auto r = launch({"--hostfile", hostfile(2), "--shutdown-grace", bad});
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_NE(r.err.find("taehv-run: error: --shutdown-grace must be 0..86400 seconds, got "), std::string::npos)
        << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  auto r = launch({"--hostfile", hostfile(2), "--shutdown-grace", "soon"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("the argument ('soon') for option '--shutdown-grace' is invalid"), std::string::npos) << r.err;
  EXPECT_EQ(started(), 0u) << "a refused launch starts no ssh";
}

}  // namespace
}  // namespace taehv::test
