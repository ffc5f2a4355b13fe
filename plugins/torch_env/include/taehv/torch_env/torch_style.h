// The "torch-style" environment of container platforms: WORLD_SIZE = nodes, RANK = node rank, MASTER_ADDR,
// MASTER_PORT (KubeBrain-style Kubernetes, Kubeflow PyTorchJob before v1.7, Alibaba Cloud PAI-DLC), read into a
// node plan. Which platform an environment belongs to is each backend's own business (its detect()), not this
// library's: every backend keys detection on signs only its platform gives.
#pragma once

#include <string>

#include "taehv/plugin_api.h"

namespace taehv::torch_env {

/// The most nodes a plan may have (the Indexed Job completions limit; far above any real training job).
inline constexpr int kMaxNodes = 100000;

/// How a torch-style platform is read.
struct TorchStyleSpec {
  std::string platform;              ///< for messages and notes, e.g. "PAI-DLC"
  std::string world_size_meaning;    ///< why WORLD_SIZE counts nodes here, for the note
  bool read_nproc_per_node = false;  ///< PAI-DLC: NPROC_PER_NODE = GPUs (workers) per node
};

/// Plan for torch-style platforms; contradictions are errors naming the variables.
PlanResult planTorchStyle(const Env& env, const PlanRequest& request, const TorchStyleSpec& spec);

}  // namespace taehv::torch_env
