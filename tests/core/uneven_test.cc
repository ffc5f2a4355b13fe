// Nodes with different process counts (issue 14), through the real taehv-run: SLURM environments of uneven steps
// in both layouts, manual nodes on loopback that agree on their ranks through the node group, and every malformed
// count refused with one line and exit 2. The workers are /bin/sh printing the variables they were given.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "run_process.h"

namespace taehv::test {
namespace {

using Env = std::map<std::string, std::string>;

const std::string kToken = "uneven-test-token-0123456789abcdef";

/// What one worker printed: RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK.
struct Seen {
  int rank, local_rank, world_size, local_world_size, group_rank;
  bool operator<(const Seen& o) const { return rank < o.rank; }
};
const std::vector<std::string> kPrintEnv = {
    "/bin/sh", "-c", "echo \"W $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK\""};

std::vector<Seen> seen(const std::string& out) {
  std::vector<Seen> all;
  static const std::regex line(R"(W (\d+) (\d+) (\d+) (\d+) (\d+))");
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) {
    all.push_back({std::stoi((*it)[1]), std::stoi((*it)[2]), std::stoi((*it)[3]), std::stoi((*it)[4]),
                   std::stoi((*it)[5])});
  }
  return all;
}

std::map<std::string, std::string> envWith(const std::map<std::string, std::string>& extra) {
  auto env = cleanEnv();
  env.erase("TAEHV_JOB_TOKEN");
  env.erase("TAEHV_GROUP_PORT");
  env.erase("MASTER_ADDR");
  env.erase("MASTER_PORT");
  for (const auto& [k, v] : extra) env[k] = v;
  return env;
}

/// Every rank 0..world-1 once, each with the local rank, local world size and node the layout `counts` gives it
/// (node k's ranks start at the sum of the counts of nodes 0..k-1).
void expectLayout(std::vector<Seen> all, const std::vector<int>& counts) {
  int world = 0;
  for (int c : counts) world += c;
  std::sort(all.begin(), all.end());
  ASSERT_EQ(static_cast<int>(all.size()), world);
  int rank = 0;
  for (int node = 0; node < static_cast<int>(counts.size()); ++node) {
    for (int local = 0; local < counts[node]; ++local, ++rank) {
      const Seen& s = all[rank];
      EXPECT_EQ(s.rank, rank);
      EXPECT_EQ(s.local_rank, local) << "rank " << rank;
      EXPECT_EQ(s.world_size, world) << "rank " << rank;
      EXPECT_EQ(s.local_world_size, counts[node]) << "rank " << rank;
      EXPECT_EQ(s.group_rank, node) << "rank " << rank;
    }
  }
}

// ---- SLURM: an uneven srun, one task per GPU (each task is one worker) ----------------------------------------

/// Task `proc` of `srun -N<nodes> -n<sum>` whose tasks per node are `counts` (block distribution), job 90 step 2.
Env slurmTask(const std::vector<int>& counts, const std::string& compressed, int proc) {
  int node = 0, first = 0;
  while (proc >= first + counts[node]) first += counts[node++];
  int total = 0;
  for (int c : counts) total += c;
  const std::string n = std::to_string(counts.size());
  return {{"SLURM_JOB_ID", "90"},
          {"SLURM_STEP_ID", "2"},
          {"SLURM_PROCID", std::to_string(proc)},
          {"SLURM_LOCALID", std::to_string(proc - first)},
          {"SLURM_NODEID", std::to_string(node)},
          {"SLURM_NNODES", n},
          {"SLURM_STEP_NUM_NODES", n},
          {"SLURM_NTASKS", std::to_string(total)},
          {"SLURM_STEP_NUM_TASKS", std::to_string(total)},
          {"SLURM_TASKS_PER_NODE", compressed},
          {"SLURM_STEP_TASKS_PER_NODE", compressed},
          {"SLURM_JOB_NODELIST", "n[1-" + n + "]"},
          {"SLURM_STEP_NODELIST", "n[1-" + n + "]"},
          {"SLURMD_NODENAME", "n" + std::to_string(node + 1)},
          {"MASTER_ADDR", "127.0.0.1"}};
}

TEST(Uneven, SlurmTaskPerGpuStepsGiveContiguousRanksPerNode) {
  for (const auto& [counts, compressed] :
       std::vector<std::pair<std::vector<int>, std::string>>{{{3, 1}, "3,1"}, {{2, 2, 2, 1}, "2(x3),1"}}) {
    int total = 0;
    for (int c : counts) total += c;
    std::vector<Seen> all;
    for (int proc = 0; proc < total; ++proc) {
      // The real launch: taehv-run execs the worker in place of itself, as srun's task.
      std::vector<std::string> argv = {taehvRun(), "--backend", "slurm", "--"};
      argv.insert(argv.end(), kPrintEnv.begin(), kPrintEnv.end());
      const auto r = runProcess(argv, envWith(slurmTask(counts, compressed, proc)));
      ASSERT_EQ(r.exit_code, 0) << compressed << " task " << proc << ": " << r.err;
      for (const Seen& s : seen(r.out)) all.push_back(s);
    }
    SCOPED_TRACE(compressed);
    expectLayout(all, counts);

    // describe --json of the last node's task: its count, offset and every node's count.
    const auto r = runProcess({taehvRun(), "describe", "--json", "--backend", "slurm", "--", "/bin/true"},
                              envWith(slurmTask(counts, compressed, total - 1)));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j.size(), 1u);
    EXPECT_EQ(j[0]["rank_offset"], total - counts.back());
    EXPECT_EQ(j[0]["local_world_size"], counts.back());
    EXPECT_EQ(j[0]["world_size"], total);
    EXPECT_EQ(j[0]["node_nprocs"], nlohmann::json(counts));
    EXPECT_NE(j[0]["provenance"]["node_nprocs"].template get<std::string>().find(compressed), std::string::npos) << r.out;
  }
}

