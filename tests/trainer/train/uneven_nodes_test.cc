// Nodes with different process counts through the real taehv-run (its rank layout feeding the trainer's shards).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "train_runs.h"

namespace taehv::train {
namespace {
namespace fs = std::filesystem;
using namespace taehv::testing;  // train_runs.h: launch, wait, tiny, ...

// Nodes with different process counts (issue 14), through the real taehv-run: node 0 runs 3 workers and node 1
// runs 1 (each passes its own --nproc-per-node; the node group agrees on the rank offsets), and their weights after
// N steps are those of 4 workers on one node. Ranks laid out wrongly (a collision, a hole, local ranks permuted
// into the data shards) would hang the rendezvous or train on other clips.
std::string taehvRun() {
  const char* bin = std::getenv("TAEHV_BIN_DIR");
  return std::string(bin ? bin : "bin") + "/taehv-run";
}

/// Starts each argv as its own process, output to `<log_prefix>.<i>.log`.
Job startEach(const std::vector<std::vector<std::string>>& argvs, const std::string& log_prefix) {
  Job job;
  for (std::size_t i = 0; i < argvs.size(); ++i) {
    std::vector<std::string> argv = argvs[i];
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    const std::string log = log_prefix + "." + std::to_string(i) + ".log";
    const pid_t pid = fork();
    if (pid == 0) {
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      execv(cargv[0], cargv.data());
      _exit(127);
    }
    job.pids.push_back(pid);
    job.logs.push_back(log);
  }
  job.status.assign(argvs.size(), -1);
  return job;
}

TEST(UnevenNodes, ThreePlusOneWorkersOnTwoNodesReachTheWeightsOfFourOnOne) {
  const auto dir = runDir();
  const int64_t steps = 3;
  const std::string one = dir + "/one-node", two = dir + "/two-nodes";
  const auto train = [&](const std::string& out) {
    return cat({"--", trainer()}, plus(tiny(out, steps), cat(kSgd, {"train.batch_per_rank=1", "train.device=cpu"})));
  };
  // CPU workers, exactly as on a machine without a GPU: no GPU binding (no GPU-count check) and train.device=cpu.
  Job a = startEach({cat({taehvRun(), "--standalone", "--nproc-per-node", "4", "--gpu-binding", "none", "--no-prefix"},
                         train(one))},
                    dir + "/one");
  expectSuccess(a, 280);
  const int port = freePort();
  std::vector<std::vector<std::string>> nodes;
  for (int node = 0; node < 2; ++node) {
    nodes.push_back(cat({taehvRun(), "--backend", "local", "--nnodes", "2", "--node-rank", std::to_string(node),
                         "--nproc-per-node", node == 0 ? "3" : "1", "--gpu-binding", "none", "--master-addr",
                         "127.0.0.1", "--master-port", std::to_string(port), "--no-prefix"},
                        train(two)));
  }
  Job b = startEach(nodes, dir + "/two");
  expectSuccess(b, 280);
  const std::string log0 = slurp(b.logs[0]);
  EXPECT_NE(log0.find("4 rank(s), backend gloo"), std::string::npos) << log0;
  EXPECT_NE(log0.find("this node runs ranks 0..2 of world size 4 (per-node counts 3,1)"), std::string::npos) << log0;
  EXPECT_NE(slurp(b.logs[1]).find("this node runs ranks 3..3 of world size 4"), std::string::npos)
      << slurp(b.logs[1]);
  const double err = relativeError(one, two, steps);
  std::printf("  3+1 workers on 2 nodes vs 4 on 1: relative weight difference %.3g\n", err);
  EXPECT_LT(err, 2e-3) << "3 + 1 workers on two nodes differ from 4 workers on one";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace taehv::train
