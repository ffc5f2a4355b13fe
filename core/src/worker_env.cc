#include "taehv/worker_env.h"

#include <algorithm>

#include "taehv/env.h"

namespace taehv {
namespace {

template <typename T>
Sourced<std::string> fromField(const Sourced<T>& field, const std::string& field_name) {
  Sourced<std::string> out;
  if constexpr (std::is_same_v<T, std::string>) {
    out.set(*field.value, field_name + ": " + field.source);
  } else {
    out.set(std::to_string(*field.value), field_name + ": " + field.source);
  }
  return out;
}

Sourced<std::string> literal(const std::string& value, const std::string& source) {
  Sourced<std::string> out;
  out.set(value, source);
  return out;
}

}  // namespace

void buildWorkerEnvironment(const NodeDescriptor& node, WorkerDescriptor& w, const Env& inherited) {
  auto& env = w.env;
  env.clear();
  // torchrun's contract (torch/distributed/elastic/agent/server/local_elastic_agent.py): one role named
  // "default", so role rank/size equal the global ones; the "group" is the node (the agent).
  env["RANK"] = fromField(w.rank, "rank");
  env["LOCAL_RANK"] = fromField(w.local_rank, "local_rank");
  env["WORLD_SIZE"] = fromField(w.world_size, "world_size");
  env["LOCAL_WORLD_SIZE"] = fromField(w.local_world_size, "local_world_size");
  env["GROUP_RANK"] = fromField(w.node_rank, "node_rank");
  env["GROUP_WORLD_SIZE"] = fromField(w.nnodes, "nnodes");
  env["ROLE_RANK"] = fromField(w.rank, "rank (one role)");
  env["ROLE_WORLD_SIZE"] = fromField(w.world_size, "world_size (one role)");
  env["ROLE_NAME"] = literal(node.role, node.role == "default" ? "rule: torchrun's single role" : "--role");
  env["MASTER_ADDR"] = fromField(w.master_addr, "master_addr");
  env["MASTER_PORT"] = fromField(w.master_port, "master_port");
  env["TORCHELASTIC_RESTART_COUNT"] = fromField(w.restart_count, "restart_count");
  env["TORCHELASTIC_MAX_RESTARTS"] = fromField(node.max_restarts, "max_restarts");
  env["TORCHELASTIC_RUN_ID"] = fromField(w.run_id, "run_id");
  // torchrun's agent hands its rendezvous store to the workers (True); taehv-run has none, so rank 0's
  // init_process_group creates the store at MASTER_ADDR:MASTER_PORT, as it does under a plain launcher.
  env["TORCHELASTIC_USE_AGENT_STORE"] = literal("False", "rule: taehv-run has no agent store");
  // torchrun exports its --signals-to-handle; these are the signals taehv-run forwards (torchrun's default set).
  env["TORCHELASTIC_SIGNALS_TO_HANDLE"] = literal("SIGTERM,SIGINT,SIGHUP,SIGQUIT", "rule: the signals forwarded");
  if (const auto async = envValue(inherited, "TORCH_NCCL_ASYNC_ERROR_HANDLING")) {
    env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = literal(*async, "env TORCH_NCCL_ASYNC_ERROR_HANDLING (inherited)");
  } else {
    env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = literal("1", "rule: torchrun's default");
  }
  if (const auto omp = envValue(inherited, "OMP_NUM_THREADS")) {
    env["OMP_NUM_THREADS"] = literal(*omp, "env OMP_NUM_THREADS (inherited)");
  } else {
    const int cores = *node.cpu_cores.value;
    const int local = *node.nproc_per_node.value;
    const int threads = std::max(1, cores / std::max(1, local));
    env["OMP_NUM_THREADS"] = literal(std::to_string(threads), "rule: max(1, cpu cores " + std::to_string(cores) +
                                                                  " / local workers " + std::to_string(local) + ")");
  }
  env["TAEHV_NODE_RANK"] = fromField(w.node_rank, "node_rank");
  env["TAEHV_NNODES"] = fromField(w.nnodes, "nnodes");
  // The backend's extras come last and may add variables, never replace the contract above.
  for (const auto& [name, value] : node.extra_env) {
    if (env.count(name) || !value.has()) continue;
    env[name] = value;
    if (env[name].source.empty()) env[name].source = "backend " + node.backend;
  }
  // Then this worker's own extras (sizing: TAEHV_DEVICE, CUDA_VISIBLE_DEVICES), adding only, like extra_env.
  auto local = node.local_env.find(*w.local_rank.value);
  if (local != node.local_env.end()) {
    for (const auto& [name, value] : local->second) {
      if (value.has() && !env.count(name)) env[name] = value;
    }
  }
}

Env completeEnvironment(const WorkerDescriptor& worker, const Env& inherited) {
  Env out = inherited;
  for (const auto& [name, value] : worker.env) out[name] = *value.value;
  return out;
}

}  // namespace taehv
