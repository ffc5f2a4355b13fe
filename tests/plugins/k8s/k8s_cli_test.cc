// The k8s and pai backends through the real `taehv-run` binary: `describe --json` on each platform's
// environment (given exactly, nothing inherited), contradictions as clear errors, and simulated multi-pod jobs:
// one taehv-run process per pod with exactly the environment that pod would get (master on 127.0.0.1), the
// non-master pod started first so that it must wait for the master.
// Environment fixtures and their documentation sources: see k8s_mapping_test.cc and ../pai/pai_test.cc.
// Kubeflow Trainer v2 TrainJob and JobSet pods run in a private network namespace (pod_network.h) where the master's
// DNS name resolves and the platform's fixed port 29500 is free: their environment is exactly the cluster's, the
// rendered manifest resolved as the cluster would (pod_env.h).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "child_process.h"
#include "infra/built_programs.h"
#include "infra/free_port.h"
#include "plugin_host.h"
#include "pod_env.h"
#include "pod_network.h"

namespace taehv::k8s {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using namespace std::chrono_literals;
using testing::ChildProcess;

std::string binDir() { return taehv::testing::builtBinDir(); }

std::string taehvRun() { return binDir() + "/taehv-run"; }

/// A base pod environment: what every container gets, with taehv-run on PATH as in the image.
Env podEnv(Env extra) {
  extra["PATH"] = binDir() + ":/usr/local/bin:/usr/bin:/bin";
  extra["KUBERNETES_SERVICE_HOST"] = "10.96.0.1";
  extra["KUBERNETES_SERVICE_PORT"] = "443";
  return extra;
}

int freePort() { return taehv::testing::freeLowPort(); }

/// Processes whose command line contains `marker` (a per-test temporary path), other than this test.
std::vector<std::string> processesWith(const std::string& marker) {
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string pid = e.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos || pid == std::to_string(getpid())) continue;
    std::string cmdline = testing::readFile(e.path().string() + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(marker) != std::string::npos) found.push_back(pid + ": " + cmdline);
  }
  return found;
}

class K8sCli : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::makeTempDir(); }
  void TearDown() override { fs::remove_all(dir_); }

  struct Result {
    int rc;
    std::string out, err;
  };
  Result run(const std::vector<std::string>& args, const Env& env, std::chrono::seconds limit = 20s) {
    std::vector<std::string> argv = {taehvRun()};
    argv.insert(argv.end(), args.begin(), args.end());
    ChildProcess p(argv, env, dir_ + "/run" + std::to_string(++runs_));
    EXPECT_TRUE(p.started());
    int rc = p.wait(limit);
    return {rc, p.out(), p.err()};
  }
  /// `taehv-run describe --json` (detection on) -> the workers' JSON array.
  Json describe(const Env& env) {
    auto r = run({"describe", "--json"}, env);
    EXPECT_EQ(r.rc, 0) << r.err;
    return r.rc == 0 ? Json::parse(r.out) : Json::array();
  }
  std::string backendOf(const Env& env) {
    auto r = run({"describe"}, env);
    auto pos = r.out.find("backend: ");
    return pos == std::string::npos ? "?" + r.err : r.out.substr(pos + 9, r.out.find('\n', pos) - pos - 9);
  }
  std::string dir_;
  int runs_ = 0;
};

TEST_F(K8sCli, IndexedJobDescribe) {
  Env env = podEnv({{"JOB_COMPLETION_INDEX", "1"},
                    {"TAEHV_K8S_NNODES", "2"},
                    {"TAEHV_K8S_MASTER_ADDR", "t-0.t"},
                    {"TAEHV_K8S_MASTER_PORT", "29500"},
                    {"TAEHV_K8S_NPROC_PER_NODE", "2"}});
  EXPECT_EQ(backendOf(env), "k8s");
  Json w = describe(env);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0]["nnodes"], 2);
  EXPECT_EQ(w[0]["node_rank"], 1);
  EXPECT_EQ(w[0]["rank"], 2);
  EXPECT_EQ(w[1]["rank"], 3);
  EXPECT_EQ(w[0]["world_size"], 4);
  EXPECT_EQ(w[0]["master_addr"], "t-0.t");
  EXPECT_EQ(w[0]["provenance"]["node_rank"], "env JOB_COMPLETION_INDEX");
}