// ---- Per-node modes: each node says its own count, the node group agrees on the offsets --------------------

/// Runs one taehv-run per node at once on loopback (`node_args(k)` = node k's own arguments) and returns all.
std::vector<ProcessResult> runNodes(int nnodes, const std::function<std::vector<std::string>(int)>& node_args,
                                    const std::function<std::map<std::string, std::string>(int)>& node_env) {
  std::vector<std::future<ProcessResult>> nodes;
  for (int k = 0; k < nnodes; ++k) {
    nodes.push_back(std::async(std::launch::async, [&, k] {
      std::vector<std::string> argv = {taehvRun()};
      const auto more = node_args(k);
      argv.insert(argv.end(), more.begin(), more.end());
      argv.push_back("--");
      argv.insert(argv.end(), kPrintEnv.begin(), kPrintEnv.end());
      return runProcess(argv, node_env(k), std::chrono::seconds(60));
    }));
  }
  std::vector<ProcessResult> out;
  for (auto& f : nodes) out.push_back(f.get());
  return out;
}

/// Below the kernel's ephemeral range (32768-60999), where an outgoing connection of any process may hold a port.
int testPort(int slot) { return 30000 + static_cast<int>(::getpid() % 300) * 8 + slot * 2; }

TEST(Uneven, ManualNodesWithTwoAndOneWorkersAgreeThroughTheNodeGroup) {
  const int port = testPort(0);
  const std::vector<int> counts = {2, 1};
  const auto results = runNodes(
      2,
      [&](int k) {
        return std::vector<std::string>{"--backend", "local", "--nnodes", "2", "--node-rank", std::to_string(k),
                                        "--nproc-per-node", std::to_string(counts[k]), "--master-addr", "127.0.0.1",
                                        "--master-port", std::to_string(port)};
      },
      [&](int) { return envWith({{"TAEHV_JOB_TOKEN", kToken}}); });
  std::vector<Seen> all;
  for (const auto& r : results) {
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const Seen& s : seen(r.out)) all.push_back(s);
  }
  expectLayout(all, counts);
  EXPECT_NE(results[0].err.find("this node runs ranks 0..1 of world size 3 (per-node counts 2,1)"), std::string::npos)
      << results[0].err;
  EXPECT_NE(results[1].err.find("this node runs ranks 2..2 of world size 3"), std::string::npos) << results[1].err;
}

/// Task of `srun --ntasks-per-node=1` on node `node` of `nnodes`, job 91 step 0: one launcher per node.
Env slurmNodeTask(int nnodes, int node, int port) {
  const std::string n = std::to_string(nnodes);
  return {{"SLURM_JOB_ID", "91"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_PROCID", std::to_string(node)},
          {"SLURM_LOCALID", "0"},
          {"SLURM_NODEID", std::to_string(node)},
          {"SLURM_NNODES", n},
          {"SLURM_STEP_NUM_NODES", n},
          {"SLURM_NTASKS", n},
          {"SLURM_STEP_NUM_TASKS", n},
          {"SLURM_TASKS_PER_NODE", "1(x" + n + ")"},
          {"SLURM_STEP_TASKS_PER_NODE", "1(x" + n + ")"},
          {"SLURM_JOB_NODELIST", "n[1-" + n + "]"},
          {"SLURM_STEP_NODELIST", "n[1-" + n + "]"},
          {"SLURMD_NODENAME", "n" + std::to_string(node + 1)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)},
          {"TAEHV_JOB_TOKEN", kToken}};
}

