// One call for taehv-run: everything sizing decides for a node before its workers start, from the resolved node
// (node count, the user's --nproc-per-node or auto, the master) and the environment.
//
//   NodeSizing s = sizeNode(input);          // probe GPUs, decide nproc, compute tuning
//   if (!s.ok()) -> refuse with s.error()    // e.g. "... did you mean --nnodes 2 --nproc-per-node 8?"
//   s.nodeEnv()          // same for every worker: TAEHV_COLLECTIVE_TIMEOUT_S, NCCL_*, GLOO_SOCKET_IFNAME
//   s.workerEnv(local)   // this worker's device: TAEHV_DEVICE, CUDA_VISIBLE_DEVICES (binding-dependent)
//   s.notes()            // lines for `taehv-run describe`
#pragma once

#include <map>
#include <string>
#include <vector>

#include "taehv/plugin_api.h"
#include "taehv/sizing/gpu.h"
#include "taehv/sizing/tuning.h"
#include "taehv/sizing/workers.h"

namespace taehv::sizing {

struct NodeSizingInput {
  Env env;  ///< taehv-run's environment (what workers inherit)
  int nnodes = 1;
  Sourced<int> nproc_requested;  ///< unset = auto
  Sourced<int> scheduler_gpus;   ///< NodePlan::gpus_on_node, when the platform says
  Sourced<std::string> scheduler_gpu_indices;  ///< NodePlan::gpu_indices, when the platform says
  bool single_worker = false;    ///< NodePlan::single_worker
  int cpu_cores = 0;             ///< usable cores (NodeDescriptor::cpu_cores); 0 = unknown
  bool oversubscribe = false;    ///< --oversubscribe (NprocInput::oversubscribe)
  std::string master_addr;
  GpuBinding binding = GpuBinding::kLocalRank;
  TuningPolicy policy;
  /// The GPU source; nullptr = makeSystemGpuProbe(env) (NVML, then the CUDA driver).
  const GpuProbe* probe = nullptr;
};

struct NodeSizing {
  GpuInventory inventory;
  VisibleGpus visible;
  NprocDecision nproc;
  Tuning tuning;
  GpuBinding binding = GpuBinding::kLocalRank;

  bool ok() const { return nproc.ok(); }
  const std::string& error() const { return nproc.error; }
  /// Variables every worker of the node gets (the tuning), each with its reason.
  std::map<std::string, Sourced<std::string>> nodeEnv() const { return tuning.env; }
  /// Variables of worker `local_rank` (its device), each with its reason.
  std::map<std::string, Sourced<std::string>> workerEnv(int local_rank) const;
  /// What describe should say: the GPUs found, the decision's notes, CUDA_VISIBLE_DEVICES warnings, tuning notes.
  std::vector<std::string> notes() const;
};

/// Probes, decides and tunes. When the decision fails (ok() false) the tuning is still computed, for the doctor;
/// taehv-run must refuse to start.
NodeSizing sizeNode(const NodeSizingInput& input);

}  // namespace taehv::sizing
