// Node ranks by arrival through the real taehv-run on loopback (issue 35; PROTOCOL.md, "Node ranks by arrival"):
// three nodes given no --node-rank, torchrun's c10d form (--rdzv-backend c10d --rdzv-endpoint 127.0.0.1:PORT). The
// endpoint is local to all three, so the first to bind the group port leads as node 0 and numbers the others as they
// join; the workers' RANK, GROUP_RANK and WORLD_SIZE follow. Workers are /bin/sh scripts appending their environment
// to a file.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <sstream>

#include "run_process.h"

namespace taehv::test {
namespace {

const std::string kToken = "arrival-test-token-0123456789abcdef";

std::string tempDir() {
  char tmpl[] = "/tmp/taehv-arrival-XXXXXX";
  return ::mkdtemp(tmpl);
}

/// Below the kernel's ephemeral range (32768-60999), where an outgoing connection of any process may hold a port.
int testPort(int slot) { return 16000 + static_cast<int>(::getpid() % 400) * 4 + slot * 2; }

/// One worker start: what its environment said, and which node (taehv-run process) started it.
struct Start {
  int restart = -1, rank = -1, world = -1, local_rank = -1, local_world = -1, group_rank = -1, group_world = -1;
  std::string node;
};

std::vector<Start> starts(const std::string& file) {
  std::ifstream in(file);
  std::vector<Start> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    Start s;
    fields >> s.restart >> s.rank >> s.world >> s.local_rank >> s.local_world >> s.group_rank >> s.group_world >>
        s.node;
    out.push_back(s);
  }
  return out;
}

/// Node `tag`'s taehv-run without --node-rank: `nproc` workers each running `script` after recording its start.
std::future<ProcessResult> node(const std::string& tag, const std::string& nnodes, int port, int nproc,
                                const std::string& script, const std::string& log) {
  const std::string record = "echo \"$TORCHELASTIC_RESTART_COUNT $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE "
                             "$GROUP_RANK $GROUP_WORLD_SIZE " + tag + "\" >> " + log + "; ";
  std::vector<std::string> argv = {taehvRun(), "--backend", "local", "--nnodes", nnodes, "--rdzv-backend", "c10d",
                                   "--rdzv-endpoint", "127.0.0.1:" + std::to_string(port), "--nproc-per-node",
                                   std::to_string(nproc), "--shutdown-grace", "2", "--node-timeout", "3",
                                   "--max-restarts", "1", "--", "/bin/sh", "-c", record + script};
  auto env = cleanEnv();
  env.erase("TAEHV_GROUP_PORT");
  env["TAEHV_JOB_TOKEN"] = kToken;
  return std::async(std::launch::async, [argv, env] { return runProcess(argv, env, std::chrono::seconds(90)); });
}

/// The starts of one formation are one consistent layout: ranks 0..world-1 once each, every node one distinct group
/// rank below `nodes`, its workers' ranks group_rank * nproc + local_rank (equal counts), sizes agreeing.
void expectOneLayout(const std::vector<Start>& all, int restart, int nodes, int nproc) {
  SCOPED_TRACE("restart " + std::to_string(restart));
  std::set<int> ranks;
  std::map<std::string, std::set<int>> group_rank_of;  // node -> the group ranks its workers saw
  std::set<int> group_ranks;
  int n = 0;
  for (const Start& s : all) {
    if (s.restart != restart) continue;
    ++n;
    ranks.insert(s.rank);
    group_rank_of[s.node].insert(s.group_rank);
    group_ranks.insert(s.group_rank);
    EXPECT_EQ(s.world, nodes * nproc);
    EXPECT_EQ(s.local_world, nproc);
    EXPECT_EQ(s.group_world, nodes);
    EXPECT_EQ(s.rank, s.group_rank * nproc + s.local_rank) << s.node;
  }
  EXPECT_EQ(n, nodes * nproc);
  EXPECT_EQ(static_cast<int>(ranks.size()), nodes * nproc);
  EXPECT_EQ(*ranks.begin(), 0);
  EXPECT_EQ(*ranks.rbegin(), nodes * nproc - 1);
  EXPECT_EQ(static_cast<int>(group_rank_of.size()), nodes);
  for (const auto& [tag, seen] : group_rank_of) EXPECT_EQ(seen.size(), 1u) << tag << "'s workers disagree";
  EXPECT_EQ(group_ranks, (std::set<int>{0, 1, 2}));
}

// Three nodes, --nnodes 3, two workers each, no node rank anywhere: node ranks 0, 1, 2 once each, ranks 0..5.
TEST(GroupArrival, ThreeNodesWithoutNodeRanksAreNumberedAsTheyArrive) {
  const std::string dir = tempDir(), log = dir + "/starts";
  const int port = testPort(0);
  auto a = node("a", "3", port, 2, "exit 0", log);
  auto b = node("b", "3", port, 2, "exit 0", log);
  auto c = node("c", "3", port, 2, "exit 0", log);
  const auto ra = a.get(), rb = b.get(), rc = c.get();
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(rc.exit_code, 0) << rc.err;
  expectOneLayout(starts(log), 0, 3, 2);
  // Exactly one of them led (bound the group port) and said in which order the others came.
  int leaders = 0;
  for (const auto* r : {&ra, &rb, &rc}) {
    if (r->err.find("node group: listening on port " + std::to_string(port + 1)) != std::string::npos) {
      ++leaders;
      EXPECT_NE(r->err.find("in order of arrival"), std::string::npos) << r->err;
    } else {
      EXPECT_NE(r->err.find("node group: joining 127.0.0.1:" + std::to_string(port + 1)), std::string::npos) << r->err;
    }
  }
  EXPECT_EQ(leaders, 1);
  std::filesystem::remove_all(dir);
}

// --nnodes 2:3 --max-restarts 1: node b's worker fails once; all three re-form (restart 1) and are numbered again,
// densely, whatever their order of arrival this time, and the job finishes.
TEST(GroupArrival, ANodeFailingOnceReFormsAndTheNodesAreNumberedAgain) {
  const std::string dir = tempDir(), log = dir + "/starts";
  const int port = testPort(1);
  const std::string fail_once = "[ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && { sleep 2; exit 3; }; exit 0";
  const std::string wait_once = "[ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && sleep 60; exit 0";
  auto a = node("a", "2:3", port, 1, wait_once, log);
  auto b = node("b", "2:3", port, 1, fail_once, log);
  auto c = node("c", "2:3", port, 1, wait_once, log);
  const auto ra = a.get(), rb = b.get(), rc = c.get();
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(rc.exit_code, 0) << rc.err;
  const auto all = starts(log);
  EXPECT_EQ(all.size(), 6u);
  expectOneLayout(all, 0, 3, 1);
  expectOneLayout(all, 1, 3, 1);
  EXPECT_NE(rb.err.find("exited with code 3"), std::string::npos) << rb.err;
  for (const auto* r : {&ra, &rb, &rc}) {
    EXPECT_NE(r->err.find("re-forming with the nodes alive for restart 1 of 1"), std::string::npos) << r->err;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace taehv::test
