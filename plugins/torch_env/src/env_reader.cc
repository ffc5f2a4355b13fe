#include "taehv/torch_env/env_reader.h"

namespace taehv::torch_env {

std::optional<std::string> envValue(const Env& env, const std::string& name) {
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

std::string readIntEnv(const Env& env, const std::string& name, int min_value, int max_value, Sourced<int>& out) {
  auto text = envValue(env, name);
  if (!text) return "";
  auto value = parseCount(*text);
  if (!value || *value < min_value || *value > max_value) {
    return name + "=" + *text + " is not a whole number in " + std::to_string(min_value) + ".." +
           std::to_string(max_value) + "; fix the value the platform or the job spec sets";
  }
  out.set(*value, "env " + name);
  return "";
}

std::string readPortEnv(const Env& env, const std::string& name, Sourced<int>& out) {
  return readIntEnv(env, name, 1, 65535, out);
}

std::string setMasterWait(const PlanRequest& request, NodePlan& plan) {
  if (plan.node_rank.has() && *plan.node_rank.value == 0) {
    plan.master_wait_seconds.set(0, "rule: node 0 is the master");
    return "";
  }
  auto it = request.options.find("master-wait");
  if (it != request.options.end() && !it->second.empty()) {
    const std::string& text = it->second.back();
    auto value = parseCount(text);
    if (!value) return "--master-wait " + text + " is not a whole number of seconds (e.g. --master-wait 300)";
    plan.master_wait_seconds.set(*value, "flag --master-wait");
    return "";
  }
  plan.master_wait_seconds.set(kDefaultMasterWaitSeconds, "default: pods start in any order, wait for the master");
  return "";
}

OptionSpec masterWaitOption() {
  return {"master-wait", "SECONDS",
          "how long a non-master node waits for the master's name to resolve and its port to accept "
          "(default " +
              std::to_string(kDefaultMasterWaitSeconds) + "; 0 = do not wait)",
          false};
}

std::string checkPlanInvariants(const NodePlan& plan, const std::string& platform) {
  if (plan.nnodes.has() && plan.node_rank.has() && *plan.node_rank.value >= *plan.nnodes.value) {
    return platform + ": node rank " + std::to_string(*plan.node_rank.value) + " (" + plan.node_rank.source +
           ") is not below the node count " + std::to_string(*plan.nnodes.value) + " (" + plan.nnodes.source +
           "); the job spec and the pod's environment disagree";
  }
  if (!plan.master_addr.has()) {
    return platform +
           ": no master address in the environment; the platform must set it (see `taehv-run "
           "describe` for what was read)";
  }
  if (!plan.master_port.has()) {
    return platform + ": no master port in the environment (master " + *plan.master_addr.value + " from " +
           plan.master_addr.source + "); the platform must set it";
  }
  return "";
}

PlanResult failedPlan(std::string message) {
  PlanResult r;
  r.error = std::move(message);
  return r;
}

PlanResult finishPlan(PlanResult plan, const PlanRequest& request, const std::string& platform) {
  if (auto e = checkPlanInvariants(plan.value, platform); !e.empty()) return failedPlan(e);
  if (auto e = setMasterWait(request, plan.value); !e.empty()) return failedPlan(e);
  return plan;
}

}  // namespace taehv::torch_env