// The WORLD_SIZE trap: training-operator >= v1.7 counts processes; taehv-run must not read 8 as nodes.
TEST_F(K8sCli, PyTorchJobWorldSizeTrapDescribe) {
  Env env = podEnv({{"MASTER_ADDR", "mnist-master-0"},
                    {"MASTER_PORT", "23456"},
                    {"PET_MASTER_ADDR", "mnist-master-0"},
                    {"PET_MASTER_PORT", "23456"},
                    {"WORLD_SIZE", "8"},
                    {"RANK", "1"},
                    {"PET_NODE_RANK", "1"},
                    {"PET_NPROC_PER_NODE", "4"},
                    {"PET_NNODES", "2"},
                    {"PYTHONUNBUFFERED", "1"}});
  EXPECT_EQ(backendOf(env), "k8s");
  Json w = describe(env);
  ASSERT_EQ(w.size(), 4u);
  EXPECT_EQ(w[0]["nnodes"], 2);
  EXPECT_EQ(w[0]["world_size"], 8);
  EXPECT_EQ(w[0]["rank"], 4);
  EXPECT_EQ(w[3]["env"]["WORLD_SIZE"], "8");
  bool explained = false;  // the JSON carries the plan's note on how WORLD_SIZE was read
  for (const auto& note : w[0]["notes"]) explained |= note.get<std::string>().find("WORLD_SIZE=8 counts processes") != std::string::npos;
  EXPECT_TRUE(explained) << w[0]["notes"].dump();
  auto text = run({"describe"}, env).out;
  EXPECT_NE(text.find("WORLD_SIZE=8 counts processes"), std::string::npos) << text;
}

TEST_F(K8sCli, KubeBrainDescribe) {
  Env env =
      podEnv({{"WORLD_SIZE", "3"}, {"RANK", "2"}, {"MASTER_ADDR", "job-master.ns.svc"}, {"MASTER_PORT", "29500"}});
  EXPECT_EQ(backendOf(env), "k8s");
  Json w = describe(env);
  ASSERT_GE(w.size(), 1u);
  EXPECT_EQ(w[0]["nnodes"], 3);
  EXPECT_EQ(w[0]["node_rank"], 2);
  EXPECT_EQ(w[0]["world_size"], 3 * static_cast<int>(w.size())) << "world = nodes x workers on this node";
}

bool anyNote(const Json& worker, const std::string& text) {
  for (const auto& note : worker["notes"]) {
    if (note.get<std::string>().find(text) != std::string::npos) return true;
  }
  return false;
}

// The reproduction, tried as a new user would: this environment stopped with "TAEHV_K8S_NNODES is not set".
TEST_F(K8sCli, TrainJobDescribe) {
  Env env = podEnv({{"PET_NNODES", "2"},
                    {"PET_NPROC_PER_NODE", "8"},
                    {"PET_NODE_RANK", "1"},
                    {"PET_MASTER_ADDR", "tj-node-0-0.tj"},
                    {"PET_MASTER_PORT", "29500"},
                    {"JOB_COMPLETION_INDEX", "1"}});
  EXPECT_EQ(backendOf(env), "k8s");
  auto r = run({"describe", "--json", "--nproc-per-node", "2"}, env);  // 8 workers need 8 GPUs; this node has none
  ASSERT_EQ(r.rc, 0) << r.err;
  Json w = Json::parse(r.out);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0]["nnodes"], 2);
  EXPECT_EQ(w[0]["node_rank"], 1);
  EXPECT_EQ(w[1]["rank"], 3);
  EXPECT_EQ(w[0]["master_addr"], "tj-node-0-0.tj");
  EXPECT_EQ(w[0]["provenance"]["node_rank"], "env PET_NODE_RANK");
  EXPECT_EQ(w[0]["provenance"]["master_addr"], "env PET_MASTER_ADDR");
  EXPECT_EQ(w[0]["env"]["TORCHELASTIC_RUN_ID"], "tj");
  EXPECT_TRUE(anyNote(w[0], "Kubeflow Trainer v2 TrainJob")) << w[0]["notes"].dump();
}

