#include "taehv/k8s/k8s_mapping.h"

#include <algorithm>
#include <limits>

#include "taehv/env.h"
#include "taehv/parse.h"
#include "taehv/torch_env/container_plan.h"
#include "taehv/torch_env/torch_style.h"

namespace taehv::k8s {

using namespace torch_env;  // the container backends' shared reads and checks (this file only)

namespace {

bool hasAny(const Env& env, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return envValue(env, n).has_value(); });
}

std::string sourcedInt(const Sourced<int>& v) { return std::to_string(*v.value) + " (" + v.source + ")"; }

/// Reads `name` into `field` when it is set (see readCountEnv).
Status readCountInto(Sourced<int>& field, const Env& env, const std::string& name, int min_value, int max_value) {
  const Checked<Sourced<int>> read = readCountEnv(env, name, min_value, max_value);
  if (!read.ok()) return {read.error};
  if (read.value.has()) field = read.value;
  return {};
}

/// Reads one value that the platform may give under two names (e.g. RANK and PET_NODE_RANK); they must agree.
Checked<Sourced<int>> readCountEither(const Env& env, const char* first, const char* second, int min_value,
                                      int max_value) {
  const Checked<Sourced<int>> a = readCountEnv(env, first, min_value, max_value);
  if (!a.ok()) return a;
  const Checked<Sourced<int>> b = readCountEnv(env, second, min_value, max_value);
  if (!b.ok()) return b;
  if (a.value.has() && b.value.has() && *a.value.value != *b.value.value) {
    return {std::string(first) + "=" + std::to_string(*a.value.value) + " and " + second + "=" +
            std::to_string(*b.value.value) + " disagree; the pod's environment is inconsistent"};
  }
  return a.value.has() ? a : b;
}

Checked<Sourced<std::string>> readStringEither(const Env& env, const char* first, const char* second) {
  Checked<Sourced<std::string>> out;
  auto a = envValue(env, first);
  auto b = envValue(env, second);
  if (a && b && *a != *b) {
    return {std::string(first) + "=" + *a + " and " + second + "=" + *b +
            " disagree; the pod's environment is "
            "inconsistent"};
  }
  if (a)
    out.value.set(*a, std::string("env ") + first);
  else if (b)
    out.value.set(*b, std::string("env ") + second);
  return out;
}

/// The restart attempt a JobSet passes in (JOBSET_RESTART_ATTEMPT, downward API), as the plan's restart count.
Status readRestartAttempt(const Env& env, NodePlan& p) {
  // Bounded again (and named) by the host's validation of restart counts.
  return readCountInto(p.restart_count, env, kEnvJobSetRestartAttempt, 0, std::numeric_limits<int>::max());
}

/// JobSet: the master is pod 0 of Job 0 of the replicated Job, <jobset>-<replicatedJob>-0-0, under the headless
/// Service JobSet names after itself (unless network.subdomain says otherwise: then TAEHV_K8S_MASTER_ADDR is needed).
Status jobSetMaster(const Env& env, NodePlan& p) {
  if (p.master_addr.has()) return {};
  auto jobset = envValue(env, kEnvJobSetName);
  auto rjob = envValue(env, kEnvJobSetReplicatedJob);
  if (!rjob) {
    return {std::string("JobSet ") + *jobset + ": no master: set " + kEnvK8sMasterAddr +
            " (pod 0's name, e.g. <jobset>-<replicatedJob>-0-0.<jobset>) or pass " + kEnvJobSetReplicatedJob +
            " from the label jobset.sigs.k8s.io/replicatedjob-name through the downward API"};
  }
  const std::string rule = std::string("rule: <") + kEnvJobSetName + ">-<" + kEnvJobSetReplicatedJob + ">-0-0.<" +
                           kEnvJobSetName + "> (pod 0 under JobSet's headless Service)";
  p.master_addr.set(*jobset + "-" + *rjob + "-0-0." + *jobset, rule);
  return {};
}

