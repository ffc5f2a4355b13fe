// Pieces of the rendered manifests shared by every flavour (k8s_render.cc, jobset_render.cc): YAML scalars, object
// metadata, container environment (literal, downward API, Secret), the taehv-run container, /dev/shm, GPU limits.
// Internal to the k8s plugin.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "taehv/k8s/k8s_render.h"
#include "taehv/plugin_api.h"

namespace taehv::k8s::manifest {

inline constexpr int kPyTorchJobDefaultPort = 23456;  ///< training-operator's default master port
inline constexpr const char* kJobLabel = "taehv-run/job";
/// The one replicated Job of a JobSet / TrainJob: Trainer v2 requires this name; pods are <job>-node-0-<index>.
inline constexpr const char* kReplicatedJob = "node";

/// Emits a string scalar, quoted when YAML would read it as a number, bool or null.
void emitString(YAML::Emitter& out, const std::string& s);
void kv(YAML::Emitter& out, const char* key, const std::string& value);
void kv(YAML::Emitter& out, const char* key, int value);

/// Workers per pod: --nproc-per-node, else the GPUs, else 1.
int workersPerNode(const K8sRenderOptions& o);
/// --port, else the flavour's default.
int masterPort(const K8sRenderOptions& o);

/// metadata of an object of job `o`, named `name` (default: the job's name).
void emitMetadata(YAML::Emitter& out, const K8sRenderOptions& o, const std::string& name = "");
/// The pod template's metadata: the labels that select every pod of this job.
void emitPodLabels(YAML::Emitter& out, const K8sRenderOptions& o);

/// One container variable: a literal value, a downward API field (`field_path`) or a Secret's key (`secret`).
struct EnvVar {
  std::string name;
  std::string value;
  std::string field_path;
  std::string secret;
  std::string secret_key;
};
EnvVar valueEnv(const std::string& name, const std::string& value);
EnvVar fieldEnv(const std::string& name, const std::string& field_path);
/// JOB_COMPLETION_INDEX through the downward API.
EnvVar completionIndexEnv();
/// `env:` of a container (nothing when empty).
void emitEnv(YAML::Emitter& out, const std::vector<EnvVar>& env);

/// `limits: {nvidia.com/gpu: gpus}` as a value (after a resources key).
void emitGpuLimits(YAML::Emitter& out, int gpus);
/// The container's /dev/shm mount, and the pod's memory volume behind it (--shm-size).
void emitShmMount(YAML::Emitter& out);
void emitShmVolume(YAML::Emitter& out, const K8sRenderOptions& o);
/// `args: [--, COMMAND...]` when a worker command was given.
void emitWorkerArgs(YAML::Emitter& out, const K8sRenderOptions& o);
/// One container running taehv-run. `env` is what the platform-side mapping reads.
void emitContainer(YAML::Emitter& out, const K8sRenderOptions& o, const std::string& container_name,
                   const std::string& port_name, const std::vector<EnvVar>& env);

/// The Kubeflow Trainer v2 TrainJob with its (Cluster)TrainingRuntime, and the JobSet (jobset_render.cc).
std::string renderTrainJob(const K8sRenderOptions& o);
std::string renderJobSet(const K8sRenderOptions& o);

}  // namespace taehv::k8s::manifest
