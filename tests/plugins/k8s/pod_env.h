// The environment a pod of a rendered TrainJob or JobSet gets, built from the manifest as the cluster would build it
// (no API server runs here): the container's literal values; downward API fields resolved to the labels and
// annotations JobSet and the Job controller put on the pod; Secret keys resolved from the manifest's Secret; and for
// a TrainJob what the Trainer's torch plugin adds (PET_*, documented in k8s_mapping_test.cc).
#pragma once

#include <yaml-cpp/yaml.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "taehv/plugin_api.h"

namespace taehv::testing {

/// The manifest's documents of `kind` (first match).
inline YAML::Node docOfKind(const std::vector<YAML::Node>& docs, const std::string& kind) {
  for (const auto& d : docs) {
    if (d["kind"].as<std::string>() == kind) return d;
  }
  throw std::runtime_error("no " + kind + " in the manifest");
}

/// Pod `index` of replicated Job `rjob` (Job 0) of JobSet `jobset`: its labels and annotations as fieldRef paths.
inline std::map<std::string, std::string> jobSetPodFields(const std::string& jobset, const std::string& rjob,
                                                          int index, int restart_attempt) {
  return {{"metadata.annotations['batch.kubernetes.io/job-completion-index']", std::to_string(index)},
          {"metadata.labels['jobset.sigs.k8s.io/jobset-name']", jobset},
          {"metadata.labels['jobset.sigs.k8s.io/replicatedjob-name']", rjob},
          {"metadata.labels['jobset.sigs.k8s.io/job-index']", "0"},
          {"metadata.annotations['jobset.sigs.k8s.io/restart-attempt']", std::to_string(restart_attempt)}};
}

/// Adds a container's `env` list to `out`, resolving fieldRef through `fields` and secretKeyRef through the
/// manifest's Secrets. A fieldRef or secret the cluster could not resolve throws (the pod would not start).
inline void addContainerEnv(const YAML::Node& env_list, const std::vector<YAML::Node>& docs,
                            const std::map<std::string, std::string>& fields, Env& out) {
  for (const auto& e : env_list) {
    const std::string name = e["name"].as<std::string>();
    if (e["value"]) {
      out[name] = e["value"].as<std::string>();
    } else if (e["valueFrom"]["fieldRef"]) {
      const std::string path = e["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>();
      auto it = fields.find(path);
      if (it == fields.end()) throw std::runtime_error(name + ": the pod has no field " + path);
      out[name] = it->second;
    } else if (e["valueFrom"]["secretKeyRef"]) {
      const auto& ref = e["valueFrom"]["secretKeyRef"];
      const YAML::Node secret = docOfKind(docs, "Secret");
      if (secret["metadata"]["name"].as<std::string>() != ref["name"].as<std::string>()) {
        throw std::runtime_error(name + ": no Secret " + ref["name"].as<std::string>() + " in the manifest");
      }
      out[name] = secret["stringData"][ref["key"].as<std::string>()].as<std::string>();
    }
  }
}

/// The container of the rendered JobSet's pod template, and its argv (command + args).
inline YAML::Node jobSetContainer(const std::vector<YAML::Node>& docs) {
  return docOfKind(docs, "JobSet")["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
                                   [0];
}

inline std::vector<std::string> containerArgv(const YAML::Node& command, const YAML::Node& args) {
  std::vector<std::string> argv;
  for (const auto& a : command) argv.push_back(a.as<std::string>());
  for (const auto& a : args) argv.push_back(a.as<std::string>());
  return argv;
}

/// Pod `index` of the rendered JobSet: the environment its container gets.
inline Env jobSetPodEnv(const std::vector<YAML::Node>& docs, int index, int restart_attempt = 0) {
  const YAML::Node js = docOfKind(docs, "JobSet");
  const std::string name = js["metadata"]["name"].as<std::string>();
  const std::string rjob = js["spec"]["replicatedJobs"][0]["name"].as<std::string>();
  Env env;
  addContainerEnv(jobSetContainer(docs)["env"], docs, jobSetPodFields(name, rjob, index, restart_attempt), env);
  env["JOB_COMPLETION_INDEX"] = std::to_string(index);  // the Job controller sets it too
  return env;
}

/// Pod `index` of the rendered TrainJob: the runtime container's env, the TrainJob's trainer.env, and what the
/// Trainer's torch plugin sets (PET_* from trainer.numNodes / numProcPerNode; master <trainjob>-node-0-0.<trainjob>).
inline Env trainJobPodEnv(const std::vector<YAML::Node>& docs, int index, int restart_attempt = 0) {
  const YAML::Node tj = docOfKind(docs, "TrainJob");
  const std::string name = tj["metadata"]["name"].as<std::string>();
  const YAML::Node runtime = docOfKind(docs, tj["spec"]["runtimeRef"]["kind"].as<std::string>());
  if (runtime["metadata"]["name"].as<std::string>() != tj["spec"]["runtimeRef"]["name"].as<std::string>()) {
    throw std::runtime_error("the TrainJob references a runtime the manifest does not hold");
  }
  const YAML::Node rjob = runtime["spec"]["template"]["spec"]["replicatedJobs"][0];
  const auto fields = jobSetPodFields(name, rjob["name"].as<std::string>(), index, restart_attempt);
  Env env;
  addContainerEnv(rjob["template"]["spec"]["template"]["spec"]["containers"][0]["env"], docs, fields, env);
  addContainerEnv(tj["spec"]["trainer"]["env"], docs, fields, env);
  env["PET_NNODES"] = tj["spec"]["trainer"]["numNodes"].as<std::string>();
  env["PET_NPROC_PER_NODE"] = tj["spec"]["trainer"]["numProcPerNode"].as<std::string>();
  env["PET_NODE_RANK"] = std::to_string(index);
  env["PET_MASTER_ADDR"] = name + "-node-0-0." + name;
  env["PET_MASTER_PORT"] = "29500";
  env["JOB_COMPLETION_INDEX"] = std::to_string(index);
  return env;
}

}  // namespace taehv::testing
