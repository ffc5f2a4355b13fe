// Rank descriptors: from the launch options the user gave, a backend's NodePlan and torchrun's PET_* variables
// to one resolved node descriptor, then to one descriptor per worker. Every field records where it came from.
//
// Precedence for each node field: explicit flag > backend plan > torchrun's PET_* variable > default.
// Expansion: ranks are contiguous per node in node order: rank = rank_offset + local_rank, where node k's
// rank_offset is the sum of the process counts of nodes 0..k-1, and world_size is the sum over all nodes (always
// processes, never nodes). Nodes may run different counts: the counts come from the plan when the platform knows
// them all (SLURM's tasks per node), else from the node group at start (each node's JOIN carries its count), else
// every node is taken to run nproc_per_node (rank = node_rank * nproc_per_node + local_rank).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "taehv/parse.h"
#include "taehv/plugin_api.h"

namespace taehv {

/// torchrun's default run id (static rendezvous).
inline constexpr const char* kDefaultRunId = "none";
/// Address used by --standalone and by a single-node job with no master given.
inline constexpr const char* kLoopbackAddr = "127.0.0.1";

/// Limits on counts (docs/launching.md, "Limits"). They keep every rank, world size and restart count far inside an int, so
/// no product or sum of them can overflow, and they stop a mistyped count before it forks thousands of processes.
/// Beyond what any job we know of uses; raise them here (and in docs/launching.md) when one does.
inline constexpr int kMaxNodes = 65536;          ///< --nnodes, PET_NNODES, a backend's node count
inline constexpr int kMaxNprocPerNode = 1024;    ///< workers on one node, whatever --oversubscribe says
inline constexpr int kMaxWorldSize = 1 << 20;    ///< processes over all nodes (1,048,576)
inline constexpr int kMaxRestarts = 1000000;     ///< --max-restarts and restarts already made (--restart-count)

/// The master chosen at each formation of the node group (--rdzv-backend etcd: its first node), not given.
struct FormationMaster {
  std::string rule;      ///< what master_addr's source says, e.g. "chosen at formation (--rdzv-backend etcd)"
  std::string stand_in;  ///< MASTER_ADDR until the group forms: the first etcd endpoint's host ("": none known)
};

/// The launch options as the user typed them (flags only; unset = not given). Values are not validated here.
/// JobFlags (taehv/plugin_api.h) holds those a backend that takes over the launch gets too (--nnodes, --node-rank,
/// --master-addr/-port, --max-restarts, --restart-count: an outer launcher restarts the whole job itself, ...).
struct LaunchFlags : JobFlags {
  std::optional<int> nproc_per_node;
  std::optional<std::string> run_id;
  /// Set when the node group chooses the master at each formation (--rdzv-backend etcd; group_plan.h's
  /// formationMaster reads it from the group options).
  std::optional<FormationMaster> formation_master;
};

/// Where this node's ranks sit in the job, as the node group agreed (PROTOCOL.md, "Formation").
struct RankLayout {
  int first_rank = 0;  ///< the sum of the process counts of the nodes before this one
  int world_size = 0;  ///< the sum over all nodes
  std::string source;  ///< e.g. "node group: node 0's FORMED (counts 2,1)"
};

/// One node's resolved plan: the backend's NodePlan with every gap filled, plus what the host adds.
struct NodeDescriptor {
  std::string backend;  ///< "local" or the plugin's name
  std::string host;     ///< this machine's host name (for summaries)
  /// Nodes in the job: the fixed count, or MAX of an elastic `--nnodes MIN:MAX` until the node group formed (then
  /// the nodes it formed with).
  Sourced<int> nnodes;
  /// MIN of `--nnodes MIN:MAX` (= nnodes for a fixed-size job): fewer nodes alive and the job cannot (re-)form.
  Sourced<int> min_nnodes;
  Sourced<int> node_rank;
  Sourced<int> nproc_per_node;
  Sourced<std::string> master_addr;
  Sourced<int> master_port;
  Sourced<std::string> run_id;
  Sourced<int> restart_count;  ///< restarts done before this taehv-run started (platform restarts)
  Sourced<int> max_restarts;
  /// --restart-count given: an outer launcher (the SSH fan-out) restarts the whole job, so this taehv-run
  /// never restarts its workers itself; max_restarts is only reported to them (TORCHELASTIC_MAX_RESTARTS).
  bool restarts_by_outer_launcher = false;
  Sourced<int> gpus_on_node;   ///< unset when nobody said
  Sourced<std::string> gpu_indices;  ///< NodePlan::gpu_indices: the scheduler's GPUs for this node, if it says
  Sourced<int> cpu_cores;      ///< CPUs this process may run on (sched_getaffinity)
  Sourced<bool> single_worker;
  Sourced<int> rank;        ///< single_worker only
  Sourced<int> local_rank;  ///< single_worker only
  Sourced<int> master_wait_seconds;
  std::map<std::string, Sourced<std::string>> extra_env;
  /// The workers' ROLE_NAME: torchrun's --role, "default" unless given.
  std::string role = "default";
  /// Extra variables of one worker, by local rank (sizing: the device it owns), applied after extra_env.
  std::map<int, std::map<std::string, Sourced<std::string>>> local_env;
  std::vector<std::string> notes;
  /// Set when the node group chooses the master at each formation (etcd): master_addr only stands in for it until
  /// then (its route picks the socket interfaces); the launch sets it to the formation's master.
  std::optional<FormationMaster> formation_master;
  /// The trainer config chosen by --config: a file as given, or a folder's profile with the overrides that fit it
  /// to the job's shape. Workers get it as TAEHV_CONFIG / TAEHV_CONFIG_SET, taehv-train as --config / --set.
  struct TrainerProfile {
    std::string config;             ///< "" = no --config
    std::vector<std::string> sets;  ///< "key=value" overrides
    std::string reason;             ///< why this profile ("" for a file given as it is)
  } profile;
  /// Every node's process count in node order, when the plan knew them all (NodePlan::node_nprocs); else unset.
  Sourced<std::vector<int>> node_nprocs;
  /// The ranks the node group agreed on at start (per-node modes); unset before it formed.
  std::optional<RankLayout> agreed;

