// The worker environment contract: torchrun's variables with torchrun's meaning, plus TAEHV_*.
#include "taehv/worker_env.h"

#include <gtest/gtest.h>

#include <set>

namespace taehv {
namespace {

NodeDescriptor node(int nnodes, int node_rank, int nproc, int cores = 8) {
  LaunchFlags flags;
  flags.nnodes = nnodes;
  flags.node_rank = node_rank;
  flags.nproc_per_node = nproc;
  flags.master_addr = "10.1.2.3";
  flags.master_port = 2345;
  flags.run_id = "job42";
  flags.max_restarts = 2;
  auto r = resolveNode(flags, nullptr, "local", {}, "h", cores, [] { return 0; });
  EXPECT_TRUE(r.ok()) << r.error;
  return r.value;
}

std::string get(const WorkerDescriptor& w, const std::string& name) {
  auto it = w.env.find(name);
  return it == w.env.end() ? "<unset>" : *it->second.value;
}

TEST(WorkerEnv, ExactlyTorchrunsVariablesPlusTaehvOnes) {
  auto workers = expandWorkers(node(2, 1, 3), {});
  std::set<std::string> names;
  for (const auto& [name, value] : workers[0].env) names.insert(name);
  EXPECT_EQ(names, (std::set<std::string>{"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                                          "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME",
                                          "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
                                          "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "OMP_NUM_THREADS",
                                          "TORCHELASTIC_USE_AGENT_STORE", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                                          "TORCHELASTIC_SIGNALS_TO_HANDLE", "TAEHV_NODE_RANK", "TAEHV_NNODES"}));
}

TEST(WorkerEnv, ValuesFollowTorchrunSemantics) {
  auto workers = expandWorkers(node(2, 1, 3), {});
  const WorkerDescriptor& w = workers[2];
  EXPECT_EQ(get(w, "RANK"), "5");
  EXPECT_EQ(get(w, "LOCAL_RANK"), "2");
  EXPECT_EQ(get(w, "WORLD_SIZE"), "6");
  EXPECT_EQ(get(w, "LOCAL_WORLD_SIZE"), "3");
  EXPECT_EQ(get(w, "GROUP_RANK"), "1");        // the node (agent) rank
  EXPECT_EQ(get(w, "GROUP_WORLD_SIZE"), "2");  // the node count
  EXPECT_EQ(get(w, "ROLE_RANK"), "5");         // one role: same as RANK
  EXPECT_EQ(get(w, "ROLE_WORLD_SIZE"), "6");
  EXPECT_EQ(get(w, "ROLE_NAME"), "default");
  EXPECT_EQ(get(w, "MASTER_ADDR"), "10.1.2.3");
  EXPECT_EQ(get(w, "MASTER_PORT"), "2345");
  EXPECT_EQ(get(w, "TORCHELASTIC_RESTART_COUNT"), "0");
  EXPECT_EQ(get(w, "TORCHELASTIC_MAX_RESTARTS"), "2");
  EXPECT_EQ(get(w, "TORCHELASTIC_RUN_ID"), "job42");
  EXPECT_EQ(get(w, "TAEHV_NODE_RANK"), "1");
  EXPECT_EQ(get(w, "TAEHV_NNODES"), "2");
  EXPECT_EQ(w.env.at("MASTER_ADDR").source, "master_addr: flag --master-addr");
}

TEST(WorkerEnv, OmpThreadsIsCoresPerLocalWorkerUnlessSet) {
  EXPECT_EQ(get(expandWorkers(node(1, 0, 3, 8), {})[0], "OMP_NUM_THREADS"), "2");
  EXPECT_EQ(get(expandWorkers(node(1, 0, 4, 2), {})[0], "OMP_NUM_THREADS"), "1");  // never 0
  auto w = expandWorkers(node(1, 0, 3, 8), {{"OMP_NUM_THREADS", "7"}})[0];
  EXPECT_EQ(get(w, "OMP_NUM_THREADS"), "7");
  EXPECT_EQ(w.env.at("OMP_NUM_THREADS").source, "env OMP_NUM_THREADS (inherited)");
}

TEST(WorkerEnv, RestartsAddToThePlatformsCount) {
  NodeDescriptor n = node(1, 0, 1);
  n.restart_count.set(2, "env SLURM_RESTART_COUNT");
  auto w = expandWorkers(n, {}, 3)[0];
  EXPECT_EQ(get(w, "TORCHELASTIC_RESTART_COUNT"), "5");
  EXPECT_NE(w.env.at("TORCHELASTIC_RESTART_COUNT").source.find("SLURM_RESTART_COUNT"), std::string::npos);
}

TEST(WorkerEnv, BackendExtrasAddButNeverReplaceTheContract) {
  NodeDescriptor n = node(1, 0, 2);
  n.extra_env["NCCL_SOCKET_IFNAME"].set("eth0", "rule: test");
  n.extra_env["RANK"].set("999", "rule: hostile");
  auto w = expandWorkers(n, {})[1];
  EXPECT_EQ(get(w, "NCCL_SOCKET_IFNAME"), "eth0");
  EXPECT_EQ(get(w, "RANK"), "1");
}

TEST(WorkerEnv, CompleteEnvironmentLaysTheContractOverTheInheritedOne) {
  auto w = expandWorkers(node(1, 0, 1), {})[0];
  Env full = completeEnvironment(w, {{"PATH", "/bin"}, {"RANK", "stale"}});
  EXPECT_EQ(full.at("PATH"), "/bin");
  EXPECT_EQ(full.at("RANK"), "0");
}


TEST(WorkerEnv, TorchrunsAgentVariablesAndRole) {
  NodeDescriptor n = node(1, 0, 2);
  EXPECT_EQ(get(expandWorkers(n, {})[1], "ROLE_NAME"), "default");
  EXPECT_EQ(get(expandWorkers(n, {})[1], "TORCHELASTIC_USE_AGENT_STORE"), "False");  // no agent store
  EXPECT_EQ(get(expandWorkers(n, {})[1], "TORCH_NCCL_ASYNC_ERROR_HANDLING"), "1");
  EXPECT_EQ(get(expandWorkers(n, {{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}})[1], "TORCH_NCCL_ASYNC_ERROR_HANDLING"),
            "3");
  EXPECT_EQ(get(expandWorkers(n, {})[0], "TORCHELASTIC_SIGNALS_TO_HANDLE"), "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  n.role = "trainer";
  EXPECT_EQ(get(expandWorkers(n, {})[1], "ROLE_NAME"), "trainer");
}

}  // namespace
}  // namespace taehv
