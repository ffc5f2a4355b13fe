// Whether and how this node takes part in the node group (core/group/PROTOCOL.md): on for every node of a
// multi-node job that runs its own workers; its port, --node-timeout and job token, with where each came from.
// One place decides this for launch, describe and doctor.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "taehv/descriptor.h"
#include "taehv/group/etcd_client.h"
#include "taehv/group/job_token.h"
#include "taehv/group/node_group.h"

namespace boost::program_options {
class variables_map;
}

namespace taehv {

/// The variable that overrides the group port (below --group-port).
inline constexpr const char* kGroupPortEnv = "TAEHV_GROUP_PORT";
/// torchrun's variables for --rdzv-backend and --rdzv-endpoint (below the flags).
inline constexpr const char* kRdzvBackendEnv = "PET_RDZV_BACKEND";
inline constexpr const char* kRdzvEndpointEnv = "PET_RDZV_ENDPOINT";

/// The group flags as typed.
struct GroupFlags {
  std::optional<int> port;             ///< --group-port
  std::optional<double> node_timeout;  ///< --node-timeout, seconds
  std::string token_file;              ///< --job-token-file
  bool disabled = false;               ///< --no-node-group
  std::optional<std::string> rdzv_backend;   ///< --rdzv-backend
  std::optional<std::string> rdzv_endpoint;  ///< --rdzv-endpoint
  std::optional<std::string> node_local_checkpoints;  ///< --node-local-checkpoints
};

/// The group flags in `vm`.
GroupFlags groupFlags(const boost::program_options::variables_map& vm);

struct GroupPlan {
  bool enabled = false;
  std::string why_off;  ///< when not enabled: why (one node, one worker per task, --no-node-group)
  std::string leader_addr;
  Sourced<int> port;
  std::chrono::milliseconds node_timeout{group::kDefaultNodeTimeout};
  std::string node_timeout_source;
  group::JobToken token;
  /// --rdzv-backend etcd: the cluster that holds the group (core/group/PROTOCOL.md, "The etcd group"); empty for
  /// the TCP group led by node 0.
  std::vector<group::EtcdEndpoint> etcd_endpoints;
  std::string etcd_source;  ///< where the endpoints came from (flag or env)
  /// --node-local-checkpoints (etcd only): this node's own checkpoint folder; each formation agrees on the newest
  /// step every node holds and hands it to the workers as TAEHV_RESUME_STEP. "": checkpoints on shared storage.
  std::string node_local_checkpoints;
  /// The TCP group numbers the nodes in order of arrival (--rdzv-backend c10d and no node rank given): the node
  /// descriptor's node_rank (0, the default) is a placeholder until the group forms.
  bool rank_by_arrival = false;

  /// "ADDR:PORT".
  std::string address() const { return leader_addr + ":" + std::to_string(port.value.value_or(0)); }
};

/// With --rdzv-backend etcd (else env PET_RDZV_BACKEND etcd) each formation chooses the master: the rule and the
/// stand-in address resolveNode records for master_addr (LaunchFlags::formation_master). nullopt: the TCP group,
/// whose master is master_addr. A malformed endpoint list leaves no stand-in; planGroup reports it.
std::optional<FormationMaster> formationMaster(const GroupFlags& flags, const Env& env);

/// The group for `node`. An error (bad port, timeout out of range, unreadable or short token) is one line naming the
/// value, where it came from and how to fix it.
Checked<GroupPlan> planGroup(const NodeDescriptor& node, const GroupFlags& flags, const Env& env);

/// The master's address (MASTER_ADDR) as far as it is known before the group forms: master_addr with the TCP group;
/// "chosen at formation" with etcd, where each formation picks it (groupMasterRule says how).
std::string groupMaster(const GroupPlan& plan);
/// How the master is chosen, one sentence.
std::string groupMasterRule(const GroupPlan& plan);

/// The lines `describe` prints for the group.
std::string describeGroup(const GroupPlan& plan);

}  // namespace taehv
