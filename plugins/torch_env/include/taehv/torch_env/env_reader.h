// Reading a platform's environment snapshot: typed values with the variable they came from, and the checks
// shared by every container platform (the k8s flavours and PAI-DLC). No getenv(): everything reads taehv::Env.
#pragma once

#include <optional>
#include <string>

#include "taehv/parse.h"
#include "taehv/plugin_api.h"

namespace taehv::torch_env {

/// Default time a non-master node waits for the master's name to resolve and its port to accept, in
/// seconds. Pods of one job are scheduled independently (image pulls alone can take minutes), so this is long.
inline constexpr int kDefaultMasterWaitSeconds = 600;

/// The value of `name` in `env`, or nullopt when it is unset or empty (platforms export empty variables).
std::optional<std::string> envValue(const Env& env, const std::string& name);

/// Reads `name` as an integer in [min_value, max_value] into `out` (with source "env NAME").
/// Returns "" when the variable is unset (out untouched) or valid; otherwise one line saying what is wrong.
std::string readIntEnv(const Env& env, const std::string& name, int min_value, int max_value, Sourced<int>& out);

/// Reads `name` as a TCP port (1..65535). Same contract as readIntEnv.
std::string readPortEnv(const Env& env, const std::string& name, Sourced<int>& out);

/// The master-wait time for this node: 0 for node 0 (it is the master), else the backend option
/// --master-wait SECONDS when given, else kDefaultMasterWaitSeconds. Returns "" or an error line.
std::string setMasterWait(const PlanRequest& request, NodePlan& plan);

/// The OptionSpec of --master-wait, shared by every container backend.
OptionSpec masterWaitOption();

/// Checks the common invariants of a finished plan: node_rank < nnodes, master address and port present.
/// `platform` names the platform in messages, e.g. "PAI-DLC". Returns "" or one error line.
std::string checkPlanInvariants(const NodePlan& plan, const std::string& platform);

/// A failed plan with `message` as its error.
PlanResult failedPlan(std::string message);

/// Finishes a plan: checkPlanInvariants, then setMasterWait; a failed plan when either fails.
PlanResult finishPlan(PlanResult plan, const PlanRequest& request, const std::string& platform);

}  // namespace taehv::torch_env
