#include "manifest.h"

#include <algorithm>
#include <regex>

namespace taehv::k8s::manifest {

/// Emits a string scalar, quoted when YAML would read it as a number, bool or null.
void emitString(YAML::Emitter& out, const std::string& s) {
  static const std::regex kAmbiguous(
      R"(^$|^[-+.0-9eE_xXoO:]+$|^(?:[Tt]rue|TRUE|[Ff]alse|FALSE|[Yy]es|YES|[Nn]o|NO|[Oo]n|ON|[Oo]ff|OFF|[Yy]|[Nn]|~|[Nn]ull|NULL)$)");
  if (std::regex_match(s, kAmbiguous)) out << YAML::DoubleQuoted;
  out << s;
}

void kv(YAML::Emitter& out, const char* key, const std::string& value) {
  out << YAML::Key << key << YAML::Value;
  emitString(out, value);
}

void kv(YAML::Emitter& out, const char* key, int value) { out << YAML::Key << key << YAML::Value << value; }

int workersPerNode(const K8sRenderOptions& o) {
  if (o.nproc_per_node > 0) return o.nproc_per_node;
  return o.gpus_per_node > 0 ? o.gpus_per_node : 1;
}

int masterPort(const K8sRenderOptions& o) {
  if (o.port > 0) return o.port;
  return o.flavor == "pytorchjob" ? kPyTorchJobDefaultPort : kDefaultMasterPort;
}

/// metadata of an object of job `o`, named `name` (default: the job's name).
void emitMetadata(YAML::Emitter& out, const K8sRenderOptions& o, const std::string& name) {
  out << YAML::Key << "metadata" << YAML::Value << YAML::BeginMap;
  kv(out, "name", name.empty() ? o.name : name);
  if (!o.namespace_name.empty()) kv(out, "namespace", o.namespace_name);
  out << YAML::Key << "labels" << YAML::Value << YAML::BeginMap;
  kv(out, "app.kubernetes.io/name", "taehv");
  kv(out, kJobLabel, o.name);
  out << YAML::EndMap << YAML::EndMap;
}

EnvVar valueEnv(const std::string& name, const std::string& value) { return {name, value, "", "", ""}; }
EnvVar fieldEnv(const std::string& name, const std::string& field_path) { return {name, "", field_path, "", ""}; }

/// The Job controller sets JOB_COMPLETION_INDEX itself on current clusters; the downward API entry makes it
/// explicit (the controller does not add a second one) and works on every version with Indexed Jobs.
EnvVar completionIndexEnv() {
  return fieldEnv("JOB_COMPLETION_INDEX", "metadata.annotations['batch.kubernetes.io/job-completion-index']");
}

void emitEnv(YAML::Emitter& out, const std::vector<EnvVar>& env) {
  if (env.empty()) return;
  out << YAML::Key << "env" << YAML::Value << YAML::BeginSeq;
  for (const auto& e : env) {
    out << YAML::BeginMap;
    kv(out, "name", e.name);
    if (!e.field_path.empty()) {
      out << YAML::Key << "valueFrom" << YAML::Value << YAML::BeginMap << YAML::Key << "fieldRef" << YAML::Value
          << YAML::BeginMap;
      kv(out, "fieldPath", e.field_path);
      out << YAML::EndMap << YAML::EndMap;
    } else if (!e.secret.empty()) {
      out << YAML::Key << "valueFrom" << YAML::Value << YAML::BeginMap << YAML::Key << "secretKeyRef" << YAML::Value
          << YAML::BeginMap;
      kv(out, "name", e.secret);
      kv(out, "key", e.secret_key);
      out << YAML::EndMap << YAML::EndMap;
    } else {
      kv(out, "value", e.value);
    }
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
}

void emitGpuLimits(YAML::Emitter& out, int gpus) {
  out << YAML::BeginMap << YAML::Key << "limits" << YAML::Value << YAML::BeginMap;
  kv(out, "nvidia.com/gpu", gpus);
  out << YAML::EndMap << YAML::EndMap;
}

void emitShmMount(YAML::Emitter& out) {
  out << YAML::Key << "volumeMounts" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
  kv(out, "name", "dshm");
  kv(out, "mountPath", "/dev/shm");
  out << YAML::EndMap << YAML::EndSeq;
}

void emitWorkerArgs(YAML::Emitter& out, const K8sRenderOptions& o) {
  if (o.command.empty()) return;
  out << YAML::Key << "args" << YAML::Value << YAML::BeginSeq;
  emitString(out, "--");
  for (const auto& a : o.command) emitString(out, a);
  out << YAML::EndSeq;
}

/// One container running taehv-run. `env` is what the platform-side mapping reads.
void emitContainer(YAML::Emitter& out, const K8sRenderOptions& o, const std::string& container_name,
                   const std::string& port_name, const std::vector<EnvVar>& env) {
  out << YAML::BeginMap;
  kv(out, "name", container_name);
  kv(out, "image", o.image);
  out << YAML::Key << "command" << YAML::Value << YAML::Flow << YAML::BeginSeq << "taehv-run" << YAML::EndSeq;
  emitWorkerArgs(out, o);
  emitEnv(out, env);
  out << YAML::Key << "ports" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
  kv(out, "name", port_name);
  kv(out, "containerPort", masterPort(o));
  kv(out, "protocol", "TCP");
  out << YAML::EndMap << YAML::EndSeq;
  if (o.gpus_per_node > 0) {
    out << YAML::Key << "resources" << YAML::Value;
    emitGpuLimits(out, o.gpus_per_node);
  }
  emitShmMount(out);
  out << YAML::EndMap;
}

/// The pod template's metadata: the labels that select every pod of this job.
void emitPodLabels(YAML::Emitter& out, const K8sRenderOptions& o) {
  out << YAML::Key << "metadata" << YAML::Value << YAML::BeginMap << YAML::Key << "labels" << YAML::Value
      << YAML::BeginMap;
  kv(out, "app.kubernetes.io/name", "taehv");
  kv(out, kJobLabel, o.name);
  out << YAML::EndMap << YAML::EndMap;
}

void emitShmVolume(YAML::Emitter& out, const K8sRenderOptions& o) {
  // NCCL and DataLoader workers use /dev/shm; a container's default is 64 MiB.
  out << YAML::Key << "volumes" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
  kv(out, "name", "dshm");
  out << YAML::Key << "emptyDir" << YAML::Value << YAML::BeginMap;
  kv(out, "medium", "Memory");
  if (!o.shm_size.empty()) kv(out, "sizeLimit", o.shm_size);
  out << YAML::EndMap << YAML::EndMap << YAML::EndSeq;
}

}  // namespace taehv::k8s::manifest