/// Indexed Job (ours) and JobSet (ours or a user's): node rank = JOB_COMPLETION_INDEX, the rest from the TAEHV_K8S_*
/// variables the manifest injects; a JobSet may leave the master and port to their defaults.
PlanResult planIndexed(const Env& env, const PlanRequest& request, K8sFlavor flavor) {
  const bool jobset = flavor == K8sFlavor::kJobSet;
  const std::string platform = k8sFlavorName(flavor);
  PlanResult r;
  NodePlan& p = r.value;
  if (Status s = readCountInto(p.node_rank, env, "JOB_COMPLETION_INDEX", 0, kMaxNodes - 1); !s.ok()) {
    return failedPlan(s.error);
  }
  if (jobset && !p.node_rank.has()) {
    return failedPlan(platform + " " + *envValue(env, kEnvJobSetName) +
                      ": JOB_COMPLETION_INDEX is not set; make the replicated Job Indexed (completionMode: Indexed)");
  }
  if (jobset) {
    Sourced<int> job_index;
    if (Status s = readCountInto(job_index, env, kEnvJobSetJobIndex, 0, kMaxNodes - 1); !s.ok()) {
      return failedPlan(s.error);
    }
    if (job_index.has() && *job_index.value != 0) {
      return failedPlan(platform + ": " + kEnvJobSetJobIndex + "=" + std::to_string(*job_index.value) +
                        ": taehv-run maps one Indexed Job of N pods (replicas: 1, completions: N); give the "
                        "replicated Job replicas: 1 and completions = nodes");
    }
    if (Status s = readRestartAttempt(env, p); !s.ok()) return failedPlan(s.error);
  }
  if (Status s = readCountInto(p.nnodes, env, kEnvK8sNnodes, 1, kMaxNodes); !s.ok()) return failedPlan(s.error);
  if (!p.nnodes.has()) {
    const std::string render =
        jobset ? "`taehv-run --backend k8s render --flavor jobset`" : "`taehv-run --backend k8s render`";
    const std::string master =
        jobset ? "" : std::string(", ") + kEnvK8sMasterAddr + "=<job>-0.<headless service> and " + kEnvK8sMasterPort;
    return failedPlan(platform + ": JOB_COMPLETION_INDEX=" + *envValue(env, "JOB_COMPLETION_INDEX") + " is set but " +
                      kEnvK8sNnodes + " is not; render the " + (jobset ? "JobSet" : "Job") + " with " + render +
                      ", or add env " + kEnvK8sNnodes + "=<spec.completions>" + master + " to its pod template");
  }
  if (auto a = envValue(env, kEnvK8sMasterAddr)) p.master_addr.set(*a, std::string("env ") + kEnvK8sMasterAddr);
  if (jobset) {
    if (Status s = jobSetMaster(env, p); !s.ok()) return failedPlan(s.error);
  }
  if (Status s = readCountInto(p.master_port, env, kEnvK8sMasterPort, 1, 65535); !s.ok()) return failedPlan(s.error);
  if (jobset && !p.master_port.has()) {
    p.master_port.set(kDefaultMasterPort, std::string("default (") + kEnvK8sMasterPort + " not set)");
  }
  if (Status s = readCountInto(p.nproc_per_node, env, kEnvK8sNprocPerNode, 1, 1024); !s.ok()) {
    return failedPlan(s.error);
  }
  if (Status s = readCountInto(p.gpus_on_node, env, kEnvK8sGpusPerNode, 0, 1024); !s.ok()) return failedPlan(s.error);
  if (auto job = envValue(env, kEnvK8sJobName)) {
    p.run_id.set(*job, std::string("env ") + kEnvK8sJobName);
  } else if (jobset) {
    p.run_id.set(*envValue(env, kEnvJobSetName), std::string("env ") + kEnvJobSetName);
  }
  if (jobset) {
    p.notes.push_back("JobSet " + *envValue(env, kEnvJobSetName) +
                      ": node rank = JOB_COMPLETION_INDEX of its one Indexed Job; the JobSet's name and restart "
                      "attempt come from its labels through the downward API; node count from the manifest's " +
                      kEnvK8sNnodes + "; master " + *p.master_addr.value + " (" + p.master_addr.source + ")");
  } else {
    p.notes.push_back(
        "Kubernetes Indexed Job: node rank = JOB_COMPLETION_INDEX (set by the Job controller); node "
        "count and master injected by the rendered manifest (master = pod 0's stable name "
        "<job>-0.<headless service>)");
  }
  // A WORLD_SIZE the user added to the pod template is read, not trusted: it must count nodes or processes.
  if (auto ws_text = envValue(env, "WORLD_SIZE")) {
    auto ws = parseCount(*ws_text);
    const int n = *p.nnodes.value;
    const int nproc = p.nproc_per_node.has() ? *p.nproc_per_node.value : 0;
    if (!ws) return failedPlan("WORLD_SIZE=" + *ws_text + " is not a whole number");
    if (*ws == n) {
      p.notes.push_back("WORLD_SIZE=" + *ws_text + " equals the node count; not used");
    } else if (nproc > 0 && *ws == n * nproc) {
      p.notes.push_back("WORLD_SIZE=" + *ws_text + " equals nodes x processes per node; not used");
    } else {
      return failedPlan(platform + ": WORLD_SIZE=" + *ws_text + " matches neither the node count " +
                        sourcedInt(p.nnodes) +
                        (nproc > 0 ? " nor nodes x processes per node = " + std::to_string(n * nproc) : std::string()) +
                        "; remove WORLD_SIZE from the pod template or fix it");
    }
  }
  return finishPlan(std::move(r), request, platform);
}