  /// This node's first global rank, with where it came from: the group's answer, the plan's counts, or
  /// node_rank * nproc_per_node when nothing says the nodes differ.
  Sourced<int> rankOffset() const;
  /// Processes in the job (the sum over nodes), with where it came from (as rankOffset()).
  Sourced<int> worldSizeSourced() const;
  int worldSize() const { return *worldSizeSourced().value; }
  /// The local ranks this taehv-run starts: its own one in single-worker mode, else 0 .. nproc_per_node-1.
  std::vector<int> localRanks() const;
  /// True when every node's count is known here (from the plan or the node group), not assumed equal to ours.
  bool countsKnown() const { return node_nprocs.has() || agreed.has_value(); }
  /// `--nnodes MIN:MAX` with MIN < MAX: the node group forms with MIN..MAX nodes and re-forms after a loss.
  bool elastic() const { return min_nnodes.has() && *min_nnodes.value < *nnodes.value; }
  /// "2" or "1:2" (MIN:MAX), as --nnodes takes it.
  std::string nnodesText() const;
};

/// One worker's descriptor. `env` is filled by buildWorkerEnvironment().
struct WorkerDescriptor {
  Sourced<int> rank;
  Sourced<int> local_rank;
  Sourced<int> world_size;
  Sourced<int> local_world_size;
  Sourced<int> node_rank;
  Sourced<int> nnodes;
  Sourced<std::string> master_addr;
  Sourced<int> master_port;
  Sourced<std::string> run_id;
  Sourced<int> restart_count;
  Sourced<int> device;  ///< the accelerator this worker owns (= local_rank when the node has GPUs); unset = none
  /// The variables taehv-run sets for this worker on top of the inherited environment, with provenance.
  std::map<std::string, Sourced<std::string>> env;
};

/// Reads torchrun's `--nnodes` text ("N", "N:N" or "MIN:MAX"; kMaxNodes is checked with the node) into `flags`
/// (nnodes = MAX, min_nnodes = MIN). `where` names it in the message ("--nnodes", "env PET_NNODES"). Fails with
/// one line saying what is wrong and how to write it.
Status parseNnodes(const std::string& text, const std::string& where, LaunchFlags& flags);

/// Resolves a node from flags, an optional backend plan (nullptr in local mode) and the environment `env`
/// (read for PET_* variables only). `host` and `cpu_cores` are facts of this machine, passed in so tests can fix
/// them. `free_port` is called only for --standalone without --master-port. Validates the result.
Checked<NodeDescriptor> resolveNode(const LaunchFlags& flags, const NodePlan* plan, const std::string& backend,
                                    const Env& env, const std::string& host, int cpu_cores,
                                    const std::function<int()>& free_port);

/// Checks a resolved node: node count 1..kMaxNodes, node rank in range, 1..kMaxNprocPerNode processes, every
/// node's count (when known) in range and this node's among them, world size at most kMaxWorldSize, non-empty master, port in 1..65535, restarts 0..kMaxRestarts, single-worker rank and
/// local rank in range. Fails with one line naming the field, its value,
/// where the value came from and how to fix it.
Status validateNode(const NodeDescriptor& node);

/// The workers this node starts (one when single_worker), in local-rank order, with `restart` restarts done by
/// this taehv-run (added to the node's restart_count). Environments are built with buildWorkerEnvironment().
std::vector<WorkerDescriptor> expandWorkers(const NodeDescriptor& node, const Env& inherited, int restart = 0);

/// Takes the node group's answer (this node's first rank and the world size) into `node`. Fails with one line
/// saying why it cannot be right (out of range, or contradicting the counts the plan gave).
Status applyAgreedLayout(NodeDescriptor& node, const RankLayout& layout);

}  // namespace taehv
