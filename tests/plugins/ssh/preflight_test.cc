#include "taehv/ssh/preflight.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace taehv::ssh {
namespace {

PreflightRequest request() {
  PreflightRequest r;
  r.ssh = "/usr/bin/ssh";
  r.hosts = {"h1", "h2"};
  r.remote_bin = "/opt/taehv/bin/taehv-run";
  r.cwd = "/work";
  r.version = "0.1.0";
  r.timeout = std::chrono::seconds(7);
  return r;
}

Captured answer(const std::string& out, int code = 0, const std::string& err = "") {
  Captured c;
  c.exit_code = code;
  c.out = out;
  c.err = err;
  return c;
}

const std::string kGood =
    "Welcome banner\ntaehv-preflight: begin\ntaehv-preflight: version taehv-run 0.1.0\n"
    "taehv-preflight: cwd ok\ntaehv-preflight: addr 10.77.0.2 fd00::2 \n";

TEST(SshPreflight, ReadyHostGivesAddresses) {
  const auto c = interpretPreflight("h1", answer(kGood), request());
  EXPECT_EQ(c.error, "");
  EXPECT_EQ(c.addresses, (std::vector<std::string>{"10.77.0.2", "fd00::2"}));
}

TEST(SshPreflight, EachFailureHasItsReason) {
  const auto req = request();
  EXPECT_EQ(interpretPreflight("h", answer("", 255, "ssh: connect to host 10.0.0.9 port 22: Connection refused\n"),
                               req)
                .error,
            "cannot log in over ssh: ssh: connect to host 10.0.0.9 port 22: Connection refused");
  EXPECT_NE(interpretPreflight("h", answer("", 255, "root@h: Permission denied (publickey).\n"), req)
                .error.find("Permission denied"),
            std::string::npos);
  Captured late;
  late.timed_out = true;
  EXPECT_NE(interpretPreflight("h", late, req).error.find("no answer within 7 s"), std::string::npos);
  EXPECT_EQ(interpretPreflight("h", answer("taehv-preflight: begin\ntaehv-preflight: missing\n"
                                           "taehv-preflight: cwd ok\n"),
                               req)
                .error,
            "taehv-run not found at /opt/taehv/bin/taehv-run (install it there or pass --remote-bin PATH)");
  EXPECT_EQ(interpretPreflight("h", answer("taehv-preflight: begin\ntaehv-preflight: version taehv-run 0.2.0\n"
                                           "taehv-preflight: cwd ok\n"),
                               req)
                .error,
            "taehv-run at /opt/taehv/bin/taehv-run is version 0.2.0, this one is 0.1.0 (install the same version on "
            "every host)");
  EXPECT_NE(interpretPreflight("h", answer("taehv-preflight: begin\ntaehv-preflight: version error while loading "
                                           "shared libraries\ntaehv-preflight: cwd ok\n"),
                               req)
                .error.find("did not print a version"),
            std::string::npos);
  EXPECT_NE(interpretPreflight("h", answer("taehv-preflight: begin\ntaehv-preflight: version taehv-run 0.1.0\n"
                                           "taehv-preflight: cwd missing\n"),
                               req)
                .error.find("working directory /work does not exist"),
            std::string::npos);
  Captured nossh;
  nossh.spawn_error = "/nope/ssh: No such file or directory";
  EXPECT_NE(interpretPreflight("h", nossh, req).error.find("cannot run ssh"), std::string::npos);
}

/// Records what it was asked to run and answers from a table (the real one is tested against sshd).
class FakeRunner : public CommandRunner {
 public:
  std::vector<std::vector<std::string>> seen;
  std::chrono::milliseconds timeout{0};
  std::vector<Captured> answers;
  std::size_t parallel = 0;
  std::vector<Captured> runAll(const std::vector<std::vector<std::string>>& argvs,
                               const std::map<std::string, std::string>&, std::chrono::milliseconds t,
                               std::size_t max_parallel) override {
    seen = argvs;
    timeout = t;
    parallel = max_parallel;
    return answers;
  }
};

TEST(SshPreflight, AsksAllHostsAtOnceWithOneDeadline) {
  FakeRunner runner;
  runner.answers = {answer(kGood), answer("", 255, "ssh: Could not resolve hostname h2: Name or service not known")};
  const auto report = runPreflight(runner, {}, request());
  ASSERT_EQ(runner.seen.size(), 2u);
  EXPECT_EQ(runner.timeout, std::chrono::seconds(7));
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& argv = runner.seen[i];
    EXPECT_EQ(argv[argv.size() - 2], i == 0 ? "h1" : "h2");
    EXPECT_EQ(argv[argv.size() - 3], "--");
    EXPECT_NE(std::find(argv.begin(), argv.end(), "ConnectTimeout=6"), argv.end());
  }
  EXPECT_FALSE(report.ok());
  EXPECT_EQ(report.hosts[0].error, "");
  EXPECT_NE(report.hosts[1].error.find("Could not resolve hostname h2"), std::string::npos);
}

TEST(SshPreflight, RealProcessRunnerCapturesAndEnforcesTheDeadline) {
  ProcessCommandRunner runner;
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = runner.runAll({{"/bin/sh", "-c", "echo out; echo err >&2; exit 3"},
                                {"/bin/sh", "-c", "exec sleep 30"},
                                {"/nonexistent/binary"}},
                               {{"PATH", "/usr/bin:/bin"}}, std::chrono::milliseconds(500), process::kAllAtOnce);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].exit_code, 3);
  EXPECT_EQ(r[0].out, "out\n");
  EXPECT_EQ(r[0].err, "err\n");
  EXPECT_FALSE(r[0].timed_out);
  EXPECT_TRUE(r[1].timed_out);
  EXPECT_NE(r[2].spawn_error.find("No such file"), std::string::npos);
  EXPECT_LT(took, std::chrono::seconds(5));
}

TEST(HostileSshPreflight, BoundsTheSshClientsAndNamesHostsNeverReached) {
  FakeRunner runner;
  PreflightRequest req = request();
  req.max_parallel = 5;
  Captured late;
  late.timed_out = true;
  late.not_started = true;
  runner.answers = {answer(kGood), late};
  const auto report = runPreflight(runner, {}, req);
  EXPECT_EQ(runner.parallel, 5u);
  EXPECT_EQ(runner.timeout, std::chrono::seconds(7));  // one deadline for the whole preflight
  EXPECT_EQ(report.hosts[1].error,
            "not checked: the preflight's 7 s were over before its turn (5 hosts are checked at once; raise "
            "--preflight-timeout or --ssh-parallel)");
  EXPECT_EQ(PreflightRequest().max_parallel, kDefaultSshParallel);
}

}  // namespace
}  // namespace taehv::ssh
