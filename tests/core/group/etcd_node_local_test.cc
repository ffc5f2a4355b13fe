// Checkpoints on node-local disks (issue 34, item 3): real taehv-run on the etcd group, a real etcd, real Gloo
// training (taehv-train) on loopback. Each node has its own output folder, saves every checkpoint there itself
// (checkpoint.node_local=true) and reports what it holds to etcd (--node-local-checkpoints); each formation agrees
// on the newest step every node holds and the workers resume from exactly that step (TAEHV_RESUME_STEP).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "checkpoint_weights.h"
#include "etcd_training_test.h"
#include "infra/built_programs.h"
#include "run_process.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;
using taehv::test::readFile;

/// taehv-train on tiny clips with plain SGD (as EtcdTrain), a checkpoint every step into `out`, saved by every node.
std::vector<std::string> trainer(const std::string& out, int steps) {
  std::vector<std::string> argv = {taehv::testing::builtBinDir() + "/taehv-train"};
  for (const std::string& set : std::vector<std::string>{"data.size=32", "data.frames=4", "train.threads=1",
        "log.every=1", "log.preview_every=0", "checkpoint.export_safetensors=false", "train.steps=" + std::to_string(steps),
        "output.dir=" + out, "train.seed=3", "train.optimizer=sgd", "train.lr=0.5", "train.warmup_steps=0",
        "train.grad_clip=0", "train.weight_decay=0", "checkpoint.every=1", "checkpoint.keep=20", "dist.bucket_mb=4",
        "train.batch_per_rank=1", "checkpoint.node_local=true"}) {
    argv.push_back("--set");
    argv.push_back(set);
  }
  argv.insert(argv.end(), {"--resume", "latest"});
  return argv;
}

/// The pid of a taehv-train child of `parent` (its worker), or -1.
pid_t workerOf(pid_t parent) {
  std::error_code ec;
  for (const auto& task : fs::directory_iterator("/proc/" + std::to_string(parent) + "/task", ec)) {
    std::ifstream children(task.path() / "children");
    for (pid_t child = 0; children >> child;) {
      if (readFile("/proc/" + std::to_string(child) + "/comm").rfind("taehv-train", 0) == 0) return child;
    }
  }
  return -1;
}

