// The checks of `taehv-run doctor`: each a function from facts (gathered by the CLI, or made up by a test) to one
// row of the table: pass / warn / fail / skip, what was seen, and for every fail (and warn) the fix.
//
// Contract: a check never throws and never blocks longer than the timeout it is given. The CLI gathers the facts
// (detected backends, the resolved node, GPUs, NCCL, tuning), calls runDoctorChecks and exits non-zero when any
// row is a fail (doctorExitCode).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "taehv/plugin_api.h"
#include "taehv/sizing/gpu.h"
#include "taehv/sizing/nccl.h"
#include "taehv/sizing/network.h"
#include "taehv/sizing/tuning.h"
#include "taehv/sizing/workers.h"

namespace taehv::sizing {

enum class CheckStatus { kPass, kWarn, kFail, kSkip };

/// "pass", "warn", "fail", "skip".
std::string checkStatusName(CheckStatus status);

/// One row of the doctor's table.
struct CheckResult {
  std::string name;  ///< short, e.g. "master reachable"
  CheckStatus status = CheckStatus::kPass;
  std::string detail;  ///< what was seen
  std::string fix;     ///< what to do; set for every fail and warn
};

/// A backend plugin's answer to detect().
struct PluginFacts {
  std::string name;
  int confidence = 0;
  std::string reason;
};

/// Environment and plugin detection: which backend this environment looks like and whether the choice is clear.
/// `chosen` is the backend taehv-run chose ("local" for manual mode); `choose_error` its error (e.g. a tie).
CheckResult checkEnvironment(const std::vector<PluginFacts>& detected, const std::vector<std::string>& load_errors,
                             const std::string& chosen, const std::string& choose_error);

/// The node's descriptor as resolved (values with their sources), or the resolver's error.
struct DescriptorFacts {
  std::string error;  ///< resolveNode/validateNode's message; non-empty = fail
  Sourced<int> nnodes;      ///< MAX of an elastic --nnodes MIN:MAX
  Sourced<int> min_nnodes;  ///< MIN of an elastic --nnodes MIN:MAX; unset = a fixed size
  Sourced<int> node_rank;
  Sourced<int> nproc_per_node;
  Sourced<int> world_size;  ///< the sum over nodes when nodes differ; unset = nnodes * nproc_per_node
  Sourced<std::string> master_addr;
  Sourced<int> master_port;
  /// Non-empty: the node group chooses the master at each formation (etcd), and says so here (e.g. "chosen at
  /// formation (--rdzv-backend etcd)"); master_addr only stands in until then (its route picks the interfaces).
  std::string master_rule;
  Env env;  ///< the environment, for leftovers of an outer launcher (WORLD_SIZE, RANK)
};

/// Descriptor consistency: resolved without error, a loopback master only for one node (a master chosen at
/// formation: a loopback stand-in is a warning, it picks the loopback interface), and no stale WORLD_SIZE/RANK in
/// the environment that disagrees with the plan.
CheckResult checkDescriptor(const DescriptorFacts& facts);

/// Non-zero nodes: the master's name resolves and its port accepts within `timeout` (refused = warn: nothing
/// listens yet; no answer = fail: packets are dropped). Node 0 (the master's own node): the name resolves to an
/// address of this machine.
CheckResult checkMasterReachable(const std::string& addr, int port, bool this_node_is_master,
                                 std::chrono::milliseconds timeout);

/// Node 0 only: the master port can be bound now (nothing else holds it).
CheckResult checkMasterPortFree(int port);

/// GPUs against workers: the decision of decideNprocPerNode plus what the probe and CUDA_VISIBLE_DEVICES said.
CheckResult checkGpus(const GpuInventory& inventory, const VisibleGpus& visible, const NprocDecision& decision);

/// NCCL found and its version; required only when the workers use GPUs.
CheckResult checkNccl(const NcclProbe& probe, bool use_gpus);

/// The interface named by `variable` (NCCL_SOCKET_IFNAME or GLOO_SOCKET_IFNAME) = `value` exists and is up.
/// NCCL syntax is understood: "=eth0" exact, "eth" prefix, "^docker" exclusion (not checked), comma lists.
CheckResult checkInterface(const std::string& variable, const std::string& value,
                           const std::function<InterfaceState(const std::string&)>& lookup = interfaceState,
                           const std::function<std::vector<std::string>()>& all_names = interfaceNames);

/// The output directory exists and a file can be created in it, or can be created (nearest existing parent is
/// a writable directory). Empty = skip.
CheckResult checkOutputDir(const std::string& dir);

/// The training data exists on this node ("synthetic" and empty = the built-in source: pass).
CheckResult checkDataPath(const std::string& source);

/// Everything runDoctorChecks needs.
struct DoctorInputs {
  std::vector<PluginFacts> detected;
  std::vector<std::string> plugin_load_errors;
  std::string backend;        ///< chosen backend, "local" for manual mode
  std::string backend_error;  ///< why no backend could be chosen
  DescriptorFacts descriptor;
  GpuInventory inventory;
  VisibleGpus visible;
  NprocDecision nproc;
  NcclProbe nccl;
  Tuning tuning;           ///< NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME are checked from here
  std::string output_dir;  ///< "" = not checked
  std::string data_path;   ///< "" = synthetic
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(3)};
};

/// All checks in table order. Master checks are skipped when the descriptor did not resolve.
std::vector<CheckResult> runDoctorChecks(const DoctorInputs& in);

/// The table as text: one row per check, then "fix:" lines under each fail/warn, then a summary line.
std::string renderDoctorTable(const std::vector<CheckResult>& results);

/// 1 when any check failed, else 0.
int doctorExitCode(const std::vector<CheckResult>& results);

}  // namespace taehv::sizing
