// Alibaba Cloud PAI-DLC: mapping its PyTorch environment to a node plan, and rendering a CreateJob request.
//
// DLC injects (https://www.alibabacloud.com/help/en/pai/user-guide/general-environment-variables):
//   MASTER_ADDR (e.g. dlc18isgeayd****-master-0), MASTER_PORT (e.g. 23456), WORLD_SIZE = number of nodes,
//   RANK = node index (0 = master), NPROC_PER_NODE = GPUs per node.
// Jobs are created with the DLC OpenAPI CreateJob (POST /api/v1/jobs, a JSON body with DisplayName, JobType,
// JobSpecs[{Type, Image, PodCount, EcsSpec | ResourceConfig}], UserCommand, ...); no Kubernetes manifest applies.
#pragma once

#include <string>
#include <vector>

#include "taehv/plugin_api.h"

namespace taehv::pai {

/// Confidence for the pai backend, keyed on what only DLC sets: 96 for a master named dlc<id>-master-0 (above the
/// k8s backend's 90 for the training-operator's PET_* variables, which DLC pods may carry too), 80 for
/// NPROC_PER_NODE beside the torch variables, 0 without a DLC sign.
Detection detectPai(const Env& env);

/// This node's plan on PAI-DLC.
PlanResult planPai(const Env& env, const PlanRequest& request);

/// What `taehv-run --backend pai render|submit` was asked for.
struct PaiRenderOptions {
  int nodes = 0;
  int gpus_per_node = -1;
  std::string image;
  std::string name = "taehv-train";
  std::string ecs_spec;     ///< public resources: instance type, e.g. ecs.gn7i-c8g1.2xlarge
  std::string resource_id;  ///< a resource quota; then ResourceConfig carries GPU/CPU/Memory
  std::string workspace_id;
  std::string cpu;     ///< ResourceConfig.CPU (with --resource-id)
  std::string memory;  ///< ResourceConfig.Memory, e.g. 64Gi (with --resource-id)
  std::vector<std::string> command;
};

/// The options of `render` and `submit` (both take `-- COMMAND` too), for their CommandSpecs.
std::vector<OptionSpec> paiRenderOptions();

/// What `render --help` and `submit --help` say after the options.
std::string paiRenderHelp();

/// Reads `render`'s / `submit`'s arguments (parsed by the host from paiRenderOptions()), or fails with one error
/// line.
Status parsePaiRenderArgs(const CommandArgs& args, PaiRenderOptions& out);

/// The CreateJob request body (JSON, pretty-printed).
std::string renderPai(const PaiRenderOptions& options);

/// The shell command line DLC runs on every node (UserCommand): `taehv-run [-- COMMAND...]`, quoted.
std::string paiUserCommand(const std::vector<std::string>& command);

}  // namespace taehv::pai
