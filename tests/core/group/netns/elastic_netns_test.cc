// Elastic re-formation with real taehv-run and real Gloo training (taehv-train) on 2 "nodes" x 2 ranks: network
// namespaces ri-h1 (node 0, 10.77.0.2) and ri-h2 (node 1), `--nnodes 1:2 --max-restarts 1`, a checkpoint every step.
// Node 1 is cut off (`ip link set <veth> down`): node 0 re-forms alone and its 2 ranks resume from the last
// checkpoint with grad_accum 1 -> 2 (the global batch stays 4) and finish; the weights must be those of an
// uninterrupted 4-rank run within fp tolerance (as Resume.AtAnotherWorldSizeKeepsTheGlobalBatchAndTheSampleStream).
// The cut-off node sees node 0 lost and ends, saying the job cannot re-form without node 0. Then node 0 itself cut:
// node 1 ends the same way within --node-timeout + --shutdown-grace (+ slack). Needs root, iproute2 and taehv-train
// (skipped otherwise); slow; run under `flock /tmp/taehv-slow.lock`.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "checkpoint_weights.h"
#include "core/group/training_nodes.h"
#include "infra/built_programs.h"
#include "netns_harness.h"

namespace {

using namespace taehv::netns;
namespace fs = std::filesystem;

constexpr int kNodeTimeoutS = 5;
constexpr int kGraceS = 3;
constexpr auto kSlack = 6s;  ///< process start-up and exit, the heartbeat tick, a loaded 2-core machine
constexpr int kSteps = 12;
constexpr int kCutAfterStep = 4;

/// taehv-train on tiny clips with plain SGD (the update is proportional to the averaged gradient, so a wrong
/// batch or accumulation shows in the weights), a checkpoint every step, resuming whatever is there.
std::vector<std::string> trainer(const std::string& out) {
  std::vector<std::string> argv = {taehv::testing::builtBinDir() + "/taehv-train"};
  const std::vector<std::string> sets = {
      "data.size=32", "data.frames=4", "train.threads=1", "log.every=1", "log.preview_every=0",
      "checkpoint.export_safetensors=false", "train.steps=" + std::to_string(kSteps), "output.dir=" + out,
      "train.seed=3", "train.optimizer=sgd", "train.lr=0.5", "train.warmup_steps=0", "train.grad_clip=0",
      "train.weight_decay=0", "checkpoint.every=1", "checkpoint.keep=20", "dist.bucket_mb=4",
      "train.batch_per_rank=1"};
  for (const auto& set : sets) {
    argv.push_back("--set");
    argv.push_back(set);
  }
  argv.push_back("--resume");
  argv.push_back("latest");
  return argv;
}

using taehv::testing::distance;
using taehv::testing::loadTensors;

class ElasticNetns : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces)";
    if (sh("command -v ip >/dev/null && command -v nsenter >/dev/null") != 0) GTEST_SKIP() << "needs iproute2, nsenter";
    SKIP_WITHOUT_TRAINER_OR_ASSERT_BUILT();
    char tmpl[] = "/tmp/taehv-elastic-netns-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    namespaces_ = std::make_unique<Namespaces>(2);
    ASSERT_TRUE(namespaces_->ready()) << "namespaces did not come up";
  }
  void TearDown() override {
    for (auto& n : nodes_) n.kill();
    namespaces_.reset();
    if (!HasFailure()) fs::remove_all(dir_);
  }

  /// Node `id` (namespace ri-h<id+1>): 2 ranks of the elastic job.
  void startNode(int id, int port) {
    std::vector<std::string> argv = {taehv::testing::builtBinDir() + "/taehv-run", "--backend", "local", "--nnodes", "1:2",
                                     "--node-rank", std::to_string(id), "--master-addr", "10.77.0.2",
                                     "--master-port", std::to_string(port), "--nproc-per-node", "2",
                                     "--node-timeout", std::to_string(kNodeTimeoutS), "--shutdown-grace",
                                     std::to_string(kGraceS), "--max-restarts", "1", "--"};
    const auto train = trainer(dir_ + "/elastic");
    argv.insert(argv.end(), train.begin(), train.end());
    nodes_[static_cast<std::size_t>(id)].spawn(id + 1, argv, dir_ + "/node" + std::to_string(id) + ".log");
  }

  /// Starts both nodes and waits until the 4 ranks have saved checkpoint `step`.
  void trainUntil(int step) {
    const int port = 28000 + static_cast<int>(::getpid() % 400) * 2;
    startNode(0, port);
    startNode(1, port);
    ASSERT_NO_FATAL_FAILURE(taehv::test::waitForCheckpoint(nodes_, dir_, step, 240s));
  }

  /// Waits for node `id` to end (at most `bound` after `t0`, plus 60 s to report a hang) and returns its seconds.
  double waitEnd(int id, Clock::time_point t0, std::chrono::seconds bound) {
    NodeProcess& n = nodes_[static_cast<std::size_t>(id)];
    while (!n.poll() && Clock::now() < t0 + bound + 60s) std::this_thread::sleep_for(50ms);
    EXPECT_TRUE(n.poll()) << "node " << id << " still runs:\n" << readFile(n.log);
    return std::chrono::duration<double>(n.ended - t0).count();
  }

  std::string dir_;
  std::unique_ptr<Namespaces> namespaces_;
  std::array<NodeProcess, 2> nodes_;
};

