#include "taehv/group_plan.h"

#include <boost/program_options.hpp>
#include <cmath>
#include <sstream>

#include "taehv/env.h"
#include "taehv/group/etcd_credentials.h"
#include "taehv/group/etcd_tls.h"
#include "taehv/group/tcp_node_group.h"
#include "taehv/parse.h"

namespace taehv {

GroupFlags groupFlags(const boost::program_options::variables_map& vm) {
  GroupFlags f;
  if (vm.count("group-port")) f.port = vm["group-port"].as<int>();
  if (vm.count("node-timeout")) f.node_timeout = vm["node-timeout"].as<double>();
  if (vm.count("job-token-file")) f.token_file = vm["job-token-file"].as<std::string>();
  f.disabled = vm.count("no-node-group") > 0;
  if (vm.count("rdzv-backend")) f.rdzv_backend = vm["rdzv-backend"].as<std::string>();
  if (vm.count("rdzv-endpoint")) f.rdzv_endpoint = vm["rdzv-endpoint"].as<std::string>();
  if (vm.count("node-local-checkpoints")) f.node_local_checkpoints = vm["node-local-checkpoints"].as<std::string>();
  return f;
}

namespace {

/// --rdzv-backend, else env PET_RDZV_BACKEND, else "".
std::string rdzvBackend(const GroupFlags& flags, const Env& env) {
  const std::string* env_backend = findEnv(env, kRdzvBackendEnv);
  return flags.rdzv_backend ? *flags.rdzv_backend : env_backend ? *env_backend : "";
}

/// --rdzv-backend etcd (or PET_RDZV_BACKEND=etcd): the endpoints, parsed. Other backends leave the TCP group.
Status planEtcd(const GroupFlags& flags, const Env& env, GroupPlan& plan) {
  const std::string backend = rdzvBackend(flags, env);
  const std::string backend_from = flags.rdzv_backend ? "--rdzv-backend" : std::string("env ") + kRdzvBackendEnv;
  if (backend.empty() || backend == "static" || backend == "c10d") return {};
  if (backend != "etcd") {
    return {backend_from + " '" + backend + "' is not a backend taehv-run knows; use etcd (membership in an etcd "
                                            "cluster), c10d or static (the node group led by node 0)"};
  }
  const std::string* env_endpoint = findEnv(env, kRdzvEndpointEnv);
  if (!flags.rdzv_endpoint && !env_endpoint) {
    return {backend_from + " etcd needs --rdzv-endpoint HOST:PORT[,HOST:PORT...] (the etcd cluster's client "
                           "endpoints) or env " + std::string(kRdzvEndpointEnv)};
  }
  plan.etcd_source = flags.rdzv_endpoint ? "flag --rdzv-endpoint" : std::string("env ") + kRdzvEndpointEnv;
  auto endpoints = group::parseEtcdEndpoints(flags.rdzv_endpoint ? *flags.rdzv_endpoint : *env_endpoint);
  if (!endpoints.ok()) return {endpoints.error + " (" + plan.etcd_source + ")"};
  plan.etcd_endpoints = std::move(endpoints.value);
  Checked<group::EtcdCredentials> credentials = group::etcdCredentialsFromEnv(env);
  if (!credentials.ok()) return {credentials.error};
  for (auto& e : plan.etcd_endpoints) e.credentials = credentials.value;
  return group::useEtcdTls(env, plan.etcd_endpoints);
}

}  // namespace

std::optional<FormationMaster> formationMaster(const GroupFlags& flags, const Env& env) {
  if (rdzvBackend(flags, env) != "etcd") return std::nullopt;
  FormationMaster out;
  out.rule = std::string("chosen at formation (") +
             (flags.rdzv_backend ? "--rdzv-backend etcd" : "env " + std::string(kRdzvBackendEnv) + "=etcd") + ")";
  const std::string* env_endpoint = findEnv(env, kRdzvEndpointEnv);
  if (flags.rdzv_endpoint || env_endpoint) {
    const auto endpoints = group::parseEtcdEndpoints(flags.rdzv_endpoint ? *flags.rdzv_endpoint : *env_endpoint);
    if (endpoints.ok()) out.stand_in = endpoints.value.front().host;
  }
  return out;
}

Checked<GroupPlan> planGroup(const NodeDescriptor& node, const GroupFlags& flags, const Env& env) {
  Checked<GroupPlan> out;
  GroupPlan& plan = out.value;
  if (Status s = planEtcd(flags, env, plan); !s.ok()) return {s.error};
  if (flags.node_local_checkpoints) {
    // Only etcd can agree on a step with any node lost; the TCP group ends with node 0 anyway.
    if (plan.etcd_endpoints.empty() || flags.node_local_checkpoints->empty()) {
      return {"--node-local-checkpoints '" + *flags.node_local_checkpoints + "' needs --rdzv-backend etcd and a "
              "folder (this node's output.dir, where taehv-train with checkpoint.node_local=true saves)"};
    }
    plan.node_local_checkpoints = *flags.node_local_checkpoints;
  }
  if (flags.disabled) {
    plan.why_off = "--no-node-group";
  } else if (*node.nnodes.value < 2) {
    plan.why_off = "one node";
  } else if (*node.single_worker.value) {
    plan.why_off = "each task is one worker (the platform's launcher watches the tasks)";
  }
  plan.enabled = plan.why_off.empty();
  if (node.elastic() && !plan.enabled) {
    // Only the group can tell which nodes are alive and lay the ranks out again.
    out.error = "--nnodes " + node.nnodesText() + " (elastic) needs the node group, which is off here (" + plan.why_off +
                "); give a fixed count (e.g. --nnodes " + std::to_string(*node.nnodes.value) + ") or drop --no-node-group";
    return out;
  }
  plan.leader_addr = *node.master_addr.value;
  // torchrun's c10d rendezvous numbers the nodes as they arrive: with it and no node rank from anywhere (flag,
  // PET_NODE_RANK, a platform), so does the TCP group (PROTOCOL.md, "Node ranks by arrival").
  plan.rank_by_arrival = plan.enabled && plan.etcd_endpoints.empty() && rdzvBackend(flags, env) == "c10d" &&
                         node.node_rank.origin == Origin::kDefault;

  if (flags.port) {
    if (*flags.port < 1 || *flags.port > 65535) {
      out.error = "--group-port " + std::to_string(*flags.port) + " is not a TCP port (1..65535)";
      return out;
    }
    plan.port.set(*flags.port, "flag --group-port");
  } else if (auto port = readSourcedEnv(env, kGroupPortEnv, parsePort, "a TCP port (1..65535)"); !port.ok()) {
    return {"env " + port.error};
  } else if (port.value.has()) {
    plan.port = port.value;
  } else {
    const int master = *node.master_port.value;
    plan.port.set(group::defaultGroupPort(master),
                  master < 65535 ? "rule: master_port + 1" : "rule: master_port - 1 (master_port is 65535)");
  }
  if (plan.enabled && plan.etcd_endpoints.empty() && plan.port.value == *node.master_port.value) {
    out.error = "the group port " + std::to_string(*plan.port.value) + " (" + plan.port.source +
                ") is the master port, which the workers' TCPStore uses; pick another --group-port";
    return out;
  }

  if (flags.node_timeout) {
    const double s = *flags.node_timeout;
    const double min_s = std::chrono::duration<double>(group::kMinNodeTimeout).count();
    if (!(s >= min_s) || s > 86400) {
      out.error = "--node-timeout must be " + std::to_string(static_cast<int>(min_s)) +
                  "..86400 seconds (below a few heartbeats a busy node would be declared lost), got " +
                  std::to_string(s);
      return out;
    }
    plan.node_timeout = std::chrono::milliseconds(std::llround(s * 1000));
    plan.node_timeout_source = "flag --node-timeout";
  } else {
    plan.node_timeout_source = "default (torchrun's keep-alive bound, 3 x 5 s)";
  }

  // With etcd the master is no fact of the job's command line (a --master-addr given to some nodes only must not
  // split it): the derived token takes the rule instead.
  group::JobFacts facts{*node.run_id.value, plan.etcd_endpoints.empty() ? *node.master_addr.value : groupMaster(plan),
                        *node.master_port.value, *node.nnodes.value};
  Checked<group::JobToken> token = group::resolveJobToken(env, flags.token_file, facts);
  if (!token.ok()) return {token.error};
  plan.token = std::move(token.value);
  return out;
}

std::string groupMaster(const GroupPlan& plan) {
  return plan.etcd_endpoints.empty() ? plan.leader_addr : "chosen at formation";
}

std::string groupMasterRule(const GroupPlan& plan) {
  if (!plan.etcd_endpoints.empty()) {
    return "the first node of each formation in etcd (lowest --node-rank, ties in order of arrival); a new one when "
           "it is lost";
  }
  return "fixed: master_addr (the node there leads the group and hosts the store); the job ends if it is lost";
}

std::string describeGroup(const GroupPlan& plan) {
  std::ostringstream s;
  if (!plan.enabled) {
    s << "node group: off (" << plan.why_off << ")\n";
    return s.str();
  }
  s << "node group (core/group/PROTOCOL.md):\n";
  if (!plan.etcd_endpoints.empty()) {
    std::string endpoints;
    for (const auto& e : plan.etcd_endpoints) endpoints += (endpoints.empty() ? "" : ",") + e.text();
    s << "  backend = etcd at " << endpoints << "    <- " << plan.etcd_source << "\n";
    const std::string& user = plan.etcd_endpoints.front().credentials.user;
    s << "  etcd_user = " << (user.empty() ? "none (no etcd authentication)" : user) << "    <- env "
      << group::kEtcdUserEnv << "\n";
    if (const auto& tls = plan.etcd_endpoints.front().tls) {
      s << "  etcd_tls = verified against " << tls->caText() << "; client certificate "
        << (tls->clientSubject().empty() ? "none" : tls->settings().cert_file + " (" + tls->clientSubject() + ")")
        << "    <- env " << group::kEtcdCertEnv << ", " << group::kEtcdKeyEnv << "\n";
    }
    s << "  checkpoints = "
      << (plan.node_local_checkpoints.empty()
              ? std::string("shared (no --node-local-checkpoints: --resume latest reads storage every node sees)")
              : "node-local in " + plan.node_local_checkpoints +
                    " (each formation agrees on the newest step every node holds: TAEHV_RESUME_STEP)    <- "
                    "--node-local-checkpoints")
      << "\n";
  } else {
    s << "  backend = tcp    <- no --rdzv-backend etcd\n";
    s << "  address = " << plan.address() << "    <- master_addr, port " << plan.port.source << "\n";
    if (plan.rank_by_arrival) {
      s << "  node_rank = by arrival    <- --rdzv-backend c10d without --node-rank (the node where master_addr is "
           "local leads as node 0, the others are numbered as they join)\n";
    }
  }
  s << "  master = " << groupMaster(plan) << "    <- " << groupMasterRule(plan) << "\n";
  s << "  node_timeout = " << std::chrono::duration<double>(plan.node_timeout).count() << " s    <- "
    << plan.node_timeout_source << "\n";
  s << "  job_token = " << plan.token.description << "\n";
  return s.str();
}

}  // namespace taehv