TEST_F(K8sCli, JobSetDescribe) {
  Env env = podEnv({{"JOB_COMPLETION_INDEX", "1"},
                    {"JOBSET_NAME", "train"},
                    {"JOBSET_REPLICATED_JOB", "workers"},
                    {"JOBSET_RESTART_ATTEMPT", "2"},
                    {"TAEHV_K8S_NNODES", "2"},
                    {"TAEHV_K8S_NPROC_PER_NODE", "1"}});
  EXPECT_EQ(backendOf(env), "k8s");
  Json w = describe(env);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0]["rank"], 1);
  EXPECT_EQ(w[0]["world_size"], 2);
  EXPECT_EQ(w[0]["master_addr"], "train-workers-0-0.train");
  EXPECT_EQ(w[0]["env"]["TORCHELASTIC_RESTART_COUNT"], "2") << "the JobSet's restart attempt";
  EXPECT_TRUE(anyNote(w[0], "JobSet train")) << w[0]["notes"].dump();
}

TEST_F(K8sCli, PaiDlcDescribe) {
  Env env = podEnv({{"MASTER_ADDR", "dlc18isgeayd1234-master-0"},
                    {"MASTER_PORT", "23456"},
                    {"WORLD_SIZE", "2"},
                    {"RANK", "1"},
                    {"NPROC_PER_NODE", "2"}});
  EXPECT_EQ(backendOf(env), "pai");
  Json w = describe(env);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0]["nnodes"], 2);
  EXPECT_EQ(w[0]["world_size"], 4);
  EXPECT_EQ(w[1]["rank"], 3);
  EXPECT_EQ(w[0]["provenance"]["local_world_size"], "env NPROC_PER_NODE");
}

TEST_F(K8sCli, ContradictionsFailWithOneClearMessage) {
  struct Case {
    Env env;
    std::string expect;
  };
  const Case cases[] = {
      {podEnv({{"WORLD_SIZE", "2"}, {"RANK", "2"}, {"MASTER_ADDR", "m"}, {"MASTER_PORT", "1"}}), "node rank 2"},
      {podEnv({{"WORLD_SIZE", "7"},
               {"RANK", "1"},
               {"PET_NODE_RANK", "1"},
               {"PET_NNODES", "2"},
               {"PET_NPROC_PER_NODE", "4"},
               {"MASTER_ADDR", "m"},
               {"MASTER_PORT", "1"}}),
       "WORLD_SIZE=7 is not a multiple of PET_NPROC_PER_NODE=4"},
      {podEnv({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"MASTER_PORT", "1"}}), "no master address"},
      {podEnv({{"JOB_COMPLETION_INDEX", "0"}}), "TAEHV_K8S_NNODES"},
      {podEnv({{"MASTER_ADDR", "dlc1x-master-0"}, {"MASTER_PORT", "1"}, {"WORLD_SIZE", "2"}, {"RANK", "5"}}),
       "PAI-DLC: node rank 5"},
  };
  for (const auto& c : cases) {
    auto r = run({"describe", "--json"}, c.env);
    EXPECT_NE(r.rc, 0) << c.expect;
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err;
  }
}

// ---- simulated pods ----

std::string workerScript() { return testing::sourceDir() + "/tests/plugins/k8s/rendezvous_worker.py"; }

/// The container (command + args + env) of the Indexed Job that `taehv-run --backend k8s render` prints.
struct Container {
  std::vector<std::string> argv;
  Env env;
};

class K8sPods : public K8sCli {
 protected:
  Container renderedContainer(const std::vector<std::string>& render_args) {
    std::vector<std::string> args = {"--backend", "k8s", "render"};
    args.insert(args.end(), render_args.begin(), render_args.end());
    auto r = run(args, podEnv({}));
    EXPECT_EQ(r.rc, 0) << r.err;
    Container c;
    if (r.rc != 0) return c;
    YAML::Node job = YAML::LoadAll(r.out).at(1);
    const auto& spec = job["spec"]["template"]["spec"]["containers"][0];
    for (auto a : spec["command"]) c.argv.push_back(a.as<std::string>());
    for (auto a : spec["args"]) c.argv.push_back(a.as<std::string>());
    for (auto e : spec["env"]) {
      if (e["value"]) c.env[e["name"].as<std::string>()] = e["value"].as<std::string>();
    }
    return c;
  }

