#include "taehv/descriptor.h"

#include <random>
#include <sstream>
#include <string_view>
#include <utility>

#include "taehv/env.h"
#include "taehv/utf8.h"
#include "taehv/worker_env.h"

namespace taehv {
namespace {

/// PET_<name> as an int (torchrun's flags as environment variables); an empty value is text, and refused.
Checked<std::optional<int>> petInt(const Env& env, const std::string& name) {
  auto read = readEnv(env, "PET_" + name, [](std::string_view text) { return parseInt(text); },
                      "a whole number; fix or unset it", EmptyEnv::kText);
  if (!read.ok()) read.error = "env " + read.error;
  return read;
}

/// torchrun's PET_* variables as the flags they stand for, read whole before anything is picked: a malformed one
/// is an error even where a flag or the plan wins.
Checked<LaunchFlags> readPetVariables(const Env& env) {
  Checked<LaunchFlags> out;
  LaunchFlags& pet = out.value;
  if (const std::string* nnodes = findEnv(env, "PET_NNODES")) {
    if (Status s = parseNnodes(*nnodes, "env PET_NNODES", pet); !s.ok()) return {s.error};
  }
  for (auto [name, field] : {std::pair{"NODE_RANK", &pet.node_rank}, std::pair{"NPROC_PER_NODE", &pet.nproc_per_node},
                             std::pair{"MASTER_PORT", &pet.master_port},
                             std::pair{"MAX_RESTARTS", &pet.max_restarts}}) {
    Checked<std::optional<int>> value = petInt(env, name);
    if (!value.ok()) return {value.error};
    *field = value.value;
  }
  pet.master_addr = envValue(env, "PET_MASTER_ADDR");
  pet.run_id = envValue(env, "PET_RDZV_ID");
  return out;
}

/// The user's flags, and the name each is reported under ("flag --" + name): --standalone fills the ones not given.
struct NamedFlags {
  LaunchFlags flags;
  std::string nnodes = "nnodes", node_rank = "node-rank", master_addr = "master-addr", master_port = "master-port",
              run_id = "run-id";
};

std::string randomRunId() {
  std::random_device rd;
  std::ostringstream out;
  out << std::hex;
  for (int i = 0; i < 4; ++i) out << rd();
  return out.str().substr(0, 16);
}

/// torchrun --standalone: one node, master on this machine, a free port, a fresh run id (what the flags leave open).
Checked<NamedFlags> withStandalone(const LaunchFlags& given, const std::function<int()>& free_port) {
  Checked<NamedFlags> out{"", {given}};
  NamedFlags& f = out.value;
  LaunchFlags& flags = f.flags;
  if (!flags.standalone) return out;
  if (flags.nnodes && (*flags.nnodes != 1 || flags.min_nnodes.value_or(1) != 1)) {
    return {"--standalone runs one node, but --nnodes " +
            (flags.min_nnodes && *flags.min_nnodes != *flags.nnodes ? std::to_string(*flags.min_nnodes) + ":" : "") +
            std::to_string(*flags.nnodes) + " was given; drop one of them"};
  }
  if (flags.node_rank && *flags.node_rank != 0) {
    return {"--standalone runs node 0 only, but --node-rank " + std::to_string(*flags.node_rank) +
            " was given; drop one of them"};
  }
  if (!flags.nnodes) flags.nnodes = 1, f.nnodes = "standalone";
  if (!flags.node_rank) flags.node_rank = 0, f.node_rank = "standalone";
  if (!flags.master_addr) flags.master_addr = kLoopbackAddr, f.master_addr = "standalone";
  if (!flags.run_id) flags.run_id = randomRunId(), f.run_id = "standalone (random)";
  if (!flags.master_port) {
    const int port = free_port ? free_port() : 0;
    if (port <= 0) return {"--standalone could not find a free TCP port on 127.0.0.1; pass --master-port"};
    flags.master_port = port, f.master_port = "standalone (free port)";
  }
  return out;
}

/// Fills `out` by precedence: flag > backend plan > PET_* > default.
template <typename T>
void pick(Sourced<T>& out, const std::optional<T>& flag, const std::string& flag_name, const Sourced<T>* planned,
          const std::optional<T>& pet, const std::string& pet_name, const std::optional<T>& fallback) {
  if (flag) {
    out.set(*flag, "flag --" + flag_name, Origin::kFlag);
  } else if (planned && planned->has()) {
    out = *planned;
    out.origin = Origin::kBackend;
    if (out.source.empty()) out.source = "backend plan";
  } else if (pet) {
    out.set(*pet, "env PET_" + pet_name, Origin::kPetEnv);
  } else if (fallback) {
    out.set(*fallback, "default", Origin::kDefault);
  }
}

/// Every field the flags, the plan (nullptr: none) and PET_* can give, each by precedence.
void pickFields(NodeDescriptor& node, const NamedFlags& named, const NodePlan* plan, const LaunchFlags& pet) {
  const LaunchFlags& f = named.flags;
  pick<int>(node.nnodes, f.nnodes, named.nnodes, plan ? &plan->nnodes : nullptr, pet.nnodes, "NNODES", 1);
  // MIN comes with the count it was given with: a flag's or PET_NNODES' range; a backend's count is fixed.
  node.min_nnodes = node.nnodes;
  if (node.nnodes.origin == Origin::kFlag && f.min_nnodes) node.min_nnodes.value = *f.min_nnodes;
  if (node.nnodes.origin == Origin::kPetEnv && pet.min_nnodes) node.min_nnodes.value = *pet.min_nnodes;
  pick<int>(node.node_rank, f.node_rank, named.node_rank, plan ? &plan->node_rank : nullptr, pet.node_rank,
            "NODE_RANK", 0);
  pick<int>(node.nproc_per_node, f.nproc_per_node, "nproc-per-node", plan ? &plan->nproc_per_node : nullptr,
            pet.nproc_per_node, "NPROC_PER_NODE", 1);
  pick<std::string>(node.master_addr, f.master_addr, named.master_addr, plan ? &plan->master_addr : nullptr,
                    pet.master_addr, "MASTER_ADDR", std::string(kLoopbackAddr));
  pick<int>(node.master_port, f.master_port, named.master_port, plan ? &plan->master_port : nullptr,
            pet.master_port, "MASTER_PORT", kDefaultMasterPort);
  pick<std::string>(node.run_id, f.run_id, named.run_id, plan ? &plan->run_id : nullptr, pet.run_id, "RDZV_ID",
                    std::string(kDefaultRunId));
  pick<int>(node.max_restarts, f.max_restarts, "max-restarts", nullptr, pet.max_restarts, "MAX_RESTARTS", 0);
  pick<int>(node.restart_count, f.restart_count, "restart-count", plan ? &plan->restart_count : nullptr, std::nullopt,
            "", 0);
  node.restarts_by_outer_launcher = f.restart_count.has_value();
  pick<int>(node.master_wait_seconds, std::nullopt, "", plan ? &plan->master_wait_seconds : nullptr, std::nullopt,
            "", 0);
  pick<bool>(node.single_worker, std::nullopt, "", plan ? &plan->single_worker : nullptr, std::nullopt, "", false);
}

/// Elastic re-formation is the per-node launchers' own (through the node group): a backend or an outer launcher
/// that fixes the node count and restarts the job itself leaves it nothing to decide. A backend's nodes that form
/// in etcd (`in_etcd`: the formation, not the backend, says who is in) may still re-form among themselves.
Status checkElasticOwner(const NodeDescriptor& node, const NodePlan* plan, const std::string& backend, bool in_etcd) {
  if (!node.elastic() || (!plan && !node.restarts_by_outer_launcher)) return {};
  if (plan && in_etcd && !node.restarts_by_outer_launcher) return {};
  return {"--nnodes " + node.nnodesText() + " (elastic, from " + node.nnodes.source + ") needs each node's " +
          "own taehv-run in manual mode (--nnodes/--node-rank/--master-addr, node group on), but " +
          (plan ? "backend '" + backend + "' fixes the node count"
                : std::string("--restart-count says an outer launcher restarts the job")) +
          "; give a fixed count (e.g. --nnodes " + std::to_string(*node.nnodes.value) + ")"};
}

/// What only the plan knows: every node's count, the GPUs, a single worker's ranks, extra variables and notes.
void takePlanFacts(NodeDescriptor& node, const NodePlan& plan) {
  if (plan.node_nprocs.has()) {
    node.node_nprocs = plan.node_nprocs;
    node.node_nprocs.origin = Origin::kBackend;
  }
  if (plan.gpus_on_node.has()) node.gpus_on_node = plan.gpus_on_node;
  if (plan.gpu_indices.has()) {
    node.gpu_indices = plan.gpu_indices;
    node.gpu_indices.origin = Origin::kBackend;
  }
  if (plan.rank.has()) node.rank = plan.rank;
  if (plan.local_rank.has()) node.local_rank = plan.local_rank;
  node.extra_env = plan.extra_env;
  node.notes = plan.notes;
}

/// One process = one worker (e.g. one SLURM task or one MPI rank per GPU): the rank comes from the platform, or
/// from the rules when the plan leaves it to them.
Status applySingleWorkerRule(NodeDescriptor& node, const std::string& backend) {
  if (!*node.single_worker.value) return {};
  if (!node.local_rank.has() && *node.nproc_per_node.value == 1) {
    node.local_rank.set(0, "rule: one worker per node", Origin::kRule);
  }
  if (!node.rank.has() && node.local_rank.has() && node.node_rank.has()) {
    const Sourced<int> offset = node.rankOffset();
    node.rank.set(*offset.value + *node.local_rank.value,
                  "rule: rank_offset+local_rank (rank_offset: " + offset.source + ")", Origin::kRule);
  }
  if (!node.rank.has() || !node.local_rank.has()) {
    return {"backend '" + backend +
            "' asked for single-worker mode but gave no rank/local rank; this is a bug in the plugin"};
  }
  return {};
}

template <typename T>
std::string describeValue(const Sourced<T>& v) {
  std::ostringstream out;
  if (v.has()) out << *v.value;
  out << " (from " << v.source << ")";
  return out.str();
}

/// The master. Chosen at each formation (etcd group): master_addr stands in until then, as the first etcd endpoint's
/// host when none was given (its route picks the socket interfaces), and says so; a given one is kept, with a note
/// of what it is still for. Fixed (the TCP group): where the default loopback master cannot be right, say so rather
/// than let workers hang.
Status applyMasterRule(NodeDescriptor& node, const std::optional<FormationMaster>& formation) {
  const bool group_on = *node.nnodes.value > 1 && !*node.single_worker.value;
  if (formation && group_on) {
    node.formation_master = formation;
    if (node.master_addr.origin == Origin::kDefault) {
      const std::string stand_in = formation->stand_in.empty() ? *node.master_addr.value : formation->stand_in;
      node.master_addr.set(stand_in, formation->rule + "; until then " +
                                         (formation->stand_in.empty() ? std::string("the default")
                                                                      : "the first etcd endpoint's host"),
                           Origin::kRule);
    } else {
      node.notes.push_back("master_addr " + *node.master_addr.value + " (from " + node.master_addr.source +
                           ") is not the workers' master: it is " + formation->rule +
                           "; until then it only picks the socket interfaces by its route");
    }
    return {};
  }
  if (*node.nnodes.value < 2 || node.master_addr.origin != Origin::kDefault) return {};
  return {"nnodes is " + describeValue(node.nnodes) +
          " but no master address was given; pass --master-addr HOST (node 0's address) or set PET_MASTER_ADDR"};
}

/// The plan's per-node counts: one per node, each 1..kMaxNprocPerNode, this node's equal to nproc_per_node, the sum
/// at most kMaxWorldSize (in 64 bits).
Status validateNodeCounts(const NodeDescriptor& node) {
  const std::vector<int>& counts = *node.node_nprocs.value;
  const std::string where = formatCounts(counts) + " (from " + node.node_nprocs.source + ")";
  if (static_cast<long long>(counts.size()) != *node.nnodes.value)
    return {"per-node process counts " + where + " list " + std::to_string(counts.size()) +
            " node(s) but nnodes is " + describeValue(node.nnodes) + "; give one count per node"};
  long long world = 0;
  for (std::size_t k = 0; k < counts.size(); ++k) {
    if (counts[k] < 1 || counts[k] > kMaxNprocPerNode)
      return {"per-node process counts " + where + ": node " + std::to_string(k) + " has " +
              std::to_string(counts[k]) + "; every node runs 1.." + std::to_string(kMaxNprocPerNode) + " processes"};
    world += counts[k];
  }
  if (world > kMaxWorldSize)
    return {"world size " + std::to_string(world) + " (the sum of " + where + ") is more than the " +
            std::to_string(kMaxWorldSize) + " processes taehv-run starts (limits: docs/launching.md)"};
  const int here = counts[static_cast<std::size_t>(*node.node_rank.value)];
  if (here != *node.nproc_per_node.value)
    return {"processes per node " + describeValue(node.nproc_per_node) + " contradicts the per-node counts " + where +
            ", which give node " + std::to_string(*node.node_rank.value) + " " + std::to_string(here) +
            "; drop --nproc-per-node or make them agree"};
  return {};
}

/// The counts every rank and size is computed from: each in range, their product (the world size) too, computed
/// in 64 bits. Checked before any product is taken.
Status validateCounts(const NodeDescriptor& node) {
  const int nnodes = *node.nnodes.value;
  const int node_rank = *node.node_rank.value;
  const int nproc = *node.nproc_per_node.value;
  if (nnodes < 1) return {"node count must be at least 1, got " + describeValue(node.nnodes) + "; fix --nnodes"};
  if (nnodes > kMaxNodes)
    return {"node count must be at most " + std::to_string(kMaxNodes) + ", got " + describeValue(node.nnodes) +
            "; fix --nnodes (limits: docs/launching.md)"};
  if (nproc < 1)
    return {"processes per node must be at least 1, got " + describeValue(node.nproc_per_node) +
            "; fix --nproc-per-node"};
  if (nproc > kMaxNprocPerNode)
    return {"processes per node must be at most " + std::to_string(kMaxNprocPerNode) + ", got " +
            describeValue(node.nproc_per_node) + "; fix --nproc-per-node (limits: docs/launching.md)"};
  if (node.min_nnodes.has() && (*node.min_nnodes.value < 1 || *node.min_nnodes.value > nnodes))
    return {"--nnodes " + node.nnodesText() + " (from " + node.nnodes.source + "): MIN must be in 1..MAX"};
  if (node_rank < 0 || node_rank >= nnodes)
    return {"node rank must be in 0.." + std::to_string(nnodes - 1) + " (nnodes " + node.nnodesText() +
            "), got " + describeValue(node.node_rank) + "; fix --node-rank or --nnodes"};
  if (node.node_nprocs.has()) {
    if (Status s = validateNodeCounts(node); !s.ok()) return s;
  } else {
    const long long world = static_cast<long long>(nnodes) * nproc;
    if (world > kMaxWorldSize)
      return {"world size nnodes*nproc_per_node = " + std::to_string(nnodes) + "*" + std::to_string(nproc) + " = " +
              std::to_string(world) + " is more than the " + std::to_string(kMaxWorldSize) +
              " processes taehv-run starts; fix --nnodes or --nproc-per-node (limits: docs/launching.md)"};
  }
  if (*node.max_restarts.value < 0 || *node.max_restarts.value > kMaxRestarts)
    return {"max restarts must be in 0.." + std::to_string(kMaxRestarts) + ", got " +
            describeValue(node.max_restarts) + "; fix --max-restarts"};
  if (*node.restart_count.value < 0 || *node.restart_count.value > kMaxRestarts)
    return {"restart count must be in 0.." + std::to_string(kMaxRestarts) + ", got " +
            describeValue(node.restart_count)};
  return {};
}

}  // namespace

Status parseNnodes(const std::string& text, const std::string& where, LaunchFlags& flags) {
  // The limit (kMaxNodes) is validateCounts' to report, with where the count came from.
  if (const auto range = parseNodeRange(text)) {
    flags.min_nnodes = range->first;
    flags.nnodes = range->second;
    return {};
  }
  std::string why = "not a node count";
  const auto colon = text.find(':');
  const auto lo = parseCount<long long>(text.substr(0, colon));
  const auto hi = colon == std::string::npos ? lo : parseCount<long long>(text.substr(colon + 1));
  if (lo && hi) {
    if (*lo == 0 || *hi == 0) why = "a job needs at least 1 node";
    else if (*lo > *hi) why = "MIN " + std::to_string(*lo) + " is more than MAX " + std::to_string(*hi);
    else why = "more than " + std::to_string(kMaxNodes) + " nodes (limits: docs/launching.md)";
  }
  return {where + " '" + text + "': " + why + "; give N (a fixed count) or MIN:MAX (elastic, torchrun's form) with " +
          "1 <= MIN <= MAX <= " + std::to_string(kMaxNodes) + ", e.g. 2 or 1:4"};
}

Checked<NodeDescriptor> resolveNode(const LaunchFlags& flags, const NodePlan* plan, const std::string& backend,
                                    const Env& env, const std::string& host, int cpu_cores,
                                    const std::function<int()>& free_port) {
  const Checked<LaunchFlags> pet = readPetVariables(env);
  if (!pet.ok()) return {pet.error};
  const Checked<NamedFlags> named = withStandalone(flags, free_port);
  if (!named.ok()) return {named.error};

  Checked<NodeDescriptor> result;
  NodeDescriptor& node = result.value;
  node.backend = backend;
  node.host = host;
  node.cpu_cores.set(cpu_cores < 1 ? 1 : cpu_cores, "sched_getaffinity");
  pickFields(node, named.value, plan, pet.value);
  if (Status s = checkElasticOwner(node, plan, backend, flags.formation_master && !flags.no_node_group); !s.ok()) {
    return {s.error};
  }
  if (plan) takePlanFacts(node, *plan);
  // The counts first: the single-worker rule below multiplies them.
  if (Status s = validateCounts(node); !s.ok()) return {s.error};
  if (Status s = applySingleWorkerRule(node, backend); !s.ok()) return {s.error};
  if (Status s = applyMasterRule(node, flags.no_node_group ? std::nullopt : flags.formation_master); !s.ok()) {
    return {s.error};
  }
  result.error = validateNode(node).error;
  return result;
}

Status validateNode(const NodeDescriptor& node) {
  if (Status s = validateCounts(node); !s.ok()) return s;
  const int nproc = *node.nproc_per_node.value;
  const int port = *node.master_port.value;
  if (node.master_addr.value->empty())
    return {"master address is empty (from " + node.master_addr.source + "); pass --master-addr HOST"};
  if (port < 1 || port > 65535)
    return {"master port must be in 1..65535, got " + describeValue(node.master_port) + "; fix --master-port"};
  if (*node.master_wait_seconds.value < 0)
    return {"master wait must be >= 0 seconds, got " + describeValue(node.master_wait_seconds)};
  if (node.run_id.value->empty()) return {"run id is empty (from " + node.run_id.source + "); pass --run-id ID"};
  // Values the job runs with (its workers' MASTER_ADDR and TORCHELASTIC_RUN_ID, the node group's key, describe --json,
  // a rendered job): refused, never altered, when not UTF-8.
  if (Status s = requireUtf8(*node.master_addr.value, "master address (from " + node.master_addr.source + ")",
                             "give a host name or an IP address");
      !s.ok()) {
    return s;
  }
  if (Status s = requireUtf8(*node.run_id.value, "run id (from " + node.run_id.source + ")",
                             "give an id of letters, digits and '-'");
      !s.ok()) {
    return s;
  }
  if (*node.single_worker.value) {
    const int world = node.worldSize();
    if (*node.rank.value < 0 || *node.rank.value >= world)
      return {"rank must be in 0.." + std::to_string(world - 1) + " (world size " + std::to_string(world) +
              "), got " + describeValue(node.rank)};
    if (*node.local_rank.value < 0 || *node.local_rank.value >= nproc)
      return {"local rank must be in 0.." + std::to_string(nproc - 1) + " (nproc per node " + std::to_string(nproc) +
              "), got " + describeValue(node.local_rank)};
  }
  return {};
}

std::vector<int> NodeDescriptor::localRanks() const {
  if (single_worker.has() && *single_worker.value) return {*local_rank.value};
  std::vector<int> out;
  for (int i = 0; i < *nproc_per_node.value; ++i) out.push_back(i);
  return out;
}

std::vector<WorkerDescriptor> expandWorkers(const NodeDescriptor& node, const Env& inherited, int restart) {
  std::vector<WorkerDescriptor> workers;
  const int nproc = *node.nproc_per_node.value;
  const Sourced<int> offset = node.rankOffset();
  const Sourced<int> world = node.worldSizeSourced();
  for (int local : node.localRanks()) {
    WorkerDescriptor w;
    if (*node.single_worker.value) {
      w.rank = node.rank;
      w.local_rank = node.local_rank;
    } else {
      w.local_rank.set(local, "rule: worker index on this node", Origin::kRule);
      if (node.countsKnown()) {
        w.rank.set(*offset.value + local, "rule: rank_offset+local_rank = " + std::to_string(*offset.value) + "+" +
                                              std::to_string(local) + " (rank_offset: " + offset.source + ")",
                   Origin::kRule);
      } else {
        w.rank.set(*offset.value + local, "rule: node_rank*nproc_per_node+local_rank = " +
                                              std::to_string(*node.node_rank.value) + "*" + std::to_string(nproc) +
                                              "+" + std::to_string(local), Origin::kRule);
      }
    }
    w.world_size = world;
    w.local_world_size = node.nproc_per_node;
    w.node_rank = node.node_rank;
    w.nnodes = node.nnodes;
    w.master_addr = node.master_addr;
    w.master_port = node.master_port;
    w.run_id = node.run_id;
    if (restart == 0) {
      w.restart_count = node.restart_count;
    } else {
      w.restart_count.set(*node.restart_count.value + restart,
                          "rule: " + std::to_string(*node.restart_count.value) + " (" + node.restart_count.source +
                              ") + " + std::to_string(restart) + " restart(s) by taehv-run",
                          Origin::kRule);
    }
    if (node.gpus_on_node.has() && *node.gpus_on_node.value > 0) {
      if (local < *node.gpus_on_node.value) {
        w.device.set(local, "rule: local_rank on a node with " + std::to_string(*node.gpus_on_node.value) +
                                " GPU(s) (" + node.gpus_on_node.source + ")", Origin::kRule);
      }
    }
    buildWorkerEnvironment(node, w, inherited);
    workers.push_back(std::move(w));
  }
  return workers;
}

Sourced<int> NodeDescriptor::rankOffset() const {
  Sourced<int> out;
  const int node = *node_rank.value;
  if (agreed) {
    out.set(agreed->first_rank, agreed->source, Origin::kRule);
  } else if (node_nprocs.has()) {
    const std::vector<int>& counts = *node_nprocs.value;
    long long sum = 0;
    for (int k = 0; k < node && k < static_cast<int>(counts.size()); ++k) sum += counts[static_cast<std::size_t>(k)];
    out.set(static_cast<int>(sum), "rule: processes of nodes 0.." + std::to_string(node - 1) + " in " +
                                       formatCounts(counts) + " (" + node_nprocs.source + ")", Origin::kRule);
    if (node == 0) out.source = "rule: node 0 starts at rank 0";
  } else {
    out.set(node * *nproc_per_node.value, "rule: node_rank*nproc_per_node = " + std::to_string(node) + "*" +
                                              std::to_string(*nproc_per_node.value) + " (every node as many)",
            Origin::kRule);
  }
  return out;
}

Sourced<int> NodeDescriptor::worldSizeSourced() const {
  Sourced<int> out;
  if (agreed) {
    out.set(agreed->world_size, agreed->source, Origin::kRule);
  } else if (node_nprocs.has()) {
    long long sum = 0;
    for (int c : *node_nprocs.value) sum += c;
    out.set(static_cast<int>(sum), "rule: sum of " + formatCounts(*node_nprocs.value) + " (" + node_nprocs.source + ")",
            Origin::kRule);
  } else {
    out.set(*nnodes.value * *nproc_per_node.value, "rule: nnodes*nproc_per_node = " + std::to_string(*nnodes.value) +
                                                       "*" + std::to_string(*nproc_per_node.value), Origin::kRule);
  }
  return out;
}

std::string NodeDescriptor::nnodesText() const {
  const std::string max = std::to_string(*nnodes.value);
  return elastic() ? std::to_string(*min_nnodes.value) + ":" + max : max;
}

Status applyAgreedLayout(NodeDescriptor& node, const RankLayout& layout) {
  const int nproc = *node.nproc_per_node.value;
  if (layout.world_size < 1 || layout.world_size > kMaxWorldSize)
    return {"the node group's world size " + std::to_string(layout.world_size) + " is outside 1.." +
            std::to_string(kMaxWorldSize) + " (limits: docs/launching.md); lower --nproc-per-node on some nodes"};
  if (layout.first_rank < 0 || static_cast<long long>(layout.first_rank) + nproc > layout.world_size)
    return {"the node group gave this node ranks " + std::to_string(layout.first_rank) + ".." +
            std::to_string(static_cast<long long>(layout.first_rank) + nproc - 1) + ", outside the world size " +
            std::to_string(layout.world_size)};
  if (node.node_nprocs.has()) {
    NodeDescriptor planned = node;
    planned.agreed.reset();
    if (*planned.rankOffset().value != layout.first_rank || planned.worldSize() != layout.world_size)
      return {"the node group's ranks (first " + std::to_string(layout.first_rank) + ", world size " +
              std::to_string(layout.world_size) + ") contradict the plan's per-node counts " +
              formatCounts(*node.node_nprocs.value) + " (" + node.node_nprocs.source +
              "); check --nproc-per-node on every node"};
  }
  node.agreed = layout;
  return {};
}

}  // namespace taehv