/// Kubeflow PyTorchJob (training-operator v1) and Trainer v2 TrainJob: both set torchrun's PET_* variables; v1 also
/// WORLD_SIZE/RANK/MASTER_*, v2 runs its pods as an Indexed Job (JOB_COMPLETION_INDEX = PET_NODE_RANK).
PlanResult planPetVariables(const Env& env, const PlanRequest& request, K8sFlavor flavor) {
  const bool trainjob = flavor == K8sFlavor::kTrainJob;
  const std::string platform = k8sFlavorName(flavor);
  PlanResult r;
  NodePlan& p = r.value;
  const Checked<Sourced<int>> node_rank = readCountEither(env, "PET_NODE_RANK", "RANK", 0, kMaxNodes - 1);
  if (!node_rank.ok()) return failedPlan(platform + ": " + node_rank.error);
  p.node_rank = node_rank.value;
  if (!p.node_rank.has()) return failedPlan(platform + ": neither RANK nor PET_NODE_RANK is set; no node rank");
  if (trainjob) {
    Sourced<int> index;
    if (Status s = readCountInto(index, env, "JOB_COMPLETION_INDEX", 0, kMaxNodes - 1); !s.ok()) {
      return failedPlan(s.error);
    }
    if (*index.value != *p.node_rank.value) {
      const char* rank_name = envValue(env, "PET_NODE_RANK") ? "PET_NODE_RANK" : "RANK";
      return failedPlan(platform + ": " + rank_name + "=" + std::to_string(*p.node_rank.value) +
                        " and JOB_COMPLETION_INDEX=" + std::to_string(*index.value) +
                        " disagree; the Trainer derives one from the other: the pod's environment is inconsistent");
    }
    if (Status s = readRestartAttempt(env, p); !s.ok()) return failedPlan(s.error);
  }

  // PET_NPROC_PER_NODE: a number, or auto/cpu/gpu (torchrun decides); the operator then counts 1 per pod.
  int nproc = 0;  // 0 = not a number
  if (auto text = envValue(env, "PET_NPROC_PER_NODE")) {
    if (auto v = parseCount(*text); v && *v >= 1) {
      nproc = *v;
      p.nproc_per_node.set(nproc, "env PET_NPROC_PER_NODE");
    } else if (*text == "auto" || *text == "gpu" || *text == "cpu") {
      p.notes.push_back("PET_NPROC_PER_NODE=" + *text + ": workers per node left to taehv-run's detection");
    } else {
      return failedPlan(platform + ": PET_NPROC_PER_NODE=" + *text + " is neither a positive number nor auto/gpu/cpu");
    }
  }

  int ws = 0;  // 0 = WORLD_SIZE not set
  if (auto text = envValue(env, "WORLD_SIZE")) {
    auto v = parseCount(*text);
    if (!v || *v < 1) return failedPlan(platform + ": WORLD_SIZE=" + *text + " is not a positive whole number");
    ws = *v;
  }
  if (auto text = envValue(env, "PET_NNODES")) {
    if (text->find(':') != std::string::npos) {
      return failedPlan(platform + ": PET_NNODES=" + *text +
                        " is an elastic range; taehv-run needs a fixed node "
                        "count: remove elasticPolicy from the PyTorchJob (or set minReplicas = maxReplicas)");
    }
    if (Status s = readCountInto(p.nnodes, env, "PET_NNODES", 1, kMaxNodes); !s.ok()) {
      return failedPlan(platform + ": " + s.error);
    }
  }

  const int per_node = nproc > 0 ? nproc : 1;  // what the operator multiplied WORLD_SIZE by
  const std::string ws_text = "WORLD_SIZE=" + std::to_string(ws);
  if (p.nnodes.has()) {
    const int n = *p.nnodes.value;
    if (ws > 0) {
      if (ws % per_node != 0) {
        return failedPlan(platform + ": " + ws_text + " is not a multiple of PET_NPROC_PER_NODE=" +
                                std::to_string(per_node) + "; the pod's environment is inconsistent");
      }
      if (ws != n * per_node) {
        return failedPlan(platform + ": " + ws_text + " contradicts PET_NNODES=" + std::to_string(n) + " x " +
                          (nproc > 0 ? "PET_NPROC_PER_NODE=" + std::to_string(nproc)
                                     : std::string("1 process per pod (PET_NPROC_PER_NODE not a number)")) +
                          " = " + std::to_string(n * per_node) + "; the pod's environment is inconsistent");
      }
      p.notes.push_back(ws_text +
                        " counts processes (training-operator >= v1.7: replicas x nprocPerNode = " + std::to_string(n) +
                        " x " + std::to_string(per_node) + "); node count taken from PET_NNODES=" + std::to_string(n));
    } else {
      p.notes.push_back("node count from PET_NNODES (WORLD_SIZE not set)");
    }
  } else if (ws > 0) {
    if (nproc > 0) {
      if (ws % nproc != 0) {
        return failedPlan(platform + ": " + ws_text + " is not a multiple of PET_NPROC_PER_NODE=" +
                                std::to_string(nproc) + "; the pod's environment is inconsistent");
      }
      p.nnodes.set(ws / nproc,
                   "rule: WORLD_SIZE / PET_NPROC_PER_NODE = " + std::to_string(ws) + " / " + std::to_string(nproc));
      p.notes.push_back(ws_text +
                        " counts processes (training-operator >= v1.7), so nodes = WORLD_SIZE / "
                        "PET_NPROC_PER_NODE");
    } else {
      p.nnodes.set(ws, "env WORLD_SIZE (pods: training-operator < v1.7, or nprocPerNode not a number)");
      p.notes.push_back(ws_text +
                        " read as pods: PET_NNODES is not set and PET_NPROC_PER_NODE is not a number, "
                        "so the operator counted one process per pod");
    }
  } else {
    return failedPlan(platform + ": neither PET_NNODES nor WORLD_SIZE is set; no node count");
  }

  const Checked<Sourced<std::string>> master_addr = readStringEither(env, "PET_MASTER_ADDR", "MASTER_ADDR");
  if (!master_addr.ok()) return failedPlan(platform + ": " + master_addr.error);
  p.master_addr = master_addr.value;
  const Checked<Sourced<int>> master_port = readCountEither(env, "PET_MASTER_PORT", "MASTER_PORT", 1, 65535);
  if (!master_port.ok()) return failedPlan(platform + ": " + master_port.error);
  p.master_port = master_port.value;
  // The operator names the master pod <job>-master-0, the Trainer <trainjob>-node-0-0.<trainjob>: the job's name
  // is a stable run id for all pods.
  if (p.master_addr.has()) {
    const std::string& m = *p.master_addr.value;
    const std::string suffix = trainjob ? "-node-0-0." : "-master-0";
    const size_t at = trainjob ? m.find(suffix) : m.size() - std::min(m.size(), suffix.size());
    if (at != std::string::npos && at > 0 && m.compare(at, suffix.size(), suffix) == 0) {
      p.run_id.set(m.substr(0, at), "rule: " + p.master_addr.source + " before " + suffix);
    }
  }
  p.notes.push_back(trainjob ? "Kubeflow Trainer v2 TrainJob: node rank = PET_NODE_RANK (= JOB_COMPLETION_INDEX), "
                               "node count, processes per node and master from the Trainer's torch plugin (PET_*)"
                             : "Kubeflow PyTorchJob (training-operator v1, legacy upstream): node rank = "
                               "PET_NODE_RANK/RANK, master from the operator");
  return finishPlan(std::move(r), request, platform);
}

}  // namespace

