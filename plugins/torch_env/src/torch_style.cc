#include "taehv/torch_env/torch_style.h"

#include "taehv/torch_env/env_reader.h"

namespace taehv::torch_env {

PlanResult planTorchStyle(const Env& env, const PlanRequest& request, const TorchStyleSpec& spec) {
  PlanResult r;
  NodePlan& p = r.value;
  if (auto e = readIntEnv(env, "WORLD_SIZE", 1, kMaxNodes, p.nnodes); !e.empty()) {
    return failedPlan(spec.platform + ": " + e);
  }
  if (!p.nnodes.has()) {
    return failedPlan(spec.platform + ": WORLD_SIZE (the number of nodes) is not set; no node count");
  }
  if (auto e = readIntEnv(env, "RANK", 0, kMaxNodes - 1, p.node_rank); !e.empty()) {
    return failedPlan(spec.platform + ": " + e);
  }
  if (!p.node_rank.has()) return failedPlan(spec.platform + ": RANK (this node's index) is not set; no node rank");
  if (auto a = envValue(env, "MASTER_ADDR")) p.master_addr.set(*a, "env MASTER_ADDR");
  if (auto e = readPortEnv(env, "MASTER_PORT", p.master_port); !e.empty()) return failedPlan(spec.platform + ": " + e);
  if (spec.read_nproc_per_node) {
    if (auto e = readIntEnv(env, "NPROC_PER_NODE", 1, 1024, p.nproc_per_node); !e.empty()) {
      return failedPlan(spec.platform + ": " + e);
    }
    if (p.nproc_per_node.has()) p.gpus_on_node.set(*p.nproc_per_node.value, "env NPROC_PER_NODE");
  }
  p.notes.push_back("WORLD_SIZE=" + std::to_string(*p.nnodes.value) + " read as the number of nodes: " +
                    spec.world_size_meaning + "; the world size is nodes x processes per node");
  return finishPlan(std::move(r), request, spec.platform);
}

}  // namespace taehv::torch_env
