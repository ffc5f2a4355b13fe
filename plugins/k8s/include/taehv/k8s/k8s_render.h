// Rendering a Kubernetes job for taehv-run: a Kubeflow Trainer v2 TrainJob with the (Cluster)TrainingRuntime it
// references, a JobSet, an Indexed Job plus its headless Service, or a Kubeflow PyTorchJob (v1, legacy upstream).
// The rendered pods run `taehv-run` with no flags; the k8s backend maps what the manifest (or the operator) puts in
// their environment. TrainJob and JobSet come with a Secret holding a per-job token (env TAEHV_JOB_TOKEN) and the
// communication environment sizing chooses for the node count. Output is YAML text for `kubectl apply -f -`.
#pragma once

#include <string>
#include <vector>

#include "taehv/checked.h"
#include "taehv/plugin_api.h"

namespace taehv::k8s {

/// What `taehv-run --backend k8s render|submit` was asked for.
struct K8sRenderOptions {
  int nodes = 0;           ///< pods (one per node), >= 1
  int gpus_per_node = -1;  ///< nvidia.com/gpu limit per pod; 0 = CPU only
  int nproc_per_node = 0;  ///< workers per pod; 0 = gpus_per_node, or 1 without GPUs
  std::string image;       ///< container image holding taehv-run
  std::string name = "taehv-train";
  std::string namespace_name;          ///< empty = kubectl's current namespace
  std::string flavor = "indexed-job";  ///< trainjob | jobset | indexed-job | pytorchjob
  int port = 0;  ///< master port; 0 = 29500 (Indexed Job, JobSet) or 23456 (PyTorchJob operator default)
  std::string shm_size;  ///< sizeLimit of the /dev/shm memory volume, e.g. "16Gi"; empty = no limit
  int max_restarts = 0;  ///< jobset, trainjob: failurePolicy.maxRestarts (restarts of every pod of the job together)
  std::string runtime_kind = "TrainingRuntime";  ///< trainjob: TrainingRuntime | ClusterTrainingRuntime
  std::string runtime_name;                      ///< trainjob: the runtime's name; empty = the job's name
  std::string job_token;  ///< jobset, trainjob: the Secret's token; empty = 32 random bytes, hex (tests fix it)
  std::vector<std::string> command;    ///< worker command after `--`; empty = taehv-run's default trainer
};

/// The options of `render` and `submit` (both take `-- COMMAND` too), for their CommandSpecs.
std::vector<OptionSpec> k8sRenderOptions();

/// What `render --help` and `submit --help` say after the options: the flavors.
std::string k8sRenderHelp();

/// Reads `render`'s / `submit`'s arguments (parsed by the host from k8sRenderOptions()), or fails with one line
/// saying what is wrong.
Status parseK8sRenderArgs(const CommandArgs& args, K8sRenderOptions& out);

/// The manifest as YAML (documents separated by ---). Options must have passed parseK8sRenderArgs.
/// Not deterministic for jobset and trainjob unless `job_token` is set: each render makes a new token.
std::string renderK8s(const K8sRenderOptions& options);

/// Checks `name` as a Kubernetes object name usable for this job (DNS-1035 label, room for pod suffixes); fails
/// with an error line.
Status checkK8sJobName(const std::string& name, const std::string& flavor, int nodes);

}  // namespace taehv::k8s