K8sFlavor k8sFlavor(const Env& env) {
  const bool index = envValue(env, "JOB_COMPLETION_INDEX").has_value();
  const bool pet = hasAny(env, {"PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE", "PET_MASTER_ADDR"});
  const bool in_pod = envValue(env, "KUBERNETES_SERVICE_HOST").has_value();
  if (index && pet) return K8sFlavor::kTrainJob;  // a TrainJob's pods are JobSet pods too: PET_* decides
  if (envValue(env, kEnvJobSetName)) return K8sFlavor::kJobSet;
  if (index) return K8sFlavor::kIndexedJob;
  if (!in_pod) return K8sFlavor::kNone;  // PET_* and WORLD_SIZE/RANK alone are torchrun's and any launcher's
  if (pet) return K8sFlavor::kPyTorchJob;
  if (hasAny(env, {"WORLD_SIZE", "RANK", "MASTER_ADDR"})) return K8sFlavor::kTorchStyle;
  return K8sFlavor::kNone;
}

std::string k8sFlavorName(K8sFlavor flavor) {
  switch (flavor) {
    case K8sFlavor::kTrainJob:
      return "Kubeflow Trainer v2 TrainJob";
    case K8sFlavor::kJobSet:
      return "JobSet";
    case K8sFlavor::kIndexedJob:
      return "Kubernetes Indexed Job";
    case K8sFlavor::kPyTorchJob:
      return "Kubeflow PyTorchJob";
    case K8sFlavor::kTorchStyle:
      return "Kubernetes (KubeBrain-style)";
    case K8sFlavor::kNone:
      break;
  }
  return "none";
}