  /// Starts pod `index` of the Indexed Job: the manifest's env, what the Job controller adds, and the master
  /// moved to 127.0.0.1:port (no cluster DNS here). argv[0] "taehv-run" is resolved on the pod's PATH.
  std::unique_ptr<ChildProcess> startPod(const Container& c, int index, int port, std::vector<std::string> extra = {}) {
    Env env = podEnv(c.env);
    env["JOB_COMPLETION_INDEX"] = std::to_string(index);
    env["HOSTNAME"] = "sim-" + std::to_string(index);
    env["TAEHV_K8S_MASTER_ADDR"] = "127.0.0.1";
    env["TAEHV_K8S_MASTER_PORT"] = std::to_string(port);
    std::vector<std::string> argv = c.argv;
    argv[0] = taehvRun();
    argv.insert(argv.begin() + 1, extra.begin(), extra.end());
    return std::make_unique<ChildProcess>(argv, env, dir_ + "/pod" + std::to_string(index));
  }
};

TEST_F(K8sPods, TwoPodIndexedJobRendezvousWithWorkerPodFirst) {
  const std::string out = dir_ + "/results";
  fs::create_directories(out);
  Container c = renderedContainer({"--nodes", "2", "--gpus-per-node", "0", "--nproc-per-node", "2", "--image", "img",
                                   "--name", "sim", "--", "python3", workerScript(), out});
  ASSERT_FALSE(c.argv.empty());
  ASSERT_EQ(c.argv[0], "taehv-run");
  const int port = freePort();
  auto pod1 = startPod(c, 1, port);
  std::this_thread::sleep_for(1500ms);
  ASSERT_TRUE(pod1->running()) << "pod 1 must wait for the master, not fail: " << pod1->err();
  auto pod0 = startPod(c, 0, port);
  EXPECT_EQ(pod0->wait(60s), 0) << pod0->err();
  EXPECT_EQ(pod1->wait(60s), 0) << pod1->err();
  EXPECT_NE(pod1->err().find("waiting up to"), std::string::npos) << pod1->err();
  // The master saw ranks 0..3 once each, all with WORLD_SIZE=4 (2 pods x 2 workers).
  const std::string master = testing::readFile(out + "/master.txt");
  for (int r = 0; r < 4; ++r) {
    EXPECT_NE(master.find("RANK=" + std::to_string(r) + " WORLD_SIZE=4"), std::string::npos) << master;
    EXPECT_TRUE(fs::exists(out + "/rank" + std::to_string(r) + ".txt")) << r;
  }
  EXPECT_NE(master.find("GROUP_RANK=1"), std::string::npos) << master;
  // Both pods exited: nothing they started is left (the output folder is a unique token in every worker's argv).
  const auto left = processesWith(out);
  EXPECT_TRUE(left.empty()) << left.size() << " left, e.g. " << (left.empty() ? "" : left.front());
}

TEST_F(K8sPods, TwoPodPyTorchJobRendezvousWithOperatorEnvironment) {
  // What training-operator >= v1.7 gives a 2-pod job with nprocPerNode "2" (see k8s_mapping_test.cc), with
  // MASTER_ADDR moved to loopback. WORLD_SIZE=4 counts processes.
  const std::string out = dir_ + "/results";
  fs::create_directories(out);
  const std::string port = std::to_string(freePort());
  auto pod = [&](int rank) {
    Env env = podEnv({{"MASTER_ADDR", "127.0.0.1"},
                      {"MASTER_PORT", port},
                      {"PET_MASTER_ADDR", "127.0.0.1"},
                      {"PET_MASTER_PORT", port},
                      {"WORLD_SIZE", "4"},
                      {"RANK", std::to_string(rank)},
                      {"PET_NODE_RANK", std::to_string(rank)},
                      {"PET_NPROC_PER_NODE", "2"},
                      {"PET_NNODES", "2"},
                      {"PYTHONUNBUFFERED", "1"}});
    return std::make_unique<ChildProcess>(std::vector<std::string>{taehvRun(), "--", "python3", workerScript(), out},
                                          env, dir_ + "/ptj" + std::to_string(rank));
  };
  auto worker = pod(1);
  std::this_thread::sleep_for(1000ms);
  ASSERT_TRUE(worker->running()) << worker->err();
  auto master = pod(0);
  EXPECT_EQ(master->wait(60s), 0) << master->err();
  EXPECT_EQ(worker->wait(60s), 0) << worker->err();
  const std::string seen = testing::readFile(out + "/master.txt");
  for (int r = 0; r < 4; ++r) {
    EXPECT_NE(seen.find("RANK=" + std::to_string(r) + " WORLD_SIZE=4"), std::string::npos) << seen;
  }
}

