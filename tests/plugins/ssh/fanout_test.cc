#include "taehv/ssh/fanout.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace taehv::ssh {
namespace {

using Strings = std::vector<std::string>;

/// Launch flags as the host hands them over: --nnodes MIN:MAX (a single count when min == max).
JobFlags nnodes(int min, int max) {
  JobFlags flags;
  flags.min_nnodes = min;
  flags.nnodes = max;
  return flags;
}

TEST(SshLaunchFlags, RefusesWhatTheFanOutSetsForEveryHost) {
  JobFlags flags;
  EXPECT_TRUE(refusedFlags(flags).ok());
  flags.node_rank = 1;
  EXPECT_NE(refusedFlags(flags).error.find("--node-rank is set for every host"), std::string::npos);
  flags = JobFlags();
  flags.standalone = true;
  EXPECT_NE(refusedFlags(flags).error.find("--standalone means one machine"), std::string::npos);
  flags = JobFlags();
  flags.restart_count = 1;
  EXPECT_NE(refusedFlags(flags).error.find("--restart-count is set for every host"), std::string::npos);
  flags = JobFlags();
  flags.max_restarts = 2;  // the fan-out restarts the whole job
  flags.shutdown_grace = std::chrono::milliseconds(7500);
  EXPECT_TRUE(refusedFlags(flags).ok());
  EXPECT_EQ(nnodesText(nnodes(2, 2)), "2");
  EXPECT_EQ(nnodesText(nnodes(2, 3)), "2:3");
  EXPECT_EQ(nnodesText(JobFlags()), "");
}

// The hosts' teardown grace leaves the remote taehv-run its whole --shutdown-grace to stop its workers.
TEST(SshLaunchFlags, RemoteGraceIsTheShutdownGraceRoundedUpPlusTwo) {
  EXPECT_EQ(remoteGraceSeconds(std::nullopt, std::nullopt), kDefaultRemoteGraceSeconds);
  EXPECT_EQ(remoteGraceSeconds(std::nullopt, std::chrono::milliseconds(7500)), 10);
  EXPECT_EQ(remoteGraceSeconds(std::nullopt, std::chrono::milliseconds(3000)), 5);
  EXPECT_EQ(remoteGraceSeconds(std::nullopt, std::chrono::milliseconds(0)), 2);
  EXPECT_EQ(remoteGraceSeconds(std::chrono::seconds(3), std::chrono::milliseconds(7500)), 3) << "--remote-grace wins";
}

std::vector<HostEntry> hosts(const std::string& text) { return parseHostfile(text, "hf").value; }

TEST(SshJobShape, EvenSlotsGiveNprocPerNode) {
  const auto s = shapeJob(hosts("a slots=2\nb slots=2\n"), {}, std::nullopt);
  ASSERT_EQ(s.error, "");
  EXPECT_EQ(s.nproc_per_node, 2);
  EXPECT_EQ(s.hosts.size(), 2u);
}

TEST(SshJobShape, UnevenSlotsRunEachHostsOwnCount) {
  const auto s = shapeJob(hosts("a slots=2\nb slots=1\n"), {}, std::nullopt);
  ASSERT_EQ(s.error, "");
  EXPECT_EQ(s.nprocs, (std::vector<int>{2, 1}));
  EXPECT_EQ(s.nproc_per_node, 0);  // not one count for all
  EXPECT_EQ(shapeJob(hosts("a slots=2\nb slots=2\n"), {}, std::nullopt).nprocs, (std::vector<int>{2, 2}));
  EXPECT_EQ(shapeJob(hosts("a slots=4\nb slots=2\n"), {}, 2).nprocs, (std::vector<int>{2, 2}));
}

TEST(SshJobShape, NprocPerNodeUsesTheFirstSlotsOfEveryHost) {
  const auto s = shapeJob(hosts("a slots=4\nb slots=2\n"), {}, 2);
  ASSERT_EQ(s.error, "");
  EXPECT_EQ(s.nproc_per_node, 2);
  EXPECT_EQ(s.hosts[0].slots, (std::vector<int>{0, 1}));
  EXPECT_NE(shapeJob(hosts("a slots=4\nb slots=2\n"), {}, 3).error.find("host 'b' has 2 slot(s)"),
            std::string::npos);
  EXPECT_EQ(shapeJob(hosts("a slots=3\n"), {}, std::nullopt).nproc_per_node, 3);  // --nproc-per-node auto
}

TEST(SshJobShape, NnodesTakesTheFirstHostsLikeDeepSpeedNumNodes) {
  auto s = shapeJob(hosts("a slots=1\nb slots=1\nc slots=1\n"), nnodes(2, 2), std::nullopt);
  ASSERT_EQ(s.error, "");
  ASSERT_EQ(s.hosts.size(), 2u);
  EXPECT_EQ(s.hosts[1].host, "b");
  EXPECT_EQ(s.notes.size(), 1u);
  EXPECT_NE(shapeJob(hosts("a slots=1\n"), nnodes(2, 2), std::nullopt).error.find(
                "--nnodes 2 but the hostfile has 1 host(s)"),
            std::string::npos);
  EXPECT_EQ(s.min_nodes, 2) << "a fixed count";
}

// --nnodes MIN:MAX: the first MAX hosts are the pool, MIN of them are enough (at the start and at a restart).
TEST(SshJobShape, NnodesMinMaxTakesUpToMaxHostsAndNeedsMin) {
  auto s = shapeJob(hosts("a slots=1\nb slots=1\nc slots=1\nd slots=1\n"), nnodes(2, 3), std::nullopt);
  ASSERT_EQ(s.error, "");
  EXPECT_EQ(s.hosts.size(), 3u);
  EXPECT_EQ(s.min_nodes, 2);
  s = shapeJob(hosts("a slots=1\nb slots=1\nc slots=1\n"), nnodes(2, 5), std::nullopt);
  ASSERT_EQ(s.error, "");
  EXPECT_EQ(s.hosts.size(), 3u);
  EXPECT_EQ(s.min_nodes, 2);
  EXPECT_NE(shapeJob(hosts("a slots=1\n"), nnodes(2, 3), std::nullopt).error.find(
                "--nnodes 2:3 but the hostfile has 1 host(s)"),
            std::string::npos);
}

TEST(SshRemoteArgs, ExplicitPlanThenForwardedThenCommand) {
  EXPECT_EQ(remoteTaehvArgs(2, 1, 4, "10.0.0.1", 29500, {"--max-restarts", "1"}, {"python", "t.py"}),
            (Strings{"--backend", "local", "--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "4",
                     "--master-addr", "10.0.0.1", "--master-port", "29500", "--max-restarts", "1", "--", "python",
                     "t.py"}));
  EXPECT_EQ(remoteTaehvArgs(1, 0, 1, "m", 1, {}, {}).back(), "1");  // no command: no "--"
}

TEST(SshArgv, UserOptionsFirstThenDefaultsThenDoubleDashHost) {
  const auto argv = sshArgv("/usr/bin/ssh", {"-p", "2222"}, "h1", "CMD");
  ASSERT_GE(argv.size(), 6u);
  EXPECT_EQ(argv[0], "/usr/bin/ssh");
  EXPECT_EQ(argv[1], "-p");
  EXPECT_EQ(argv[2], "2222");
  EXPECT_EQ(argv[argv.size() - 3], "--");
  EXPECT_EQ(argv[argv.size() - 2], "h1");
  EXPECT_EQ(argv.back(), "CMD");
  EXPECT_NE(std::find(argv.begin(), argv.end(), "BatchMode=yes"), argv.end());
}

TEST(SshEnv, ForwardsOnlyKnownPrefixes) {
  const auto env = forwardedEnv({{"NCCL_DEBUG", "INFO"}, {"GLOO_SOCKET_IFNAME", "eth0"}, {"TAEHV_X", "1"},
                                 {"HOME", "/root"}, {"PATH", "/bin"}, {"NCCLX", "no"}});
  EXPECT_EQ(env, (std::map<std::string, std::string>{
                     {"GLOO_SOCKET_IFNAME", "eth0"}, {"NCCL_DEBUG", "INFO"}, {"TAEHV_X", "1"}}));
}

TEST(SshEnv, EnvFileLikeDeepSpeedEnv) {
  std::map<std::string, std::string> env{{"A", "old"}};
  EXPECT_EQ(parseEnvFile("# comment\n\nA=new=value\nB= spaced \r\n", "f", &env).error, "");
  EXPECT_EQ(env["A"], "new=value");
  EXPECT_EQ(env["B"], " spaced ");
  EXPECT_EQ(parseEnvFile("A=1\nnovalue\n", "f", &env).error, "f:2: expected KEY=VALUE");
  EXPECT_NE(parseEnvFile("1A=1\n", "f", &env).error.find("f:1: '1A' is not a valid variable name"), std::string::npos);
}

TEST(SshEnv, EnvFlag) {
  std::map<std::string, std::string> env;
  EXPECT_EQ(parseEnvAssignment("K=a;b $(id)", &env).error, "");
  EXPECT_EQ(env["K"], "a;b $(id)");
  EXPECT_NE(parseEnvAssignment("K", &env).error.find("expected NAME=VALUE"), std::string::npos);
  EXPECT_NE(parseEnvAssignment("A;B=1", &env).error.find("not a valid variable name"), std::string::npos);
}

}  // namespace
}  // namespace taehv::ssh