TEST_F(ElasticNetns, OneOfTwoNodesCutTheOtherFinishesWithTheUninterruptedWeights) {
  // The reference: the same job on 4 ranks of one node, never interrupted (loopback, outside the namespaces).
  const std::string ref = dir_ + "/reference";
  std::string command = taehv::testing::builtBinDir() + "/taehv-run --standalone --nproc-per-node 4 --";
  for (const auto& a : trainer(ref)) command += " '" + a + "'";
  const auto r0 = Clock::now();
  ASSERT_EQ(sh(command + " > " + dir_ + "/reference.log 2>&1"), 0) << readFile(dir_ + "/reference.log");
  std::printf("reference: 4 ranks, %d steps in %.1f s\n", kSteps, std::chrono::duration<double>(Clock::now() - r0).count());

  trainUntil(kCutAfterStep);
  const auto t0 = Clock::now();
  ASSERT_EQ(sh("ip link set ri-h2-v down"), 0);  // node 1
  const double cut_end = waitEnd(1, t0, std::chrono::seconds(2 * kNodeTimeoutS + kGraceS) + kSlack);
  const double done = waitEnd(0, t0, 300s);
  const std::string log0 = readFile(nodes_[0].log), log1 = readFile(nodes_[1].log);
  std::printf("node 1 cut after step %d: it ended %.1f s later (exit %d); node 0 re-formed alone and finished %.1f s "
              "after the cut (exit %d)\n", kCutAfterStep, cut_end, nodes_[1].exit_status, done, nodes_[0].exit_status);
  EXPECT_EQ(nodes_[0].exit_status, 0) << log0;
  EXPECT_NE(nodes_[1].exit_status, 0) << log1;
  EXPECT_LE(cut_end, 2 * kNodeTimeoutS + kGraceS + 6.0) << log1;
  EXPECT_NE(log1.find("node 0 (host "), std::string::npos) << log1;
  EXPECT_NE(log1.find("the job cannot re-form without node 0"), std::string::npos) << log1;
  EXPECT_NE(log0.find("node 1 (host "), std::string::npos) << log0;
  EXPECT_NE(log0.find("re-forming with the nodes alive for restart 1 of 1"), std::string::npos) << log0;
  EXPECT_NE(log0.find("formed with 1 of 1..2 nodes"), std::string::npos) << log0;
  EXPECT_NE(log0.find("grad_accum 1 -> 2 at 2 ranks"), std::string::npos) << log0;
  EXPECT_NE(log0.find("2 rank(s), backend gloo"), std::string::npos) << log0;

  const auto state = nlohmann::json::parse(readFile(dir_ + "/elastic/checkpoint-" + std::to_string(kSteps) + "/state.json"));
  EXPECT_EQ(state.at("samples_consumed").get<int64_t>(), 4 * kSteps) << "none skipped or repeated";
  EXPECT_EQ(state.at("grad_accum").get<int64_t>(), 2);
  EXPECT_EQ(state.at("global_batch").get<int64_t>(), 4);
  const auto at = [](const std::string& out, int step) {
    return loadTensors(out + "/checkpoint-" + std::to_string(step) + "/model.pt");
  };
  const auto w_ref = at(ref, kSteps);
  const double update = distance(w_ref, at(ref, kSteps - 2));
  ASSERT_GT(update, 1e-4) << "training did not move the weights; the comparison would be meaningless";
  const double err = distance(w_ref, at(dir_ + "/elastic", kSteps)) / update;
  std::printf("elastic vs uninterrupted 4 ranks: |w_e - w_ref| / |last two updates| = %.3g (update norm %.3g)\n", err,
              update);
  EXPECT_LT(err, 2e-3);
}

TEST_F(ElasticNetns, Node0CutIsAClearEndForNode1) {
  trainUntil(1);
  const auto t0 = Clock::now();
  ASSERT_EQ(sh("ip link set ri-h1-v down"), 0);  // node 0: the leader and the workers' store
  const auto bound = std::chrono::seconds(kNodeTimeoutS + kGraceS) + kSlack;
  const double took = waitEnd(1, t0, std::chrono::duration_cast<std::chrono::seconds>(bound));
  const std::string log1 = readFile(nodes_[1].log);
  std::printf("node 0 cut: node 1 ended %.1f s later (exit %d; bound %d s)\n", took, nodes_[1].exit_status,
              static_cast<int>(std::chrono::duration_cast<std::chrono::seconds>(bound).count()));
  EXPECT_EQ(nodes_[1].exit_status, 75) << log1;
  EXPECT_LE(took, std::chrono::duration<double>(bound).count()) << log1;
  EXPECT_NE(log1.find("node 0 (host "), std::string::npos) << log1;
  EXPECT_NE(log1.find("address 10.77.0.2:"), std::string::npos) << log1;
  EXPECT_NE(log1.find("not heard from for"), std::string::npos) << log1;
  EXPECT_NE(log1.find("the job cannot re-form without node 0"), std::string::npos) << log1;
  EXPECT_EQ(log1.find("re-forming"), std::string::npos) << log1;
}

}  // namespace