Detection detectK8s(const Env& env) {
  const K8sFlavor flavor = k8sFlavor(env);
  const std::string name = k8sFlavorName(flavor);
  switch (flavor) {
    case K8sFlavor::kTrainJob:
      return {95, name + ": JOB_COMPLETION_INDEX and the Trainer's PET_* variables set"};
    case K8sFlavor::kJobSet:
      return {95, name + " " + *envValue(env, kEnvJobSetName) + ": " + kEnvJobSetName +
                      " passed from the label jobset.sigs.k8s.io/jobset-name"};
    case K8sFlavor::kIndexedJob:
      if (envValue(env, kEnvK8sNnodes)) {
        return {95,
                "Indexed Job rendered by taehv-run: JOB_COMPLETION_INDEX and " + std::string(kEnvK8sNnodes) + " set"};
      }
      return {70, name + ": JOB_COMPLETION_INDEX set (but not " + std::string(kEnvK8sNnodes) + ")"};
    case K8sFlavor::kPyTorchJob:
      return {90, name + ": PET_* variables set by the training-operator in a pod (KUBERNETES_SERVICE_HOST set)"};
    case K8sFlavor::kTorchStyle:
      // No sign of its own: WORLD_SIZE/RANK/MASTER_ADDR in a pod. Any backend with one (pai) outranks it.
      return {30,
              name + " or PyTorchJob < v1.7: WORLD_SIZE/RANK/MASTER_ADDR set in a pod (KUBERNETES_SERVICE_HOST set)"};
    case K8sFlavor::kNone:
      break;
  }
  return {0, "no JOB_COMPLETION_INDEX or JOBSET_NAME, and not in a pod with PET_* or WORLD_SIZE/RANK/MASTER_ADDR"};
}

PlanResult planK8s(const Env& env, const PlanRequest& request) {
  const K8sFlavor flavor = k8sFlavor(env);
  switch (flavor) {
    case K8sFlavor::kTrainJob:
    case K8sFlavor::kPyTorchJob:
      return planPetVariables(env, request, flavor);
    case K8sFlavor::kJobSet:
    case K8sFlavor::kIndexedJob:
      return planIndexed(env, request, flavor);
    case K8sFlavor::kTorchStyle:
      return planTorchStyle(env, request,
                            {k8sFlavorName(flavor),
                             "KubeBrain-style platforms and Kubeflow training-operator < v1.7 set it to the pod "
                             "count",
                             false});
    case K8sFlavor::kNone:
      break;
  }
  return failedPlan(
      "no Kubernetes training environment found: expected PET_* with JOB_COMPLETION_INDEX (Kubeflow Trainer v2 "
      "TrainJob), JOBSET_NAME (a JobSet passing its labels through the downward API), JOB_COMPLETION_INDEX (an "
      "Indexed Job rendered by `taehv-run --backend k8s render`), or, in a pod (KUBERNETES_SERVICE_HOST), "
      "PET_NNODES/PET_NODE_RANK (Kubeflow PyTorchJob) or WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT "
      "(KubeBrain-style); none is set");
}

}  // namespace taehv::k8s