// PAI-DLC's documented variables for a 1 master + 1 worker job on 2-GPU nodes (WORLD_SIZE=2 counts nodes),
// master moved to loopback: the workers must see WORLD_SIZE=4 (2 nodes x NPROC_PER_NODE 2), not the platform's 2.
TEST_F(K8sPods, TwoNodePaiDlcRendezvousWorldSizeCountsProcesses) {
  const std::string out = dir_ + "/results";
  fs::create_directories(out);
  const std::string port = std::to_string(freePort());
  auto node = [&](int rank) {
    Env env = podEnv({{"MASTER_ADDR", "127.0.0.1"},
                      {"MASTER_PORT", port},
                      {"WORLD_SIZE", "2"},
                      {"RANK", std::to_string(rank)},
                      {"NPROC_PER_NODE", "2"}});
    return std::make_unique<ChildProcess>(std::vector<std::string>{taehvRun(), "--", "python3", workerScript(), out},
                                          env, dir_ + "/pai" + std::to_string(rank));
  };
  auto worker = node(1);
  std::this_thread::sleep_for(1000ms);
  ASSERT_TRUE(worker->running()) << worker->err();
  auto master = node(0);
  EXPECT_EQ(master->wait(60s), 0) << master->err();
  EXPECT_EQ(worker->wait(60s), 0) << worker->err();
  const std::string seen = testing::readFile(out + "/master.txt");
  for (int r = 0; r < 4; ++r) {
    EXPECT_NE(seen.find("RANK=" + std::to_string(r) + " WORLD_SIZE=4"), std::string::npos) << seen;
  }
}

