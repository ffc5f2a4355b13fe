// Rendering a Kubeflow Trainer v2 TrainJob (with the runtime it references) and a JobSet, each with a Secret holding
// the job's token and the communication environment sizing chooses for the node count.
#include <random>

#include "manifest.h"
#include "taehv/k8s/k8s_mapping.h"
#include "taehv/sizing/tuning.h"

namespace taehv::k8s::manifest {
namespace {

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

}  // namespace

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

}  // namespace taehv::k8s::manifest
