// Mapping Kubernetes training environments to a node plan. Three flavours, told apart by their variables:
//   Indexed Job rendered by `taehv-run --backend k8s render`: JOB_COMPLETION_INDEX (set by the Job controller)
//     is the node rank; node count, master and port come from the TAEHV_K8S_* variables the manifest injects.
//   Kubeflow PyTorchJob: RANK / PET_NODE_RANK = node rank; PET_NNODES, PET_NPROC_PER_NODE, MASTER_ADDR /
//     PET_MASTER_ADDR, MASTER_PORT / PET_MASTER_PORT; WORLD_SIZE counts processes since training-operator v1.7
//     (replicas x nprocPerNode) and pods before it.
//   KubeBrain-style platforms (and PyTorchJob before v1.7): WORLD_SIZE = nodes, RANK = node rank, MASTER_ADDR,
//     MASTER_PORT; GPUs per node left to taehv-run's detection.
// WORLD_SIZE is never passed through: NodePlan.nnodes counts nodes and a note says how it was derived.
#pragma once

#include <string>
#include <vector>

#include "taehv/plugin_api.h"

namespace taehv::k8s {

/// Variables a rendered Indexed Job sets in its pod template: the contract between render and plan.
inline constexpr const char* kEnvK8sNnodes = "TAEHV_K8S_NNODES";
inline constexpr const char* kEnvK8sMasterAddr = "TAEHV_K8S_MASTER_ADDR";
inline constexpr const char* kEnvK8sMasterPort = "TAEHV_K8S_MASTER_PORT";
inline constexpr const char* kEnvK8sNprocPerNode = "TAEHV_K8S_NPROC_PER_NODE";
inline constexpr const char* kEnvK8sGpusPerNode = "TAEHV_K8S_GPUS_PER_NODE";
inline constexpr const char* kEnvK8sJobName = "TAEHV_K8S_JOB_NAME";

enum class K8sFlavor { kNone, kIndexedJob, kPyTorchJob, kTorchStyle };

/// Which Kubernetes flavour `env` looks like (kNone: none).
K8sFlavor k8sFlavor(const Env& env);

/// Confidence for the k8s backend. Never ties with the pai backend on one platform's environment:
/// PAI-DLC-shaped environments (NPROC_PER_NODE, or MASTER_ADDR dlc*-master-0) score below pai's.
Detection detectK8s(const Env& env);

/// This node's plan on Kubernetes; contradictions are errors naming the variables.
PlanResult planK8s(const Env& env, const PlanRequest& request);

}  // namespace taehv::k8s
