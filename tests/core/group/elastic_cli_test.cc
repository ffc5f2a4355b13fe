// Elastic re-formation through the real taehv-run on loopback (PROTOCOL.md, "Elastic re-formation"): with
// --max-restarts, a worker failure or a lost node makes the nodes alive re-form (node ranks contiguous again, world
// size and rank offsets recomputed, TORCHELASTIC_RESTART_COUNT up by one); node 0 lost is a clear end; a node that
// starts late joins at the next formation. Workers are /bin/sh scripts that append their environment to a file.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "run_process.h"

namespace taehv::test {
namespace {

using Clock = std::chrono::steady_clock;
const std::string kToken = "elastic-test-token-0123456789abcdef";

std::map<std::string, std::string> groupEnv() {
  auto env = cleanEnv();
  env.erase("TAEHV_GROUP_PORT");
  env["TAEHV_JOB_TOKEN"] = kToken;
  return env;
}

std::string tempDir() {
  char tmpl[] = "/tmp/taehv-elastic-XXXXXX";
  return ::mkdtemp(tmpl);
}

/// Every worker start as one line: "restart rank world local_world group_rank group_world node_id".
std::vector<std::string> starts(const std::string& file) {
  std::ifstream in(file);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::sort(lines.begin(), lines.end());
  return lines;
}

/// One node's taehv-run: --node-rank `id` of --nnodes `nnodes`, one worker running `script` (with $ID set).
std::future<ProcessResult> node(int id, const std::string& nnodes, int port, const std::string& script,
                                const std::string& log, std::chrono::seconds timeout = std::chrono::seconds(90)) {
  const std::string record = "echo \"$TORCHELASTIC_RESTART_COUNT $RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK "
                             "$GROUP_WORLD_SIZE " + std::to_string(id) + "\" >> " + log + "; ";
  std::vector<std::string> argv = {taehvRun(), "--backend", "local", "--nnodes", nnodes, "--node-rank",
                                   std::to_string(id), "--master-addr", "127.0.0.1", "--master-port",
                                   std::to_string(port), "--nproc-per-node", "1", "--shutdown-grace", "2",
                                   "--node-timeout", "3", "--max-restarts", "1", "--", "/bin/sh", "-c",
                                   record + script};
  return std::async(std::launch::async, [argv, timeout] { return runProcess(argv, groupEnv(), timeout); });
}

/// Below the kernel's ephemeral range (32768-60999), where an outgoing connection of any process may hold a port.
int testPort(int slot) { return 12000 + static_cast<int>(::getpid() % 400) * 8 + slot * 2; }

// A worker failing on node 1 stops both nodes; both re-form (same nodes), restart count 1, and finish.
TEST(Elastic, AWorkerFailureReFormsBothNodesAndCountsTheRestart) {
  const std::string dir = tempDir(), log = dir + "/starts";
  const int port = testPort(0);
  const std::string fail_once = "[ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && { sleep 2; exit 3; }; exit 0";
  const std::string wait_once = "[ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && sleep 60; exit 0";
  auto n0 = node(0, "1:2", port, wait_once, log);
  auto n1 = node(1, "1:2", port, fail_once, log);
  const auto r1 = n1.get(), r0 = n0.get();
  EXPECT_EQ(r0.exit_code, 0) << r0.err;
  EXPECT_EQ(r1.exit_code, 0) << r1.err;
  EXPECT_EQ(starts(log), (std::vector<std::string>{"0 0 2 1 0 2 0", "0 1 2 1 1 2 1", "1 0 2 1 0 2 0", "1 1 2 1 1 2 1"}));
  EXPECT_NE(r0.err.find("re-forming with the nodes alive for restart 1 of 1"), std::string::npos) << r0.err;
  EXPECT_NE(r0.err.find("exited with code 3"), std::string::npos) << r0.err;
  std::filesystem::remove_all(dir);
}

// Node 1 of 3 is killed (its taehv-run and worker, kill -9): nodes 0 and 2 re-form as nodes 0 and 1 of 2, ranks 0
// and 1 of world size 2, restart count 1, and finish.
TEST(Elastic, ANodeKilledLeavesTheOthersToReFormWithContiguousRanks) {
  const std::string dir = tempDir(), log = dir + "/starts";
  const int port = testPort(1);
  const std::string wait_once = "[ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && sleep 60; exit 0";
  const auto t0 = Clock::now();
  auto n0 = node(0, "2:3", port, wait_once, log);
  auto n1 = node(1, "2:3", port, "sleep 2; kill -KILL $PPID; sleep 60", log);
  auto n2 = node(2, "2:3", port, wait_once, log);
  const auto r1 = n1.get(), r2 = n2.get(), r0 = n0.get();
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("node 1 killed: nodes 0 and 2 re-formed and finished %.1f s after the start\n", took);
  EXPECT_EQ(r1.exit_code, 128 + SIGKILL);
  EXPECT_EQ(r0.exit_code, 0) << r0.err;
  EXPECT_EQ(r2.exit_code, 0) << r2.err;
  EXPECT_EQ(starts(log), (std::vector<std::string>{"0 0 3 1 0 3 0", "0 1 3 1 1 3 1", "0 2 3 1 2 3 2",
                                                   "1 0 2 1 0 2 0", "1 1 2 1 1 2 2"}));
  EXPECT_NE(r0.err.find("node 1 (host "), std::string::npos) << r0.err;
  EXPECT_NE(r0.err.find("formed with 2 of 2..3 nodes (--node-rank 0,2 in that order; formation 1"),
            std::string::npos) << r0.err;
  EXPECT_NE(r2.err.find("node 1 of 2, restart 1"), std::string::npos) << r2.err;
  std::filesystem::remove_all(dir);
}

// Node 0 (the group's leader and the workers' store) killed: node 1 cannot re-form without it and ends at once,
// non-zero, naming node 0 and saying why; it does not wait for a formation that cannot come.
TEST(Elastic, Node0LostIsAClearEndForTheOthers) {
  const std::string dir = tempDir(), log = dir + "/starts";
  const int port = testPort(2);
  const auto t0 = Clock::now();
  auto n0 = node(0, "1:2", port, "sleep 2; kill -KILL $PPID; sleep 60", log);
  auto n1 = node(1, "1:2", port, "sleep 60", log);
  const auto r1 = n1.get();
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  const auto r0 = n0.get();
  std::printf("node 0 killed 2 s after the start: node 1 ended %.1f s after the start (exit %d)\n", took, r1.exit_code);
  EXPECT_EQ(r0.exit_code, 128 + SIGKILL);
  EXPECT_EQ(r1.exit_code, 75) << r1.err;
  EXPECT_NE(r1.err.find("node 0 (host "), std::string::npos) << r1.err;
  // Closed, or broke (a reset) when node 0 died with a heartbeat of ours unread.
  EXPECT_NE(r1.err.find("lost: its connection "), std::string::npos) << r1.err;
  EXPECT_NE(r1.err.find("the job cannot re-form without node 0"), std::string::npos) << r1.err;
  EXPECT_EQ(r1.err.find("re-forming"), std::string::npos) << r1.err;
  EXPECT_LT(took, 2 + 2 + 4) << "the kill at 2 s, grace 2 s, slack";  // the closed connection is seen at once
  EXPECT_EQ(starts(log).size(), 2u);
  std::filesystem::remove_all(dir);
}

// A node that starts after the group formed (MIN 1 is in, the last call passed) waits, and joins at the next
// formation (after node 0's worker fails once): then both run, as nodes 0 and 1 of 2.
TEST(Elastic, ALateNodeJoinsAtTheNextFormation) {
  const std::string dir = tempDir(), log = dir + "/starts";
  const int port = testPort(3);
  // Node 0 alone forms after the last call (5 s) and fails 6 s later, when node 1 has been waiting for a while.
  auto n0 = node(0, "1:2", port, "[ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && { sleep 6; exit 4; }; exit 0", log);
  std::this_thread::sleep_for(std::chrono::seconds(7));
  auto n1 = node(1, "1:2", port, "exit 0", log);
  const auto r0 = n0.get(), r1 = n1.get();
  EXPECT_EQ(r0.exit_code, 0) << r0.err;
  EXPECT_EQ(r1.exit_code, 0) << r1.err;
  EXPECT_EQ(starts(log), (std::vector<std::string>{"0 0 1 1 0 1 0", "1 0 2 1 0 2 0", "1 1 2 1 1 2 1"}));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace taehv::test