/// The steps of the checkpoint folders in `dir`, sorted.
std::vector<int> checkpointSteps(const std::string& dir) {
  std::vector<int> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("checkpoint-", 0) == 0) out.push_back(std::stoi(name.substr(11)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

class EtcdNodeLocal : public taehv::test::EtcdTrainingTest {
 protected:
  std::string out(int id) const { return dir_ + "/node" + std::to_string(id); }

  /// Node `id` of `nnodes` (one worker each), its own output folder reported to etcd. `attempt` names the run id
  /// and the log, so a second job in the same test starts afresh in etcd.
  void startNode(int id, const std::string& nnodes, int steps, int attempt) {
    // Below the kernel's ephemeral range (32768-60999), apart from EtcdTrain's 23400-23798.
    const int port = 24500 + static_cast<int>(::getpid() % 200) * 2;
    std::vector<std::string> argv = {taehv::testing::builtBinDir() + "/taehv-run", "--backend", "local", "--nnodes",
                                     nnodes, "--node-rank", std::to_string(id), "--master-port",
                                     std::to_string(port), "--nproc-per-node", "1", "--node-timeout", "5",
                                     "--shutdown-grace", "3", "--max-restarts", "1", "--run-id",
                                     "etcd-node-local-" + std::to_string(::getpid()) + "-" + std::to_string(attempt),
                                     "--rdzv-backend", "etcd", "--rdzv-endpoint", etcd_.endpointText(),
                                     "--node-local-checkpoints", out(id), "--"};
    const auto train = trainer(out(id), steps);
    argv.insert(argv.end(), train.begin(), train.end());
    nodes_[static_cast<std::size_t>(id)].spawn(
        argv, dir_ + "/node" + std::to_string(id) + "-" + std::to_string(attempt) + ".log",
        "etcd-node-local-token-0123456789ab");
  }

  /// Waits (at most 300 s) until the first `n` nodes ended.
  void waitAll(int n) {
    const auto until = Clock::now() + 300s;
    for (int i = 0; i < n; ++i) {
      while (!nodes_[static_cast<std::size_t>(i)].poll() && Clock::now() < until) std::this_thread::sleep_for(100ms);
    }
  }

  /// Waits (at most 300 s) until each of the 3 nodes saved its own copy of `step` (they save at slightly different
  /// times); fails when a node ends first.
  void waitUntilEveryNodeSaved(int step) {
    const auto saved = [&] {
      for (int i = 0; i < 3; ++i) {
        if (!fs::exists(out(i) + "/checkpoint-" + std::to_string(step) + "/manifest.json")) return false;
      }
      return true;
    };
    const auto until = Clock::now() + 300s;
    while (!saved()) {
      for (auto& n : nodes_) ASSERT_FALSE(n.poll()) << "a node ended (exit " << n.exit_status << "):\n" << readFile(n.log);
      ASSERT_LT(Clock::now(), until) << "training did not reach step " << step << ":\n" << readFile(nodes_[0].log);
      std::this_thread::sleep_for(100ms);
    }
  }
};

constexpr int kSteps = 8;

TEST_F(EtcdNodeLocal, AWorkerKilledEveryNodeResumesTheSameAgreedStepFromItsOwnCopyAndFinishes) {
  for (int i = 0; i < 3; ++i) startNode(i, "3", kSteps, 0);
  ASSERT_NO_FATAL_FAILURE(waitUntilEveryNodeSaved(3));
  const pid_t worker = workerOf(nodes_[1].pid);
  ASSERT_GT(worker, 0) << "no taehv-train worker under node 1's taehv-run";
  ASSERT_EQ(::kill(worker, SIGKILL), 0);
  waitAll(3);
  std::string step;  // the step formation 1 agreed on, as node 0 says it
  for (int i = 0; i < 3; ++i) {
    const taehv::test::TrainNode& n = nodes_[static_cast<std::size_t>(i)];
    const std::string log = readFile(n.log);
    EXPECT_EQ(n.exit_status, 0) << log;
    EXPECT_NE(log.find("formation 0 resumes from step 0 (no node holds a checkpoint: from scratch)"), std::string::npos)
        << log;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(log, m, std::regex("formation 1 resumes from step ([0-9]+), the newest checkpoint "
                                                     "every node holds")))
        << log;
    if (i == 0) step = m[1];
    EXPECT_EQ(m[1], step) << "node " << i << " resumed another step:\n" << log;
    EXPECT_NE(log.find("resume: TAEHV_RESUME_STEP=" + step + " (agreed by the node group): resuming " + out(i) +
                       "/checkpoint-" + step),
              std::string::npos)
        << log;
    const auto state = nlohmann::json::parse(readFile(out(i) + "/checkpoint-" + std::to_string(kSteps) + "/state.json"));
    EXPECT_EQ(state.at("samples_consumed").get<int64_t>(), 3 * kSteps) << "none skipped or repeated on node " << i;
  }
  std::printf("worker of node 1 killed after every node saved step 3: formation 1 agreed on step %s\n", step.c_str());
  EXPECT_GE(std::stoi(step), 3);
  // Every node's own copy is the same training state (the ranks' replicas, saved by each node's local rank 0).
  const auto at = [&](int node) {
    return taehv::testing::loadTensors(out(node) + "/checkpoint-" + std::to_string(kSteps) + "/model.pt");
  };
  EXPECT_EQ(taehv::testing::distance(at(0), at(1)), 0.0);
  EXPECT_EQ(taehv::testing::distance(at(0), at(2)), 0.0);
}

TEST_F(EtcdNodeLocal, Node0KilledNodes1And2ResumeTheNewestStepBothHoldFromTheirOwnDisks) {
  for (int i = 0; i < 3; ++i) startNode(i, "2:3", kSteps, 0);
  ASSERT_NO_FATAL_FAILURE(waitUntilEveryNodeSaved(3));
  const auto t0 = Clock::now();
  ASSERT_EQ(::kill(nodes_[0].pid, SIGKILL), 0);  // node 0's taehv-run, the first master; its disk is gone with it
  while ((!nodes_[1].poll() || !nodes_[2].poll()) && Clock::now() < t0 + 300s) std::this_thread::sleep_for(100ms);
  std::string step;
  for (int i = 1; i < 3; ++i) {
    const std::string log = readFile(nodes_[static_cast<std::size_t>(i)].log);
    EXPECT_EQ(nodes_[static_cast<std::size_t>(i)].exit_status, 0) << log;
    EXPECT_NE(log.find("formation 1: node 1 (host "), std::string::npos) << log;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(log, m, std::regex("formation 1 resumes from step ([0-9]+), the newest checkpoint "
                                                     "every node holds")))
        << log;
    if (i == 1) step = m[1];
    EXPECT_EQ(m[1], step) << log;
    EXPECT_NE(log.find("resuming " + out(i) + "/checkpoint-" + step), std::string::npos) << log;
  }
  // Node 1 runs global rank 0 now: its run summary, at the new world size.
  EXPECT_NE(readFile(nodes_[1].log).find("2 rank(s), backend gloo"), std::string::npos) << readFile(nodes_[1].log);
  std::printf("node 0 killed after every node saved step 3: nodes 1 and 2 resumed step %s and finished %.1f s later\n",
              step.c_str(), std::chrono::duration<double>(Clock::now() - t0).count());
  EXPECT_GE(std::stoi(step), 3);
  const auto state = nlohmann::json::parse(readFile(out(1) + "/checkpoint-" + std::to_string(kSteps) + "/state.json"));
  // 3 samples a step up to the agreed step, then 2 (2 ranks cannot keep the global batch of 3: lr scaled instead).
  const int resumed = std::stoi(step);
  EXPECT_EQ(state.at("samples_consumed").get<int64_t>(), 3 * resumed + 2 * (kSteps - resumed))
      << "none skipped or repeated";
  EXPECT_EQ(taehv::testing::distance(
                taehv::testing::loadTensors(out(1) + "/checkpoint-" + std::to_string(kSteps) + "/model.pt"),
                taehv::testing::loadTensors(out(2) + "/checkpoint-" + std::to_string(kSteps) + "/model.pt")),
            0.0);
}