TEST_F(K8sPods, MasterThatNeverComesIsAClearErrorNotAHang) {
  Container c = renderedContainer({"--nodes", "2", "--gpus-per-node", "0", "--image", "img", "--name", "sim", "--",
                                   "python3", workerScript(), dir_});
  ASSERT_FALSE(c.argv.empty());
  const int port = freePort();
  const auto start = std::chrono::steady_clock::now();
  auto pod1 = startPod(c, 1, port, {"--master-wait", "2"});
  const int rc = pod1->wait(30s);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_NE(rc, 0);
  EXPECT_NE(rc, -1) << "killed at the deadline: it hung";
  EXPECT_LT(took, 15s);
  EXPECT_GE(took, 1000ms) << "it must wait (--master-wait 2), not fail at once";
  const std::string err = pod1->err();
  EXPECT_NE(err.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << err;
  EXPECT_NE(err.find("did not accept"), std::string::npos) << err;
}

/// The worker command of the training simulations: 3 steps of TAEHV on tiny synthetic clips, output in `out`.
std::vector<std::string> trainCommand(const std::string& out) {
  return {"taehv-train", "train",  "--set", "train.steps=3",         "--set", "train.batch_per_rank=1",
          "--set",       "data.frames=4", "--set", "data.size=32",    "--set", "output.dir=" + out,
          "--set",       "train.warmup_steps=1", "--set", "log.every=1", "--set", "log.preview_every=0",
          "--set",       "checkpoint.every=0",   "--set", "train.threads=1"};  // both pods share this machine's cores
}

/// The job trained: two ranks, the final weights, and a step-3 checkpoint that records a world of 2.
void expectTrainedByTwoRanks(const std::string& out, const std::string& log) {
  EXPECT_NE(log.find("2 rank(s)"), std::string::npos) << log;
  EXPECT_TRUE(fs::exists(out + "/weights.safetensors")) << log;
  bool found = false;
  if (fs::exists(out)) {
    for (const auto& e : fs::recursive_directory_iterator(out)) {
      if (e.path().filename() != "state.json") continue;
      Json state = Json::parse(testing::readFile(e.path()));
      if (state["step"] == 3) {
        found = true;
        EXPECT_EQ(state["world_size"], 2);
      }
    }
  }
  EXPECT_TRUE(found) << "no checkpoint of step 3 under " << out << "\n" << log;
}

// The real job: TAEHV trained to completion by two pods (one worker each, c10d Gloo over loopback), the worker
// pod started first. Needs taehv-train (the trainer build, TAEHV_WITH_TRAINER=ON); skipped in a build without it.
TEST_F(K8sPods, TwoPodIndexedJobTrainsTaehv) {
  SKIP_WITHOUT_TRAINER_OR_ASSERT_BUILT();
  const std::string out = dir_ + "/train";
  std::vector<std::string> args = {"--nodes", "2", "--gpus-per-node", "0", "--image", "img", "--name", "sim", "--"};
  for (const auto& a : trainCommand(out)) args.push_back(a);
  Container c = renderedContainer(args);
  ASSERT_FALSE(c.argv.empty());
  const int port = freePort();
  auto pod1 = startPod(c, 1, port);
  std::this_thread::sleep_for(1000ms);
  ASSERT_TRUE(pod1->running()) << "pod 1 must wait for the master: " << pod1->err();
  auto pod0 = startPod(c, 0, port);
  EXPECT_EQ(pod0->wait(150s), 0) << pod0->out() << pod0->err();
  EXPECT_EQ(pod1->wait(60s), 0) << pod1->out() << pod1->err();
  expectTrainedByTwoRanks(out, pod0->out() + pod0->err());
}

// ---- Kubeflow Trainer v2 TrainJob and JobSet pods: exactly the cluster's environment ----

class K8sClusterPods : public K8sCli {
 protected:
  /// `taehv-run --backend k8s render ARGS` as documents.
  std::vector<YAML::Node> renderDocs(const std::vector<std::string>& render_args) {
    std::vector<std::string> args = {"--backend", "k8s", "render"};
    args.insert(args.end(), render_args.begin(), render_args.end());
    auto r = run(args, podEnv({}));
    EXPECT_EQ(r.rc, 0) << r.err;
    return r.rc == 0 ? YAML::LoadAll(r.out) : std::vector<YAML::Node>{};
  }
  /// Starts a pod in `net`: the container's argv (argv[0] "taehv-run", found on the pod's PATH) and `env`, plus
  /// what every container gets (podEnv).
  std::unique_ptr<ChildProcess> startPod(const testing::PodNetwork& net, std::vector<std::string> argv, const Env& env,
                                         const std::string& name) {
    EXPECT_EQ(argv.at(0), "taehv-run");
    argv[0] = taehvRun();
    Env pod_env = podEnv(env);
    pod_env["HOSTNAME"] = name;
    return std::make_unique<ChildProcess>(net.inside(argv), pod_env, dir_ + "/" + name);
  }
  /// Pod 1 first (it must wait for the master's name and port), then pod 0; both must finish the training.
  void trainTwoPods(const testing::PodNetwork& net, const std::vector<std::string>& argv, const Env& env0,
                    const Env& env1, const std::string& out) {
    auto pod1 = startPod(net, argv, env1, "pod1");
    std::this_thread::sleep_for(1000ms);
    ASSERT_TRUE(pod1->running()) << "pod 1 must wait for the master: " << pod1->err();
    auto pod0 = startPod(net, argv, env0, "pod0");
    EXPECT_EQ(pod0->wait(150s), 0) << pod0->out() << pod0->err();
    EXPECT_EQ(pod1->wait(60s), 0) << pod1->out() << pod1->err();
    const std::string log1 = pod1->out() + pod1->err();
    EXPECT_NE(log1.find("waiting up to"), std::string::npos) << log1;
    expectTrainedByTwoRanks(out, pod0->out() + pod0->err());
  }
};

// Two pods of `render --flavor trainjob` with what the Trainer gives them: PET_MASTER_ADDR sim-node-0-0.sim,
// PET_MASTER_PORT 29500, PET_NODE_RANK = JOB_COMPLETION_INDEX, and the TrainJob's env (token, sizing's values).
TEST_F(K8sClusterPods, TwoPodTrainJobTrainsTaehv) {
  SKIP_WITHOUT_TRAINER_OR_ASSERT_BUILT();
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for a private network namespace (unshare --net)";
  testing::PodNetwork net(dir_, {"sim-node-0-0.sim"});
  ASSERT_TRUE(net.ok()) << net.error();
  const std::string out = dir_ + "/train";
  std::vector<std::string> args = {"--flavor", "trainjob", "--nodes", "2", "--gpus-per-node", "0", "--image", "img",
                                   "--name", "sim", "--max-restarts", "1", "--"};
  for (const auto& a : trainCommand(out)) args.push_back(a);
  auto docs = renderDocs(args);
  ASSERT_FALSE(docs.empty());
  const auto trainer = testing::docOfKind(docs, "TrainJob")["spec"]["trainer"];
  const Env env0 = testing::trainJobPodEnv(docs, 0), env1 = testing::trainJobPodEnv(docs, 1);
  EXPECT_EQ(env1.at("PET_MASTER_ADDR"), "sim-node-0-0.sim");
  EXPECT_EQ(env1.at("PET_MASTER_PORT"), "29500");
  EXPECT_EQ(env1.at("TAEHV_JOB_TOKEN").size(), 64u);
  trainTwoPods(net, testing::containerArgv(trainer["command"], trainer["args"]), env0, env1, out);
}

// Two pods of `render --flavor jobset`: the JobSet's labels through the downward API, master sim-node-0-0.sim:29500.
TEST_F(K8sClusterPods, TwoPodJobSetTrainsTaehv) {
  SKIP_WITHOUT_TRAINER_OR_ASSERT_BUILT();
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for a private network namespace (unshare --net)";
  testing::PodNetwork net(dir_, {"sim-node-0-0.sim"});
  ASSERT_TRUE(net.ok()) << net.error();
  const std::string out = dir_ + "/train";
  std::vector<std::string> args = {"--flavor", "jobset", "--nodes", "2", "--gpus-per-node", "0", "--image", "img",
                                   "--name", "sim", "--"};
  for (const auto& a : trainCommand(out)) args.push_back(a);
  auto docs = renderDocs(args);
  ASSERT_FALSE(docs.empty());
  const auto c = testing::jobSetContainer(docs);
  const Env env0 = testing::jobSetPodEnv(docs, 0), env1 = testing::jobSetPodEnv(docs, 1);
  EXPECT_EQ(env1.at("TAEHV_K8S_MASTER_ADDR"), "sim-node-0-0.sim");
  EXPECT_EQ(env1.at("JOBSET_NAME"), "sim");
  trainTwoPods(net, testing::containerArgv(c["command"], c["args"]), env0, env1, out);
}

// `doctor` in a TrainJob pod names the flavour and checks that the master's DNS name resolves: inside the pod
// network it does (nothing listens yet: a warning, not a failure); outside it does not, and doctor says so.
TEST_F(K8sClusterPods, DoctorNamesTheFlavourAndResolvesTheMaster) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for a private network namespace (unshare --net)";
  testing::PodNetwork net(dir_, {"sim-node-0-0.sim"});
  ASSERT_TRUE(net.ok()) << net.error();
  auto docs = renderDocs({"--flavor", "trainjob", "--nodes", "2", "--gpus-per-node", "0", "--image", "img", "--name",
                          "sim", "--nproc-per-node", "1"});
  ASSERT_FALSE(docs.empty());
  const Env env = testing::trainJobPodEnv(docs, 1);
  const std::vector<std::string> doctor = {"taehv-run", "doctor", "--connect-timeout", "1"};
  auto inside = startPod(net, doctor, env, "doctor-in");
  inside->wait(30s);
  const std::string in = inside->out() + inside->err();
  EXPECT_NE(in.find("Kubeflow Trainer v2 TrainJob"), std::string::npos) << in;
  EXPECT_NE(in.find(testing::PodNetwork::kPodIp), std::string::npos) << "the master's name resolved\n" << in;
  EXPECT_EQ(in.find("does not resolve"), std::string::npos) << in;

  auto r = run({"doctor", "--connect-timeout", "1"}, podEnv(env), 30s);  // not in the pod network: no such name
  const std::string outside = r.out + r.err;
  EXPECT_NE(r.rc, 0) << outside;
  EXPECT_NE(outside.find("Kubeflow Trainer v2 TrainJob"), std::string::npos) << outside;
  EXPECT_NE(outside.find("master 'sim-node-0-0.sim' does not resolve"), std::string::npos) << outside;
}

}  // namespace
}  // namespace taehv::k8s
