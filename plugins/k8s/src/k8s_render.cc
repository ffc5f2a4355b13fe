#include "taehv/k8s/k8s_render.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <random>
#include <regex>

#include "taehv/k8s/k8s_mapping.h"
#include "taehv/parse.h"
#include "taehv/sizing/tuning.h"
#include "taehv/torch_env/container_image.h"

namespace taehv::k8s {
namespace {

constexpr int kPyTorchJobDefaultPort = 23456;                // training-operator's default master port
constexpr const char* kPyTorchContainer = "pytorch";         // the operator looks up this container name
constexpr const char* kPyTorchPortName = "pytorchjob-port";  // ... and this port name for MASTER_PORT
constexpr const char* kJobLabel = "taehv-run/job";
/// --max-restarts bound: the host's limit on restarts (kMaxRestarts in core's descriptor.h).
constexpr int kMaxJobRestarts = 1000000;

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
void emitMetadata(YAML::Emitter& out, const K8sRenderOptions& o, const std::string& name = "") {
  out << YAML::Key << "metadata" << YAML::Value << YAML::BeginMap;
  kv(out, "name", name.empty() ? o.name : name);
  if (!o.namespace_name.empty()) kv(out, "namespace", o.namespace_name);
  out << YAML::Key << "labels" << YAML::Value << YAML::BeginMap;
  kv(out, "app.kubernetes.io/name", "taehv");
  kv(out, kJobLabel, o.name);
  out << YAML::EndMap << YAML::EndMap;
}

/// One container variable: a literal value, a downward API field (`field_path`) or a Secret's key (`secret`).
struct EnvVar {
  std::string name;
  std::string value;
  std::string field_path;
  std::string secret;
  std::string secret_key;
};

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

// ---- JobSet and Kubeflow Trainer v2 ----

constexpr const char* kReplicatedJob = "node";  // Trainer v2 requires this name; JobSet pods are <job>-node-0-<i>
constexpr const char* kTokenKey = "token";
constexpr const char* kTrainerApiGroup = "trainer.kubeflow.org";

std::string tokenSecretName(const K8sRenderOptions& o) { return o.name + "-token"; }

/// 32 bytes from the system's random source, hex: the job token when the options carry none.
std::string newJobToken() {
  std::random_device random;  // getrandom()/dev/urandom on Linux
  static const char* kHex = "0123456789abcdef";
  std::string token;
  for (int i = 0; i < 16; ++i) {
    const unsigned v = random();
    for (int b = 0; b < 4; ++b) token += kHex[(v >> (4 * b)) & 0xf];
  }
  return token;
}

/// The Secret holding the job's token; pods see it as env TAEHV_JOB_TOKEN (see jobTokenEnv).
void emitTokenSecret(YAML::Emitter& out, const K8sRenderOptions& o) {
  out << YAML::BeginMap;
  kv(out, "apiVersion", "v1");
  kv(out, "kind", "Secret");
  emitMetadata(out, o, tokenSecretName(o));
  kv(out, "type", "Opaque");
  out << YAML::Key << "stringData" << YAML::Value << YAML::BeginMap;
  kv(out, kTokenKey, o.job_token.empty() ? newJobToken() : o.job_token);
  out << YAML::EndMap << YAML::EndMap;
}

EnvVar jobTokenEnv(const K8sRenderOptions& o) { return {kEnvJobToken, "", "", tokenSecretName(o), kTokenKey}; }

/// What sizing chooses for this node count (collective timeout; NCCL buffer with GPUs). Interfaces and InfiniBand
/// HCAs are the pod's business: taehv-run picks them inside the pod, where the network is known.
std::vector<EnvVar> tuningEnv(const K8sRenderOptions& o) {
  sizing::TuningInput in;
  in.nnodes = o.nodes;
  in.use_gpus = o.gpus_per_node > 0;
  in.sysfs_root = "/nonexistent";  // not this machine's HCAs: the pods run elsewhere
  std::vector<EnvVar> env;
  for (const auto& [name, value] : sizing::computeTuning(in).env) {
    if (name == "NCCL_IB_HCA" || name.find("SOCKET_IFNAME") != std::string::npos) continue;
    env.push_back(valueEnv(name, *value.value));
  }
  return env;
}

/// JobSet's labels and annotations through the downward API (JobSet sets no variables itself).
std::vector<EnvVar> jobSetEnv() {
  return {fieldEnv(kEnvJobSetName, "metadata.labels['jobset.sigs.k8s.io/jobset-name']"),
          fieldEnv(kEnvJobSetReplicatedJob, "metadata.labels['jobset.sigs.k8s.io/replicatedjob-name']"),
          fieldEnv(kEnvJobSetJobIndex, "metadata.labels['jobset.sigs.k8s.io/job-index']"),
          fieldEnv(kEnvJobSetRestartAttempt, "metadata.annotations['jobset.sigs.k8s.io/restart-attempt']")};
}

/// spec.network and spec.failurePolicy of a JobSet (also a runtime's JobSet template).
void emitJobSetPolicies(YAML::Emitter& out, const K8sRenderOptions& o) {
  // Pods reach each other as <jobset>-node-0-<i>.<jobset>, published before they are ready (the master is looked up
  // while it starts).
  out << YAML::Key << "network" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "enableDNSHostnames" << YAML::Value << true;
  out << YAML::Key << "publishNotReadyAddresses" << YAML::Value << true;
  out << YAML::EndMap;
  // A failed pod restarts the whole set (every rank together), at most --max-restarts times; JOBSET_RESTART_ATTEMPT
  // tells taehv-run which attempt it is.
  out << YAML::Key << "failurePolicy" << YAML::Value << YAML::BeginMap;
  kv(out, "maxRestarts", o.max_restarts);
  out << YAML::EndMap;
}

/// The Indexed Job of one replicated Job: `pod_spec` emits the pod template's spec body (containers onwards).
template <typename PodSpec>
void emitReplicatedJob(YAML::Emitter& out, const K8sRenderOptions& o, bool trainer_step, PodSpec pod_spec) {
  out << YAML::BeginMap;
  kv(out, "name", kReplicatedJob);
  if (!trainer_step) kv(out, "replicas", 1);
  out << YAML::Key << "template" << YAML::Value << YAML::BeginMap;
  if (trainer_step) {
    // The Trainer finds the replicated Job it fills in (numNodes, PET_*, the TrainJob's image and command) by this.
    out << YAML::Key << "metadata" << YAML::Value << YAML::BeginMap << YAML::Key << "labels" << YAML::Value
        << YAML::BeginMap;
    kv(out, "trainer.kubeflow.org/trainjob-ancestor-step", "trainer");
    out << YAML::EndMap << YAML::EndMap;
  }
  out << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
  if (!trainer_step) {  // the Trainer sets these from numNodes
    kv(out, "completionMode", "Indexed");
    kv(out, "completions", o.nodes);
    kv(out, "parallelism", o.nodes);
  }
  // Restarts are the JobSet's (failurePolicy): a Job retrying one pod alone would wait for peers that are gone.
  kv(out, "backoffLimit", 0);
  out << YAML::Key << "template" << YAML::Value << YAML::BeginMap;
  emitPodLabels(out, o);
  out << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
  kv(out, "restartPolicy", "Never");
  pod_spec();
  emitShmVolume(out, o);
  out << YAML::EndMap << YAML::EndMap;  // pod spec, pod template
  out << YAML::EndMap << YAML::EndMap;  // job spec, job template
  out << YAML::EndMap;
}

std::string renderJobSet(const K8sRenderOptions& o) {
  YAML::Emitter out;
  out << YAML::Comment("taehv-run " + o.name + ": JobSet, " + std::to_string(o.nodes) + " pod(s) x " +
                       std::to_string(workersPerNode(o)) +
                       " worker(s); rendered by `taehv-run --backend k8s render --flavor jobset`");
  emitTokenSecret(out, o);
  out << YAML::BeginDoc << YAML::BeginMap;
  kv(out, "apiVersion", "jobset.x-k8s.io/v1alpha2");
  kv(out, "kind", "JobSet");
  emitMetadata(out, o);
  out << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
  emitJobSetPolicies(out, o);
  out << YAML::Key << "replicatedJobs" << YAML::Value << YAML::BeginSeq;
  std::vector<EnvVar> env = {completionIndexEnv()};
  for (auto& e : jobSetEnv()) env.push_back(e);
  const std::vector<EnvVar> injected = {
      valueEnv(kEnvK8sNnodes, std::to_string(o.nodes)),
      valueEnv(kEnvK8sMasterAddr, o.name + "-" + kReplicatedJob + "-0-0." + o.name),
      valueEnv(kEnvK8sMasterPort, std::to_string(masterPort(o))),
      valueEnv(kEnvK8sNprocPerNode, std::to_string(workersPerNode(o))),
      valueEnv(kEnvK8sGpusPerNode, std::to_string(std::max(o.gpus_per_node, 0))),
      valueEnv(kEnvK8sJobName, o.name)};
  env.insert(env.end(), injected.begin(), injected.end());
  for (auto& e : tuningEnv(o)) env.push_back(e);
  env.push_back(jobTokenEnv(o));
  emitReplicatedJob(out, o, false, [&] {
    out << YAML::Key << "containers" << YAML::Value << YAML::BeginSeq;
    emitContainer(out, o, "taehv", "c10d", env);
    out << YAML::EndSeq;
  });
  out << YAML::EndSeq;
  out << YAML::EndMap << YAML::EndMap;  // spec, document
  return std::string(out.c_str()) + "\n";
}

std::string runtimeName(const K8sRenderOptions& o) { return o.runtime_name.empty() ? o.name : o.runtime_name; }

std::string renderTrainJob(const K8sRenderOptions& o) {
  const bool cluster = o.runtime_kind == "ClusterTrainingRuntime";
  YAML::Emitter out;
  out << YAML::Comment("taehv-run " + o.name + ": Kubeflow Trainer v2 TrainJob on " + o.runtime_kind + " " +
                       runtimeName(o) + ", " + std::to_string(o.nodes) + " node(s) x " +
                       std::to_string(workersPerNode(o)) +
                       " worker(s); rendered by `taehv-run --backend k8s render --flavor trainjob`");
  emitTokenSecret(out, o);

  // The runtime: what the Trainer's torch plugin builds the JobSet from. Per job (named after it by default), so
  // its /dev/shm size and maxRestarts are this job's.
  out << YAML::BeginDoc << YAML::BeginMap;
  kv(out, "apiVersion", std::string(kTrainerApiGroup) + "/v1alpha1");
  kv(out, "kind", o.runtime_kind);
  out << YAML::Key << "metadata" << YAML::Value << YAML::BeginMap;
  kv(out, "name", runtimeName(o));
  if (!cluster && !o.namespace_name.empty()) kv(out, "namespace", o.namespace_name);
  out << YAML::Key << "labels" << YAML::Value << YAML::BeginMap;
  kv(out, "trainer.kubeflow.org/framework", "torch");
  kv(out, "app.kubernetes.io/name", "taehv");
  out << YAML::EndMap << YAML::EndMap;
  out << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "mlPolicy" << YAML::Value << YAML::BeginMap;
  kv(out, "numNodes", o.nodes);
  out << YAML::Key << "torch" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::EndMap;
  out << YAML::EndMap;
  out << YAML::Key << "template" << YAML::Value << YAML::BeginMap << YAML::Key << "spec" << YAML::Value
      << YAML::BeginMap;
  emitJobSetPolicies(out, o);
  out << YAML::Key << "replicatedJobs" << YAML::Value << YAML::BeginSeq;
  emitReplicatedJob(out, o, true, [&] {
    out << YAML::Key << "containers" << YAML::Value << YAML::BeginSeq << YAML::BeginMap;
    kv(out, "name", "node");  // the Trainer fills in the container of this name
    kv(out, "image", o.image);
    out << YAML::Key << "command" << YAML::Value << YAML::Flow << YAML::BeginSeq << "taehv-run" << YAML::EndSeq;
    emitEnv(out, {fieldEnv(kEnvJobSetRestartAttempt, "metadata.annotations['jobset.sigs.k8s.io/restart-attempt']")});
    emitShmMount(out);
    out << YAML::EndMap << YAML::EndSeq;
  });
  out << YAML::EndSeq;
  out << YAML::EndMap << YAML::EndMap;  // template.spec, template
  out << YAML::EndMap << YAML::EndMap;  // spec, document

  // The TrainJob: this job's image, command, size and environment.
  out << YAML::BeginDoc << YAML::BeginMap;
  kv(out, "apiVersion", std::string(kTrainerApiGroup) + "/v1alpha1");
  kv(out, "kind", "TrainJob");
  emitMetadata(out, o);
  out << YAML::Key << "spec" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "runtimeRef" << YAML::Value << YAML::BeginMap;
  kv(out, "apiGroup", kTrainerApiGroup);
  kv(out, "kind", o.runtime_kind);
  kv(out, "name", runtimeName(o));
  out << YAML::EndMap;
  out << YAML::Key << "trainer" << YAML::Value << YAML::BeginMap;
  kv(out, "image", o.image);
  out << YAML::Key << "command" << YAML::Value << YAML::Flow << YAML::BeginSeq << "taehv-run" << YAML::EndSeq;
  emitWorkerArgs(out, o);
  std::vector<EnvVar> env = tuningEnv(o);
  env.push_back(jobTokenEnv(o));
  emitEnv(out, env);
  kv(out, "numNodes", o.nodes);
  kv(out, "numProcPerNode", workersPerNode(o));
  if (o.gpus_per_node > 0) {
    out << YAML::Key << "resourcesPerNode" << YAML::Value;
    emitGpuLimits(out, o.gpus_per_node);
  }
  out << YAML::EndMap;                  // trainer
  out << YAML::EndMap << YAML::EndMap;  // spec, document
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
  // Pod host names (<job>-<index>, <job>-worker-<index>, <job>-node-0-<index>) must stay DNS labels of at most 63
  // characters.
  const std::string last = std::to_string(std::max(nodes - 1, 0));
  const std::string longest_pod = flavor == "pytorchjob"                       ? name + "-worker-" + std::to_string(std::max(nodes - 2, 0))
                                  : flavor == "jobset" || flavor == "trainjob" ? name + "-" + kReplicatedJob + "-0-" + last
                                                                               : name + "-" + last;
  if (longest_pod.size() > 63) {
    return "--name " + name + " is too long: pod host name " + longest_pod + " would exceed 63 characters";
  }
  return "";
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
  if (std::string e = torch_env::imageReferenceError(out.image); !e.empty()) return e;
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
  return checkK8sJobName(out.name, out.flavor, out.nodes);
}

std::string renderK8s(const K8sRenderOptions& options) {
  if (options.flavor == "trainjob") return renderTrainJob(options);
  if (options.flavor == "jobset") return renderJobSet(options);
  return options.flavor == "pytorchjob" ? renderPyTorchJob(options) : renderIndexedJob(options);
}

}  // namespace taehv::k8s
