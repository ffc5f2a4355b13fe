#include "taehv/torch_env/torch_style.h"

#include "taehv/env.h"
#include "taehv/torch_env/container_plan.h"

namespace taehv::torch_env {

PlanResult planTorchStyle(const Env& env, const PlanRequest& request, const TorchStyleSpec& spec) {
  PlanResult r;
  NodePlan& p = r.value;
  const Checked<Sourced<int>> nnodes = readCountEnv(env, "WORLD_SIZE", 1, kMaxNodes);
  if (!nnodes.ok()) return failedPlan(spec.platform + ": " + nnodes.error);
  p.nnodes = nnodes.value;
  if (!p.nnodes.has()) {
    return failedPlan(spec.platform + ": WORLD_SIZE (the number of nodes) is not set; no node count");
  }
  const Checked<Sourced<int>> node_rank = readCountEnv(env, "RANK", 0, kMaxNodes - 1);
  if (!node_rank.ok()) return failedPlan(spec.platform + ": " + node_rank.error);
  p.node_rank = node_rank.value;
  if (!p.node_rank.has()) return failedPlan(spec.platform + ": RANK (this node's index) is not set; no node rank");
  if (auto a = envValue(env, "MASTER_ADDR")) p.master_addr.set(*a, "env MASTER_ADDR");
  const Checked<Sourced<int>> port = readCountEnv(env, "MASTER_PORT", 1, 65535);
  if (!port.ok()) return failedPlan(spec.platform + ": " + port.error);
  p.master_port = port.value;
  if (spec.read_nproc_per_node) {
    const Checked<Sourced<int>> nproc = readCountEnv(env, "NPROC_PER_NODE", 1, 1024);
    if (!nproc.ok()) return failedPlan(spec.platform + ": " + nproc.error);
    p.nproc_per_node = nproc.value;
    if (p.nproc_per_node.has()) p.gpus_on_node.set(*p.nproc_per_node.value, "env NPROC_PER_NODE");
  }
  p.notes.push_back("WORLD_SIZE=" + std::to_string(*p.nnodes.value) + " read as the number of nodes: " +
                    spec.world_size_meaning + "; the world size is nodes x processes per node");
  return finishPlan(std::move(r), request, spec.platform);
}

}  // namespace taehv::torch_env