TEST(Uneven, SlurmOneTaskPerNodeWithUnevenNodesAgreesThroughTheNodeGroup) {
  // 3,1: each node's launcher passes its own --nproc-per-node (a node with fewer usable GPUs); 2(x3),1: every node
  // is told all counts (--slurm-nprocs, what `submit --node-nprocs` renders) and the group's answer must agree.
  int slot = 1;
  for (const auto& [counts, list] :
       std::vector<std::pair<std::vector<int>, std::string>>{{{3, 1}, ""}, {{2, 2, 2, 1}, "2(x3),1"}}) {
    const int port = testPort(slot++);
    const int nnodes = static_cast<int>(counts.size());
    const auto results = runNodes(
        nnodes,
        [&](int k) {
          if (!list.empty()) return std::vector<std::string>{"--backend", "slurm", "--slurm-nprocs", list};
          return std::vector<std::string>{"--backend", "slurm", "--nproc-per-node", std::to_string(counts[k])};
        },
        [&](int k) { return envWith(slurmNodeTask(nnodes, k, port)); });
    std::vector<Seen> all;
    for (const auto& r : results) {
      ASSERT_EQ(r.exit_code, 0) << r.err;
      for (const Seen& s : seen(r.out)) all.push_back(s);
    }
    expectLayout(all, counts);
  }
}

// ---- Malformed counts: one line, exit 2, before anything starts -------------------------------------------------

TEST(Uneven, MalformedCountsAreOneClearErrorWithExit2) {
  struct Case {
    Env env;
    std::vector<std::string> args;
    std::string says;
  };
  Env zero_repeat = slurmTask({2, 2}, "2(x2)", 0);
  zero_repeat["SLURM_STEP_TASKS_PER_NODE"] = "2(x0)";
  Env bad_sum = slurmTask({3, 1}, "3,1", 0);
  bad_sum["SLURM_STEP_NUM_TASKS"] = bad_sum["SLURM_NTASKS"] = "5";
  Env zero_count = slurmTask({3, 1}, "3,1", 0);
  zero_count["SLURM_STEP_TASKS_PER_NODE"] = zero_count["SLURM_TASKS_PER_NODE"] = "3,0";
  zero_count["SLURM_STEP_NUM_TASKS"] = zero_count["SLURM_NTASKS"] = "3";
  const std::string dir = tempDir();
  const std::string hostfile = dir + "/hosts";
  {
    std::ofstream(hostfile) << "127.0.0.1 slots=2\nlocalhost slots=0\n";
  }
  for (const Case& c : std::vector<Case>{
           {zero_repeat, {"--backend", "slurm"}, "'2(x0)' has a bad repeat count"},
           {bad_sum, {"--backend", "slurm"}, "SLURM_STEP_TASKS_PER_NODE=3,1 adds up to 4 tasks but SLURM_STEP_NUM_TASKS=5"},
           {zero_count, {"--backend", "slurm"}, "node 1 has 0"},
           {slurmNodeTask(2, 0, 29999), {"--backend", "slurm", "--slurm-nprocs", "3,1,1"},
            "--slurm-nprocs 3,1,1 lists 3 nodes but env SLURM_STEP_NUM_NODES=2"},
           {slurmNodeTask(2, 1, 29999), {"--backend", "slurm", "--slurm-nprocs", "3,0"}, "node 1 has 0 workers"},
           {slurmNodeTask(2, 1, 29999), {"--backend", "slurm", "--slurm-nprocs", "2(x0)"}, "has a bad repeat count"},
           {{}, {"--backend", "ssh", "--hostfile", hostfile}, "slots must be a whole number from 1"},
       }) {
    std::vector<std::string> argv = {taehvRun()};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    argv.insert(argv.end(), {"--", "/bin/true"});
    const auto r = runProcess(argv, envWith(c.env));
    EXPECT_EQ(r.exit_code, 2) << c.says << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace taehv::test