TEST_F(EtcdNodeLocal, ANodeWithoutTheNewestMakesEveryNodeResumeThePreviousOneAndNoneInCommonIsRefused) {
  for (int i = 0; i < 2; ++i) startNode(i, "2", 4, 0);
  waitAll(2);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(nodes_[static_cast<std::size_t>(i)].exit_status, 0) << readFile(nodes_[i].log);
  ASSERT_EQ(checkpointSteps(out(1)), (std::vector<int>{1, 2, 3, 4}));

  // The trainer alone, told a step its folder lacks: one line, exit 2.
  fs::remove_all(out(1) + "/checkpoint-4");
  std::string command = "TAEHV_RESUME_STEP=4";
  for (const auto& a : trainer(out(1), 6)) command += " '" + a + "'";
  const int rc = std::system((command + " > " + dir_ + "/alone.log 2>&1").c_str());
  const std::string alone = readFile(dir_ + "/alone.log");
  EXPECT_EQ(WEXITSTATUS(rc), 2) << alone;
  EXPECT_NE(alone.find("TAEHV_RESUME_STEP=4 (the step taehv-run's node group agreed every node holds) but this "
                       "node's copy " + out(1) + "/checkpoint-4 cannot be resumed: it is missing"),
            std::string::npos)
      << alone;

  // Node 1 lost its copy of step 4: both resume from 3 and go on to 6.
  for (int i = 0; i < 2; ++i) startNode(i, "2", 6, 1);
  waitAll(2);
  for (int i = 0; i < 2; ++i) {
    const std::string log = readFile(nodes_[static_cast<std::size_t>(i)].log);
    EXPECT_EQ(nodes_[static_cast<std::size_t>(i)].exit_status, 0) << log;
    EXPECT_NE(log.find("formation 0 resumes from step 3, the newest checkpoint every node holds"), std::string::npos)
        << log;
    EXPECT_NE(log.find("resuming " + out(i) + "/checkpoint-3"), std::string::npos) << log;
    const auto state = nlohmann::json::parse(readFile(out(i) + "/checkpoint-6/state.json"));
    EXPECT_EQ(state.at("samples_consumed").get<int64_t>(), 2 * 6) << "steps 4-6 trained once, from step 3";
  }

  // No step in common (node 0 holds 2-6, node 1 only 1): every node says so in one line, nothing is deleted.
  fs::remove_all(out(0) + "/checkpoint-1");
  for (int step = 2; step <= 6; ++step) fs::remove_all(out(1) + "/checkpoint-" + std::to_string(step));
  const std::vector<int> before = checkpointSteps(out(0));
  for (int i = 0; i < 2; ++i) startNode(i, "2", 8, 2);
  waitAll(2);
  for (int i = 0; i < 2; ++i) {
    const std::string log = readFile(nodes_[static_cast<std::size_t>(i)].log);
    EXPECT_NE(nodes_[static_cast<std::size_t>(i)].exit_status, 0) << log;
    EXPECT_NE(log.find("no checkpoint is held by every node of the formation that holds any, so none can be resumed "
                       "(node 0 (host "),
              std::string::npos)
        << log;
    EXPECT_NE(log.find(": 2,3,4,5,6; node 1 (host "), std::string::npos) << log;
    EXPECT_EQ(log.find("rank(s), backend gloo"), std::string::npos) << "no worker may start:\n" << log;
  }
  EXPECT_EQ(checkpointSteps(out(0)), before);
  EXPECT_EQ(checkpointSteps(out(1)), (std::vector<int>{1}));
}

