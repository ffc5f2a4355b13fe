// What every container platform's plan shares (the k8s flavours and PAI-DLC): counts read from the platform's
// variables with their provenance (through taehv/env.h, no getenv()), the master wait, and the checks a finished
// plan must pass.
#pragma once

#include <string>

#include "taehv/plugin_api.h"

namespace taehv::torch_env {

/// Default time a non-master node waits for the master's name to resolve and its port to accept, in
/// seconds. Pods of one job are scheduled independently (image pulls alone can take minutes), so this is long.
inline constexpr int kDefaultMasterWaitSeconds = 600;

/// `name` as a whole number in [min_value, max_value] (min_value >= 0) with source "env NAME"; unset when the
/// variable is unset or empty. Fails with "NAME='TEXT' is not a whole number in MIN..MAX; fix the value ...".
Checked<Sourced<int>> readCountEnv(const Env& env, const std::string& name, int min_value, int max_value);

/// The master-wait time for this node: 0 for node 0 (it is the master), else the backend option
/// --master-wait SECONDS when given, else kDefaultMasterWaitSeconds. Fails on a malformed --master-wait.
Status setMasterWait(const PlanRequest& request, NodePlan& plan);

/// The OptionSpec of --master-wait, shared by every container backend.
OptionSpec masterWaitOption();

/// Checks the common invariants of a finished plan: node_rank < nnodes, master address and port present.
/// `platform` names the platform in messages, e.g. "PAI-DLC".
Status checkPlanInvariants(const NodePlan& plan, const std::string& platform);

/// A failed plan with `message` as its error.
PlanResult failedPlan(std::string message);

/// Finishes a plan: checkPlanInvariants, then setMasterWait; a failed plan when either fails.
PlanResult finishPlan(PlanResult plan, const PlanRequest& request, const std::string& platform);

}  // namespace taehv::torch_env
