#include "taehv/describe.h"

#include <nlohmann/json.hpp>
#include <sstream>

namespace taehv {

namespace {

/// The node group's plan as describe --json shows it (the token's source, never the token).
nlohmann::ordered_json groupJson(const GroupPlan* group) {
  if (!group) return nullptr;
  nlohmann::ordered_json g;
  g["enabled"] = group->enabled;
  g["why_off"] = group->enabled ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(group->why_off);
  g["address"] = group->enabled ? nlohmann::ordered_json(group->address()) : nlohmann::ordered_json(nullptr);
  g["port"] = group->port.has() ? nlohmann::ordered_json(*group->port.value) : nlohmann::ordered_json(nullptr);
  g["port_source"] = group->port.source;
  switch (group->token.source) {
    case group::TokenSource::kEnv: g["token_source"] = "env"; break;
    case group::TokenSource::kFile: g["token_source"] = "file"; break;
    case group::TokenSource::kDerived: g["token_source"] = "derived"; break;
  }
  g["token"] = group->token.description;
  g["backend"] = group->etcd_endpoints.empty() ? "tcp" : "etcd";
  if (!group->etcd_endpoints.empty()) {
    nlohmann::ordered_json endpoints = nlohmann::ordered_json::array();
    for (const auto& e : group->etcd_endpoints) endpoints.push_back(e.text());
    g["etcd_endpoints"] = endpoints;
    const std::string& user = group->etcd_endpoints.front().credentials.user;
    g["etcd_user"] = user.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(user);
    g["etcd_tls"] = group->etcd_endpoints.front().https;  // the files' paths in the text form; never a key
  }
  g["master"] = group->enabled ? nlohmann::ordered_json(groupMaster(*group)) : nlohmann::ordered_json(nullptr);
  g["master_rule"] = group->enabled ? nlohmann::ordered_json(groupMasterRule(*group)) : nlohmann::ordered_json(nullptr);
  return g;
}

}  // namespace

std::string describeJson(const NodeDescriptor& node, const std::vector<WorkerDescriptor>& workers,
                         const GroupPlan* group, Utf8Repair* repair) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  const Sourced<int> offset = node.rankOffset();
  for (const auto& w : workers) {
    nlohmann::ordered_json o;
    nlohmann::ordered_json provenance;
    auto field = [&](const char* key, const auto& sourced) {
      o[key] = *sourced.value;
      provenance[key] = sourced.source;
    };
    field("rank", w.rank);
    field("local_rank", w.local_rank);
    field("world_size", w.world_size);
    field("local_world_size", w.local_world_size);
    field("node_rank", w.node_rank);
    field("nnodes", w.nnodes);
    o["min_nnodes"] = node.min_nnodes.has() ? *node.min_nnodes.value : *w.nnodes.value;
    provenance["min_nnodes"] = node.elastic() ? "MIN of --nnodes " + node.nnodesText() + " (" + node.nnodes.source +
                                                    "): nnodes is MAX until the node group forms"
                                              : "fixed size: nnodes";
    field("rank_offset", offset);
    if (node.node_nprocs.has()) {
      field("node_nprocs", node.node_nprocs);
    } else {
      o["node_nprocs"] = nullptr;
      provenance["node_nprocs"] = *node.nnodes.value > 1
                                      ? "unknown here: each node says its own count to the node group at start"
                                      : "one node";
    }
    field("master_addr", w.master_addr);
    field("master_port", w.master_port);
    nlohmann::ordered_json env = nlohmann::ordered_json::object();
    for (const auto& [name, value] : w.env) {
      env[name] = *value.value;
      provenance[name] = value.source;
    }
    o["env"] = env;
    o["provenance"] = provenance;
    o["notes"] = node.notes;
    o["node_group"] = groupJson(group);
    out.push_back(o);
  }
  return dumpValidUtf8(out, 2, repair) + "\n";
}

std::string describeText(const NodeDescriptor& node, const std::vector<WorkerDescriptor>& workers,
                         const std::vector<std::string>& command) {
  std::ostringstream out;
  auto line = [&](const std::string& label, const auto& sourced) {
    out << "  " << label << " = " << *sourced.value << "    <- " << sourced.source << "\n";
  };
  out << "backend: " << node.backend << "\n";
  out << "node " << *node.node_rank.value << " of " << node.nnodesText() << " on " << node.host << ":\n";
  out << "  nnodes = " << node.nnodesText() << "    <- " << node.nnodes.source << "\n";
  if (node.elastic()) {
    out << "  note: elastic: the node group forms with " << *node.min_nnodes.value << " to " << *node.nnodes.value
        << " nodes; node ranks, rank_offset and world_size below assume all " << *node.nnodes.value
        << " (node_rank is this node's place in the order; the group numbers the nodes it forms with 0, 1, ...)\n";
  }
  line("node_rank", node.node_rank);
  line("nproc_per_node", node.nproc_per_node);
  if (node.node_nprocs.has()) {
    out << "  node_nprocs = " << formatCounts(*node.node_nprocs.value) << "    <- " << node.node_nprocs.source << "\n";
  }
  line("rank_offset", node.rankOffset());
  line("world_size", node.worldSizeSourced());
  if (*node.nnodes.value > 1 && !node.countsKnown()) {
    out << "  note: nodes may run different counts: in a per-node mode the node group agrees on rank_offset and "
           "world_size at start (the values above assume every node runs "
        << *node.nproc_per_node.value << ")\n";
  }
  line("master_addr", node.master_addr);
  line("master_port", node.master_port);
  line("run_id", node.run_id);
  line("restart_count", node.restart_count);
  line("max_restarts", node.max_restarts);
  if (node.gpus_on_node.has()) line("gpus_on_node", node.gpus_on_node);
  if (*node.single_worker.value) line("single_worker", node.single_worker);
  if (*node.master_wait_seconds.value > 0) line("master_wait_seconds", node.master_wait_seconds);
  for (const auto& note : node.notes) out << "  note: " << note << "\n";
  out << "command:";
  for (const auto& arg : command) out << " " << arg;
  out << "\n";
  for (const auto& w : workers) {
    out << "\nworker rank " << *w.rank.value << " (local rank " << *w.local_rank.value << "):\n";
    line("rank", w.rank);
    line("local_rank", w.local_rank);
    line("world_size", w.world_size);
    if (w.device.has()) line("device", w.device);
    for (const auto& [name, value] : w.env) {
      out << "  " << name << "=" << *value.value << "    <- " << value.source << "\n";
    }
  }
  return out.str();
}

}  // namespace taehv
