// Mapping Kubernetes training environments to a node plan. The flavours, told apart by signs only each gives:
//   Kubeflow Trainer v2 TrainJob: JOB_COMPLETION_INDEX (its pods belong to an Indexed Job of a JobSet) together with
//     the torch plugin's PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR (<trainjob>-node-0-0.
//     <trainjob>), PET_MASTER_PORT; PET_NODE_RANK and JOB_COMPLETION_INDEX must agree.
//   JobSet (ours from `render --flavor jobset`, or a user's): JOBSET_NAME, which JobSet sets only as a label and the
//     pod template passes through the downward API (with JOBSET_REPLICATED_JOB, JOBSET_JOB_INDEX and
//     JOBSET_RESTART_ATTEMPT); node rank = JOB_COMPLETION_INDEX of the one replicated Job; node count etc. from the
//     TAEHV_K8S_* variables; the master defaults to <jobset>-<replicatedJob>-0-0.<jobset>.
//   Indexed Job rendered by `taehv-run --backend k8s render`: JOB_COMPLETION_INDEX (set by the Job controller)
//     is the node rank; node count, master and port come from the TAEHV_K8S_* variables the manifest injects.
//   Kubeflow PyTorchJob: RANK / PET_NODE_RANK = node rank; PET_NNODES, PET_NPROC_PER_NODE, MASTER_ADDR /
//     PET_MASTER_ADDR, MASTER_PORT / PET_MASTER_PORT; WORLD_SIZE counts processes since training-operator v1.7
//     (replicas x nprocPerNode) and pods before it.
//   KubeBrain-style platforms (and PyTorchJob before v1.7): WORLD_SIZE = nodes, RANK = node rank, MASTER_ADDR,
//     MASTER_PORT; GPUs per node left to taehv-run's detection.
// PET_* and WORLD_SIZE/RANK/MASTER_ADDR alone are torchrun's and any launcher's variables: they count as a
// Kubernetes sign only inside a pod (KUBERNETES_SERVICE_HOST), and the bare torch-style shape only weakly, so that
// a backend with a sign of its own (pai's dlc*-master-0, NPROC_PER_NODE) wins without this file knowing it.
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

/// JobSet's labels and annotations as a JobSet pod template passes them in through the downward API (JobSet itself
/// sets no variables): the contract between `render --flavor jobset` (or a user's JobSet) and plan.
/// Label jobset.sigs.k8s.io/jobset-name, and .../replicatedjob-name, .../job-index; annotation .../restart-attempt.
inline constexpr const char* kEnvJobSetName = "JOBSET_NAME";
inline constexpr const char* kEnvJobSetReplicatedJob = "JOBSET_REPLICATED_JOB";
inline constexpr const char* kEnvJobSetJobIndex = "JOBSET_JOB_INDEX";
inline constexpr const char* kEnvJobSetRestartAttempt = "JOBSET_RESTART_ATTEMPT";

/// The per-job token (a Secret of the rendered JobSet / TrainJob) the node group of a job reads.
inline constexpr const char* kEnvJobToken = "TAEHV_JOB_TOKEN";

enum class K8sFlavor { kNone, kTrainJob, kJobSet, kIndexedJob, kPyTorchJob, kTorchStyle };

/// Which Kubernetes flavour `env` looks like (kNone: none).
K8sFlavor k8sFlavor(const Env& env);

/// The flavour's name as describe and doctor print it, e.g. "Kubeflow Trainer v2 TrainJob".
std::string k8sFlavorName(K8sFlavor flavor);

/// Confidence for the k8s backend, from Kubernetes-only signs: 95 for a TrainJob, a JobSet and our Indexed Job,
/// 90 for a PyTorchJob (PET_* in a pod), 70 for another Indexed Job, 30 for WORLD_SIZE/RANK/MASTER_ADDR in a pod
/// (any backend with a sign of its own outranks it), 0 outside a pod without JOB_COMPLETION_INDEX.
Detection detectK8s(const Env& env);

/// This node's plan on Kubernetes; contradictions are errors naming the variables.
PlanResult planK8s(const Env& env, const PlanRequest& request);

}  // namespace taehv::k8s
