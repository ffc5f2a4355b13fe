#include "taehv/k8s/k8s_render.h"

#include <algorithm>
#include <cctype>
#include <regex>

#include "manifest.h"
#include "taehv/k8s/k8s_mapping.h"
#include "taehv/parse.h"
#include "taehv/torch_env/container_image.h"

namespace taehv::k8s {

using namespace manifest;  // the shared manifest pieces (this file only)

namespace {

constexpr const char* kPyTorchContainer = "pytorch";         // the operator looks up this container name
constexpr const char* kPyTorchPortName = "pytorchjob-port";  // ... and this port name for MASTER_PORT
/// --max-restarts bound: the host's limit on restarts (kMaxRestarts in core's descriptor.h).
constexpr int kMaxJobRestarts = 1000000;

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
                {completionIndexEnv(),
                 valueEnv(kEnvK8sNnodes, std::to_string(o.nodes)),
                 valueEnv(kEnvK8sMasterAddr, o.name + "-0." + service),
                 valueEnv(kEnvK8sMasterPort, std::to_string(masterPort(o))),
                 valueEnv(kEnvK8sNprocPerNode, std::to_string(workersPerNode(o))),
                 valueEnv(kEnvK8sGpusPerNode, std::to_string(std::max(o.gpus_per_node, 0))),
                 valueEnv(kEnvK8sJobName, o.name)});
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
  emitContainer(out, o, kPyTorchContainer, kPyTorchPortName, {});
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

Status checkK8sJobName(const std::string& name, const std::string& flavor, int nodes) {
  static const std::regex kDns1035(R"(^[a-z]([-a-z0-9]*[a-z0-9])?$)");
  if (!std::regex_match(name, kDns1035)) {
    return {"--name " + name +
            " is not a valid Kubernetes name: lower-case letters, digits and '-', starting with "
            "a letter and ending with a letter or digit (e.g. --name taehv-train)"};
  }
  // Pod host names (<job>-<index>, <job>-worker-<index>, <job>-node-0-<index>) must stay DNS labels of at most 63
  // characters.
  const std::string last = std::to_string(std::max(nodes - 1, 0));
  std::string longest_pod = name + "-" + last;
  if (flavor == "pytorchjob") longest_pod = name + "-worker-" + std::to_string(std::max(nodes - 2, 0));
  if (flavor == "jobset" || flavor == "trainjob") longest_pod = name + "-" + kReplicatedJob + "-0-" + last;
  if (longest_pod.size() > 63) {
    return {"--name " + name + " is too long: pod host name " + longest_pod + " would exceed 63 characters"};
  }
  return {};
}

std::string k8sRenderUsage() {
  return "usage: taehv-run --backend k8s render|submit --nodes N --gpus-per-node G --image IMAGE\n"
         "         [--name NAME] [--namespace NS] [--flavor trainjob|jobset|indexed-job|pytorchjob]\n"
         "         [--nproc-per-node P] [--port PORT] [--shm-size SIZE] [--max-restarts N]\n"
         "         [--runtime-kind TrainingRuntime|ClusterTrainingRuntime] [--runtime NAME] [-- COMMAND...]\n"
         "  render prints the manifest (YAML); submit pipes it to `kubectl apply -f -`.\n"
         "  trainjob: a Kubeflow Trainer v2 TrainJob plus the TrainingRuntime (or ClusterTrainingRuntime) it uses;\n"
         "  jobset: a JobSet (needs the JobSet controller); both restart the whole job up to --max-restarts times\n"
         "  and carry a Secret with the job's token (env TAEHV_JOB_TOKEN);\n"
         "  indexed-job (default): an Indexed Job (one pod per node) plus a headless Service, nothing to install;\n"
         "  pytorchjob: a Kubeflow PyTorchJob (training-operator v1, legacy upstream).\n"
         "  Pods run `taehv-run [-- COMMAND]`.\n";
}

std::string parseK8sRenderArgs(const std::vector<std::string>& args, K8sRenderOptions& out) {
  bool have_gpus = false, have_restarts = false, have_runtime = false;
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
      if (value != "indexed-job" && value != "pytorchjob" && value != "jobset" && value != "trainjob") {
        return "--flavor " + value + " is unknown: use trainjob, jobset, indexed-job or pytorchjob";
      }
      out.flavor = value;
    } else if (flag == "--shm-size") {
      if (!need()) return error;
      static const std::regex kQuantity(R"(^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$)");
      if (!std::regex_match(value, kQuantity)) return "--shm-size " + value + " is not a size like 16Gi or 512Mi";
      out.shm_size = value;
    } else if (flag == "--max-restarts") {
      if (!need()) return error;
      if (auto e = readCountFlag(flag, value, 0, kMaxJobRestarts, out.max_restarts); !e.empty()) return e;
      have_restarts = true;
    } else if (flag == "--runtime-kind") {
      if (!need()) return error;
      if (value != "TrainingRuntime" && value != "ClusterTrainingRuntime") {
        return "--runtime-kind " + value + " is unknown: use TrainingRuntime or ClusterTrainingRuntime";
      }
      out.runtime_kind = value;
      have_runtime = true;
    } else if (flag == "--runtime") {
      if (!need()) return error;
      out.runtime_name = value;
      have_runtime = true;
    } else {
      return "unknown option " + a +
             " (options: --nodes --gpus-per-node --image --name --namespace --flavor "
             "--nproc-per-node --port --shm-size --max-restarts --runtime-kind --runtime, then -- COMMAND)";
    }
  }
  const bool jobset_like = out.flavor == "jobset" || out.flavor == "trainjob";
  if (have_restarts && !jobset_like) {
    return "--max-restarts applies to --flavor jobset and trainjob (restarts of the whole job); with " + out.flavor +
           " give it to taehv-run in the pod instead (-- after the image's command is the worker's)";
  }
  if (have_runtime && out.flavor != "trainjob") return "--runtime and --runtime-kind apply to --flavor trainjob only";
  if (out.flavor == "trainjob" && out.port > 0 && out.port != kDefaultMasterPort) {
    return "--port " + std::to_string(out.port) + ": the Trainer's torch plugin fixes the master port at " +
           std::to_string(kDefaultMasterPort) + "; drop --port with --flavor trainjob";
  }
  if (out.nodes < 1) return "--nodes N is required (the number of pods, one per node)";
  if (!have_gpus) return "--gpus-per-node G is required (0 for CPU-only pods)";
  if (out.image.empty()) return "--image IMAGE is required (an image with taehv-run installed)";
  if (Status image = torch_env::checkImageReference(out.image); !image.ok()) return image.error;
  if (!out.namespace_name.empty()) {
    static const std::regex kDns1123(R"(^[a-z0-9]([-a-z0-9]*[a-z0-9])?$)");
    if (!std::regex_match(out.namespace_name, kDns1123) || out.namespace_name.size() > 63) {
      return "--namespace " + out.namespace_name + " is not a valid namespace name (lower-case letters, digits, '-')";
    }
  }
  if (!out.runtime_name.empty()) {
    static const std::regex kDns1123(R"(^[a-z0-9]([-a-z0-9]*[a-z0-9])?$)");
    if (!std::regex_match(out.runtime_name, kDns1123) || out.runtime_name.size() > 63) {
      return "--runtime " + out.runtime_name + " is not a valid Kubernetes name (lower-case letters, digits, '-')";
    }
  }
  return checkK8sJobName(out.name, out.flavor, out.nodes).error;
}

std::string renderK8s(const K8sRenderOptions& options) {
  if (options.flavor == "trainjob") return renderTrainJob(options);
  if (options.flavor == "jobset") return renderJobSet(options);
  return options.flavor == "pytorchjob" ? renderPyTorchJob(options) : renderIndexedJob(options);
}

}  // namespace taehv::k8s
