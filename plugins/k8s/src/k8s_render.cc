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

Status readCountFlag(const std::string& flag, const std::string& text, int min_value, int max_value, int& out) {
  auto v = parseCount(text);
  if (!v || *v < min_value || *v > max_value) {
    return {flag + " " + text + " is not a whole number in " + std::to_string(min_value) + ".." +
           std::to_string(max_value)};
  }
  out = *v;
  return {};
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

std::vector<OptionSpec> k8sRenderOptions() {
  std::vector<OptionSpec> options = torch_env::renderJobOptions(
      "pods, one per node", "nvidia.com/gpu limit per pod; 0 for CPU-only pods", "the job's name, a DNS-1035 label");
  options.insert(options.end(),
                 {{"namespace", "NS", "namespace (default: kubectl's current one)"},
                  {"flavor", "trainjob|jobset|indexed-job|pytorchjob", "the kind of job (default indexed-job)"},
                  {"nproc-per-node", "P", "workers per pod (default G, or 1 without GPUs)"},
                  {"port", "PORT", "master port (default 29500; PyTorchJob: the operator's 23456)"},
                  {"shm-size", "SIZE", "size limit of the pods' /dev/shm, e.g. 16Gi (default none)"},
                  {"max-restarts", "N", "jobset, trainjob: restart the whole job up to N times"},
                  {"runtime-kind", "TrainingRuntime|ClusterTrainingRuntime", "trainjob: the kind of runtime"},
                  {"runtime", "NAME", "trainjob: the runtime's name (default the job's name)"}});
  return options;
}

std::string k8sRenderHelp() {
  return "render prints the manifest (YAML); submit pipes it to `kubectl apply -f -`.\n"
         "  trainjob: a Kubeflow Trainer v2 TrainJob plus the TrainingRuntime (or ClusterTrainingRuntime) it uses;\n"
         "  jobset: a JobSet (needs the JobSet controller); both restart the whole job up to --max-restarts times\n"
         "  and carry a Secret with the job's token (env TAEHV_JOB_TOKEN);\n"
         "  indexed-job (default): an Indexed Job (one pod per node) plus a headless Service, nothing to install;\n"
         "  pytorchjob: a Kubeflow PyTorchJob (training-operator v1, legacy upstream).\n"
         "  Pods run `taehv-run [-- COMMAND]`.\n";
}

Status parseK8sRenderArgs(const CommandArgs& args, K8sRenderOptions& out) {
  const OptionValues& given = args.options;
  // Reads option NAME into `target` when it was given, or fails with what is wrong with its value.
  const auto count = [&](const std::string& name, int min_value, int max_value, int& target) -> Status {
    const std::string* v = optionValue(given, name);
    return v ? readCountFlag("--" + name, *v, min_value, max_value, target) : Status{};
  };
  for (const Status& e :
       {count("nodes", 1, 100000, out.nodes), count("gpus-per-node", 0, 1024, out.gpus_per_node),
        count("nproc-per-node", 1, 1024, out.nproc_per_node), count("port", 1, 65535, out.port),
        count("max-restarts", 0, kMaxJobRestarts, out.max_restarts)}) {
    if (!e.ok()) return e;
  }
  if (Status text = torch_env::readJobText(args,
                                           {{"image", &out.image}, {"name", &out.name},
                                            {"namespace", &out.namespace_name}, {"flavor", &out.flavor},
                                            {"shm-size", &out.shm_size}, {"runtime-kind", &out.runtime_kind},
                                            {"runtime", &out.runtime_name}},
                                           out.command);
      !text.ok()) {
    return text;
  }
  if (out.flavor != "indexed-job" && out.flavor != "pytorchjob" && out.flavor != "jobset" && out.flavor != "trainjob") {
    return {"--flavor " + out.flavor + " is unknown: use trainjob, jobset, indexed-job or pytorchjob"};
  }
  static const std::regex kQuantity(R"(^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$)");
  if (given.count("shm-size") && !std::regex_match(out.shm_size, kQuantity)) {
    return {"--shm-size " + out.shm_size + " is not a size like 16Gi or 512Mi"};
  }
  if (out.runtime_kind != "TrainingRuntime" && out.runtime_kind != "ClusterTrainingRuntime") {
    return {"--runtime-kind " + out.runtime_kind + " is unknown: use TrainingRuntime or ClusterTrainingRuntime"};
  }
  const bool have_runtime = given.count("runtime-kind") || given.count("runtime");
  const bool jobset_like = out.flavor == "jobset" || out.flavor == "trainjob";
  if (given.count("max-restarts") && !jobset_like) {
    return {"--max-restarts applies to --flavor jobset and trainjob (restarts of the whole job); with " + out.flavor +
           " give it to taehv-run in the pod instead (-- after the image's command is the worker's)"};
  }
  if (have_runtime && out.flavor != "trainjob") return {"--runtime and --runtime-kind apply to --flavor trainjob only"};
  if (out.flavor == "trainjob" && out.port > 0 && out.port != kDefaultMasterPort) {
    return {"--port " + std::to_string(out.port) + ": the Trainer's torch plugin fixes the master port at " +
           std::to_string(kDefaultMasterPort) + "; drop --port with --flavor trainjob"};
  }
  if (out.nodes < 1) return {"--nodes N is required (the number of pods, one per node)"};
  if (!given.count("gpus-per-node")) return {"--gpus-per-node G is required (0 for CPU-only pods)"};
  if (out.image.empty()) return {"--image IMAGE is required (an image with taehv-run installed)"};
  if (Status image = torch_env::checkImageReference(out.image); !image.ok()) return image;
  if (!out.namespace_name.empty()) {
    static const std::regex kDns1123(R"(^[a-z0-9]([-a-z0-9]*[a-z0-9])?$)");
    if (!std::regex_match(out.namespace_name, kDns1123) || out.namespace_name.size() > 63) {
      return {"--namespace " + out.namespace_name + " is not a valid namespace name (lower-case letters, digits, '-')"};
    }
  }
  if (!out.runtime_name.empty()) {
    static const std::regex kDns1123(R"(^[a-z0-9]([-a-z0-9]*[a-z0-9])?$)");
    if (!std::regex_match(out.runtime_name, kDns1123) || out.runtime_name.size() > 63) {
      return {"--runtime " + out.runtime_name + " is not a valid Kubernetes name (lower-case letters, digits, '-')"};
    }
  }
  return {checkK8sJobName(out.name, out.flavor, out.nodes).error};
}

std::string renderK8s(const K8sRenderOptions& options) {
  if (options.flavor == "trainjob") return renderTrainJob(options);
  if (options.flavor == "jobset") return renderJobSet(options);
  return options.flavor == "pytorchjob" ? renderPyTorchJob(options) : renderIndexedJob(options);
}

}  // namespace taehv::k8s
