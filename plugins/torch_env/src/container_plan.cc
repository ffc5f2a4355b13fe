#include "taehv/torch_env/container_plan.h"

#include <string_view>

#include "taehv/env.h"
#include "taehv/parse.h"

namespace taehv::torch_env {

Checked<Sourced<int>> readCountEnv(const Env& env, const std::string& name, int min_value, int max_value) {
  return readSourcedEnv(
      env, name, [=](std::string_view text) { return parseCount<int>(text, min_value, max_value); },
      "a whole number in " + std::to_string(min_value) + ".." + std::to_string(max_value) +
          "; fix the value the platform or the job spec sets");
}

Status setMasterWait(const PlanRequest& request, NodePlan& plan) {
  if (plan.node_rank.has() && *plan.node_rank.value == 0) {
    plan.master_wait_seconds.set(0, "rule: node 0 is the master");
    return {};
  }
  auto it = request.options.find("master-wait");
  if (it != request.options.end() && !it->second.empty()) {
    const std::string& text = it->second.back();
    auto value = parseCount(text);
    if (!value) return {"--master-wait " + text + " is not a whole number of seconds (e.g. --master-wait 300)"};
    plan.master_wait_seconds.set(*value, "flag --master-wait");
    return {};
  }
  plan.master_wait_seconds.set(kDefaultMasterWaitSeconds, "default: pods start in any order, wait for the master");
  return {};
}

OptionSpec masterWaitOption() {
  return {"master-wait", "SECONDS",
          "how long a non-master node waits for the master's name to resolve and its port to accept "
          "(default " +
              std::to_string(kDefaultMasterWaitSeconds) + "; 0 = do not wait)",
          false};
}

Status checkPlanInvariants(const NodePlan& plan, const std::string& platform) {
  if (plan.nnodes.has() && plan.node_rank.has() && *plan.node_rank.value >= *plan.nnodes.value) {
    return {platform + ": node rank " + std::to_string(*plan.node_rank.value) + " (" + plan.node_rank.source +
            ") is not below the node count " + std::to_string(*plan.nnodes.value) + " (" + plan.nnodes.source +
            "); the job spec and the pod's environment disagree"};
  }
  if (!plan.master_addr.has()) {
    return {platform +
            ": no master address in the environment; the platform must set it (see `taehv-run "
            "describe` for what was read)"};
  }
  if (!plan.master_port.has()) {
    return {platform + ": no master port in the environment (master " + *plan.master_addr.value + " from " +
            plan.master_addr.source + "); the platform must set it"};
  }
  return {};
}

PlanResult failedPlan(std::string message) { return {std::move(message)}; }

PlanResult finishPlan(PlanResult plan, const PlanRequest& request, const std::string& platform) {
  if (Status s = checkPlanInvariants(plan.value, platform); !s.ok()) return failedPlan(s.error);
  if (Status s = setMasterWait(request, plan.value); !s.ok()) return failedPlan(s.error);
  return plan;
}

}  // namespace taehv::torch_env