// A fresh node (a replacement, an emptied disk: its folder holds no checkpoint) does not stop the job: the formation
// agrees on the newest step the other nodes hold, the fresh node's worker receives that checkpoint from rank 0 over
// the process group and saves its own verified copy, and both nodes train on with the same weights.
TEST_F(EtcdNodeLocal, AFreshNodeReceivesTheAgreedCheckpointFromTheOthersAndTrainsOn) {
  for (int i = 0; i < 2; ++i) startNode(i, "2", 4, 0);
  waitAll(2);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(nodes_[static_cast<std::size_t>(i)].exit_status, 0) << readFile(nodes_[i].log);
  fs::remove_all(out(1));

  for (int i = 0; i < 2; ++i) startNode(i, "2", 6, 1);
  waitAll(2);
  const std::string log1 = readFile(nodes_[1].log);
  for (int i = 0; i < 2; ++i) {
    const std::string log = readFile(nodes_[static_cast<std::size_t>(i)].log);
    ASSERT_EQ(nodes_[static_cast<std::size_t>(i)].exit_status, 0) << log;
    EXPECT_NE(log.find("formation 0 resumes from step 4"), std::string::npos) << log;
    EXPECT_NE(log.find("resuming " + out(i) + "/checkpoint-4"), std::string::npos) << log;
  }
  EXPECT_NE(log1.find("resume: this node held no checkpoint; received checkpoint-4 from rank 0 over the process "
                      "group ("),
            std::string::npos)
      << log1;
  EXPECT_NE(log1.find("checksums match) into " + out(1) + "/checkpoint-4"), std::string::npos) << log1;
  EXPECT_EQ(readFile(nodes_[0].log).find("received checkpoint"), std::string::npos) << "node 0 held it";
  // Node 1's copy of step 4 is node 0's, file for file; both went on from it to step 6 with the same weights.
  for (const std::string file : {"model.pt", "optimizer.pt", "state.json"}) {
    EXPECT_EQ(readFile(out(1) + "/checkpoint-4/" + file), readFile(out(0) + "/checkpoint-4/" + file)) << file;
  }
  EXPECT_EQ(checkpointSteps(out(1)), (std::vector<int>{4, 5, 6}));
  EXPECT_EQ(taehv::testing::distance(taehv::testing::loadTensors(out(0) + "/checkpoint-6/model.pt"),
                                     taehv::testing::loadTensors(out(1) + "/checkpoint-6/model.pt")),
            0.0);
  const auto state = nlohmann::json::parse(readFile(out(1) + "/checkpoint-6/state.json"));
  EXPECT_EQ(state.at("samples_consumed").get<int64_t>(), 2 * 6) << "steps 5-6 trained once, from step 4";
}

TEST_F(EtcdNodeLocal, NodeLocalCheckpointsWithZeroShardsAreRefusedInOneLine) {
  std::string command;
  for (const auto& a : trainer(out(0), 2)) command += " '" + a + "'";
  const int rc = std::system((command + " --set train.optimizer=adamw --set train.zero_stage=1 > " + dir_ +
                              "/zero.log 2>&1").c_str());
  const std::string log = readFile(dir_ + "/zero.log");
  EXPECT_EQ(WEXITSTATUS(rc), 2) << log;
  EXPECT_NE(log.find("checkpoint.node_local saves the full state on each node, but train.zero_stage 1 shards"),
            std::string::npos)
      << log;
}

TEST(EtcdNodeLocalInput, WithoutEtcdIsOneLineAndExit2AndDescribeShowsTheFolder) {
  SKIP_WITHOUT_TRAINER_OR_ASSERT_BUILT();
  const std::string run = taehv::testing::builtBinDir() + "/taehv-run";
  const taehv::test::ProcessResult tcp = taehv::test::runProcess(
      {run, "--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1", "--node-local-checkpoints", "/tmp/x",
       "--", "true"},
      {});
  EXPECT_EQ(tcp.exit_code, 2) << tcp.err;
  EXPECT_NE(tcp.err.find("--node-local-checkpoints '/tmp/x' needs --rdzv-backend etcd"), std::string::npos) << tcp.err;
  const taehv::test::ProcessResult described = taehv::test::runProcess(
      {run, "describe", "--nnodes", "2", "--node-rank", "0", "--master-addr", "127.0.0.1", "--rdzv-backend", "etcd",
       "--rdzv-endpoint", "127.0.0.1:2379", "--node-local-checkpoints", "/data/ckpt", "--", "true"},
      {});
  EXPECT_NE(described.out.find("checkpoints = node-local in /data/ckpt"), std::string::npos) << described.out;
}

}  // namespace
