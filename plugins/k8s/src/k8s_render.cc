#include "taehv/k8s/k8s_render.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <regex>

#include "taehv/k8s/k8s_mapping.h"
#include "taehv/parse.h"
#include "taehv/torch_env/container_image.h"

namespace taehv::k8s {
namespace {

constexpr int kPyTorchJobDefaultPort = 23456;                // training-operator's default master port
constexpr const char* kPyTorchContainer = "pytorch";         // the operator looks up this container name
constexpr const char* kPyTorchPortName = "pytorchjob-port";  // ... and this port name for MASTER_PORT
constexpr const char* kJobLabel = "taehv-run/job";

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

void emitMetadata(YAML::Emitter& out, const K8sRenderOptions& o) {
  out << YAML::Key << "metadata" << YAML::Value << YAML::BeginMap;
  kv(out, "name", o.name);
  if (!o.namespace_name.empty()) kv(out, "namespace", o.namespace_name);
  out << YAML::Key << "labels" << YAML::Value << YAML::BeginMap;
  kv(out, "app.kubernetes.io/name", "taehv");
  kv(out, kJobLabel, o.name);
  out << YAML::EndMap << YAML::EndMap;
}

struct EnvVar {
  std::string name;
  std::string value;
};

/// One container running taehv-run. `env` is what the platform-side mapping reads.
void emitContainer(YAML::Emitter& out, const K8sRenderOptions& o, const std::string& container_name,
                   const std::string& port_name, const std::vector<EnvVar>& env, bool completion_index_env) {
  out << YAML::BeginMap;
  kv(out, "name", container_name);
  kv(out, "image", o.image);
  out << YAML::Key << "command" << YAML::Value << YAML::Flow << YAML::BeginSeq << "taehv-run" << YAML::EndSeq;
  if (!o.command.empty()) {
    out << YAML::Key << "args" << YAML::Value << YAML::BeginSeq;
    emitString(out, "--");
    for (const auto& a : o.command) emitString(out, a);
    out << YAML::EndSeq;
  }
  if (!env.empty() || completion_index_env) {
    out << YAML::Key << "env" << YAML::Value << YAML::BeginSeq;
    if (completion_index_env) {
      // The Job controller sets JOB_COMPLETION_INDEX itself on current clusters; the downward API entry makes
      // it explicit (the controller does not add a second one) and works on every version with Indexed Jobs.
      out << YAML::BeginMap;
      kv(out, "name", "JOB_COMPLETION_INDEX");
      out << YAML::Key << "valueFrom" << YAML::Value << YAML::BeginMap << YAML::Key << "fieldRef" << YAML::Value
          << YAML::BeginMap;
      kv(out, "fieldPath", "metadata.annotations['batch.kubernetes.io/job-completion-index']");
      out << YAML::EndMap << YAML::EndMap << YAML::EndMap;
    }
    for (const auto& e : env) {
      out << YAML::BeginMap;
      kv(out, "name", e.name);
      kv(out, "value", e.value);
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  out << YAML::Key << "ports" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
  kv(out, "name", port_name);
  kv(out, "containerPort", masterPort(o));
  kv(out, "protocol", "TCP");
  out << YAML::EndMap << YAML::EndSeq;
  if (o.gpus_per_node > 0) {
    out << YAML::Key << "resources" << YAML::Value << YAML::BeginMap << YAML::Key << "limits" << YAML::Value
        << YAML::BeginMap;
    kv(out, "nvidia.com/gpu", o.gpus_per_node);
    out << YAML::EndMap << YAML::EndMap;
  }
  out << YAML::Key << "volumeMounts" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
  kv(out, "name", "dshm");
  kv(out, "mountPath", "/dev/shm");
  out << YAML::EndMap << YAML::EndSeq;
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

std::string renderIndexedJob(const K8sRenderOptions& o) {
  const std::string service = o.name;  // the headless Service gets the Job's name: pods are <job>-<i>.<job>
  YAML::Emitter out;
  out << YAML::Comment("taehv-run " + o.name + ": " + std::to_string(o.nodes) + " node(s) x " +
                       std::to_string(workersPerNode(o)) + " worker(s); rendered by `taehv-run --backend k8s render`");
  // Headless Service: gives every pod of the Job the stable DNS name <job>-<index>.<service>.
  out << YAML::BeginMap;
  kv(out, "apiVersion", "v1");
  kv(out, "kind", "Service");
  emitMetadata(out, o);
  out << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
  kv(out, "clusterIP", "None");
  // Publish pod names before readiness: workers look the master up while it is still starting.
  out << YAML::Key << "publishNotReadyAddresses" << YAML::Value << true;
  out << YAML::Key << "selector" << YAML::Value << YAML::BeginMap;
  kv(out, kJobLabel, o.name);
  out << YAML::EndMap;
  out << YAML::Key << "ports" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
  kv(out, "name", "c10d");
  kv(out, "port", masterPort(o));
  kv(out, "targetPort", masterPort(o));
  kv(out, "protocol", "TCP");
  out << YAML::EndMap << YAML::EndSeq;
  out << YAML::EndMap << YAML::EndMap;

  out << YAML::BeginDoc << YAML::BeginMap;
  kv(out, "apiVersion", "batch/v1");
  kv(out, "kind", "Job");
  emitMetadata(out, o);
  out << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
  kv(out, "completionMode", "Indexed");
  kv(out, "completions", o.nodes);
  kv(out, "parallelism", o.nodes);
  // One failed rank fails the Job: the others cannot continue without it, and a retried pod alone would
  // wait for peers that are gone. taehv-run restarts workers inside the pod (--max-restarts) instead.
  kv(out, "backoffLimit", 0);
  out << YAML::Key << "podFailurePolicy" << YAML::Value << YAML::BeginMap << YAML::Key << "rules" << YAML::Value
      << YAML::BeginSeq << YAML::BeginMap;
  kv(out, "action", "FailJob");
  out << YAML::Key << "onExitCodes" << YAML::Value << YAML::BeginMap;
  kv(out, "operator", "NotIn");
  out << YAML::Key << "values" << YAML::Value << YAML::Flow << YAML::BeginSeq << 0 << YAML::EndSeq;
  out << YAML::EndMap << YAML::EndMap << YAML::EndSeq << YAML::EndMap;
  out << YAML::Key << "template" << YAML::Value << YAML::BeginMap;
  emitPodLabels(out, o);
  out << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
  kv(out, "subdomain", service);
  kv(out, "restartPolicy", "Never");
  out << YAML::Key << "containers" << YAML::Value << YAML::BeginSeq;
  emitContainer(out, o, "taehv", "c10d",
                {{kEnvK8sNnodes, std::to_string(o.nodes)},
                 {kEnvK8sMasterAddr, o.name + "-0." + service},
                 {kEnvK8sMasterPort, std::to_string(masterPort(o))},
                 {kEnvK8sNprocPerNode, std::to_string(workersPerNode(o))},
                 {kEnvK8sGpusPerNode, std::to_string(std::max(o.gpus_per_node, 0))},
                 {kEnvK8sJobName, o.name}},
                true);
  out << YAML::EndSeq;
  emitShmVolume(out, o);
  out << YAML::EndMap << YAML::EndMap;  // template.spec, template
  out << YAML::EndMap << YAML::EndMap;  // spec, document
  return std::string(out.c_str()) + "\n";
}

void emitReplicaSpec(YAML::Emitter& out, const K8sRenderOptions& o, const char* type, int replicas) {
  out << YAML::Key << type << YAML::Value << YAML::BeginMap;
  kv(out, "replicas", replicas);
  kv(out, "restartPolicy", "Never");
  out << YAML::Key << "template" << YAML::Value << YAML::BeginMap;
  emitPodLabels(out, o);
  out << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "containers" << YAML::Value << YAML::BeginSeq;
  emitContainer(out, o, kPyTorchContainer, kPyTorchPortName, {}, false);
  out << YAML::EndSeq;
  emitShmVolume(out, o);
  out << YAML::EndMap << YAML::EndMap << YAML::EndMap;
}

std::string renderPyTorchJob(const K8sRenderOptions& o) {
  YAML::Emitter out;
  out << YAML::Comment("taehv-run " + o.name + ": Kubeflow PyTorchJob, " + std::to_string(o.nodes) + " pod(s) x " +
                       std::to_string(workersPerNode(o)) +
                       " worker(s); rendered by `taehv-run --backend k8s render --flavor pytorchjob`");
  out << YAML::BeginMap;
  kv(out, "apiVersion", "kubeflow.org/v1");
  kv(out, "kind", "PyTorchJob");
  emitMetadata(out, o);
  out << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
  // The operator exports it as PET_NPROC_PER_NODE and multiplies WORLD_SIZE by it (training-operator >= v1.7).
  kv(out, "nprocPerNode", std::to_string(workersPerNode(o)));
  out << YAML::Key << "runPolicy" << YAML::Value << YAML::BeginMap;
  kv(out, "backoffLimit", 0);
  kv(out, "cleanPodPolicy", "None");
  out << YAML::EndMap;
  out << YAML::Key << "pytorchReplicaSpecs" << YAML::Value << YAML::BeginMap;
  emitReplicaSpec(out, o, "Master", 1);
  if (o.nodes > 1) emitReplicaSpec(out, o, "Worker", o.nodes - 1);
  out << YAML::EndMap << YAML::EndMap << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

bool takeValue(const std::vector<std::string>& args, size_t& i, std::string& value, std::string& error) {
  const std::string& a = args[i];
  auto eq = a.find('=');
  if (eq != std::string::npos) {
    value = a.substr(eq + 1);
    return true;
  }
  if (i + 1 >= args.size()) {
    error = a + " needs a value";
    return false;
  }
  value = args[++i];
  return true;
}

std::string readCountFlag(const std::string& flag, const std::string& text, int min_value, int max_value,
                          int& out) {
  auto v = parseCount(text);
  if (!v || *v < min_value || *v > max_value) {
    return flag + " " + text + " is not a whole number in " + std::to_string(min_value) + ".." +
           std::to_string(max_value);
  }
  out = *v;
  return "";
}

}  // namespace

std::string checkK8sJobName(const std::string& name, const std::string& flavor, int nodes) {
  static const std::regex kDns1035(R"(^[a-z]([-a-z0-9]*[a-z0-9])?$)");
  if (!std::regex_match(name, kDns1035)) {
    return "--name " + name +
           " is not a valid Kubernetes name: lower-case letters, digits and '-', starting with "
           "a letter and ending with a letter or digit (e.g. --name taehv-train)";
  }
  // Pod host names (<job>-<index>, <job>-worker-<index>) must stay DNS labels of at most 63 characters.
  const std::string longest_pod = flavor == "pytorchjob" ? name + "-worker-" + std::to_string(std::max(nodes - 2, 0))
                                                         : name + "-" + std::to_string(nodes - 1);
  if (longest_pod.size() > 63) {
    return "--name " + name + " is too long: pod host name " + longest_pod + " would exceed 63 characters";
  }
  return "";
}

std::string k8sRenderUsage() {
  return "usage: taehv-run --backend k8s render|submit --nodes N --gpus-per-node G --image IMAGE\n"
         "         [--name NAME] [--namespace NS] [--flavor indexed-job|pytorchjob] [--nproc-per-node P]\n"
         "         [--port PORT] [--shm-size SIZE] [-- COMMAND...]\n"
         "  render prints the manifest (YAML); submit pipes it to `kubectl apply -f -`.\n"
         "  indexed-job (default): an Indexed Job (one pod per node) plus a headless Service;\n"
         "  pytorchjob: a Kubeflow PyTorchJob (needs the training-operator). Pods run `taehv-run [-- COMMAND]`.\n";
}

std::string parseK8sRenderArgs(const std::vector<std::string>& args, K8sRenderOptions& out) {
  bool have_gpus = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      out.command.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      if (out.command.empty()) return "nothing after `--`: give the worker command or drop the `--`";
      break;
    }
    const std::string flag = a.substr(0, a.find('='));
    std::string value, error;
    auto need = [&]() { return takeValue(args, i, value, error); };
    if (flag == "--nodes") {
      if (!need()) return error;
      if (auto e = readCountFlag(flag, value, 1, 100000, out.nodes); !e.empty()) return e;
    } else if (flag == "--gpus-per-node") {
      if (!need()) return error;
      if (auto e = readCountFlag(flag, value, 0, 1024, out.gpus_per_node); !e.empty()) return e;
      have_gpus = true;
    } else if (flag == "--nproc-per-node") {
      if (!need()) return error;
      if (auto e = readCountFlag(flag, value, 1, 1024, out.nproc_per_node); !e.empty()) return e;
    } else if (flag == "--port") {
      if (!need()) return error;
      if (auto e = readCountFlag(flag, value, 1, 65535, out.port); !e.empty()) return e;
    } else if (flag == "--image") {
      if (!need()) return error;
      out.image = value;
    } else if (flag == "--name") {
      if (!need()) return error;
      out.name = value;
    } else if (flag == "--namespace") {
      if (!need()) return error;
      out.namespace_name = value;
    } else if (flag == "--flavor") {
      if (!need()) return error;
      if (value != "indexed-job" && value != "pytorchjob") {
        return "--flavor " + value + " is unknown: use indexed-job or pytorchjob";
      }
      out.flavor = value;
    } else if (flag == "--shm-size") {
      if (!need()) return error;
      static const std::regex kQuantity(R"(^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$)");
      if (!std::regex_match(value, kQuantity)) return "--shm-size " + value + " is not a size like 16Gi or 512Mi";
      out.shm_size = value;
    } else {
      return "unknown option " + a +
             " (options: --nodes --gpus-per-node --image --name --namespace --flavor "
             "--nproc-per-node --port --shm-size, then -- COMMAND)";
    }
  }
  if (out.nodes < 1) return "--nodes N is required (the number of pods, one per node)";
  if (!have_gpus) return "--gpus-per-node G is required (0 for CPU-only pods)";
  if (out.image.empty()) return "--image IMAGE is required (an image with taehv-run installed)";
  if (std::string e = torch_env::imageReferenceError(out.image); !e.empty()) return e;
  if (!out.namespace_name.empty()) {
    static const std::regex kDns1123(R"(^[a-z0-9]([-a-z0-9]*[a-z0-9])?$)");
    if (!std::regex_match(out.namespace_name, kDns1123) || out.namespace_name.size() > 63) {
      return "--namespace " + out.namespace_name + " is not a valid namespace name (lower-case letters, digits, '-')";
    }
  }
  return checkK8sJobName(out.name, out.flavor, out.nodes);
}

std::string renderK8s(const K8sRenderOptions& options) {
  return options.flavor == "pytorchjob" ? renderPyTorchJob(options) : renderIndexedJob(options);
}

}  // namespace taehv::k8s
