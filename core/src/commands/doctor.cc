// taehv-run doctor: check this node before a job (backend, plan, master, GPUs, NCCL, network, folders).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "commands/commands.h"
#include "commands/doctor_etcd.h"
#include "sizing_bridge_detail.h"
#include "taehv/default_worker.h"
#include "taehv/env.h"
#include "taehv/sizing/doctor.h"
#include "taehv/sizing/network.h"
#include "taehv/sizing/nccl.h"
#include "taehv/sizing/profiles.h"
#include "taehv/sizing/sizing.h"

namespace taehv {
namespace po = boost::program_options;
namespace {

/// Which backends claim this environment, as `detect()` says.
std::vector<sizing::PluginFacts> detectAll(Cli& cli, std::vector<std::string>& errors) {
  std::vector<sizing::PluginFacts> facts;
  for (LoadedPlugin* p : cli.allPlugins(errors)) {
    sizing::PluginFacts f;
    f.name = p->name;
    try {
      Detection d = p->backend->detect(cli.host());
      f.confidence = d.confidence;
      f.reason = d.reason;
    } catch (const PluginFault& e) {  // reported as a failed check, not the end of the doctor
      errors.push_back(e.what());
    }
    facts.push_back(f);
  }
  return facts;
}

/// The node group: node 0's port free, or node 0's port reachable from here (with etcd: each endpoint's health); a
/// job token given.
std::vector<sizing::CheckResult> groupChecks(const NodeDescriptor& node, const GroupPlan& plan,
                                             std::chrono::milliseconds timeout) {
  std::vector<sizing::CheckResult> rows;
  sizing::CheckResult port;
  port.name = "node group port";
  if (!plan.enabled) {
    port.status = sizing::CheckStatus::kSkip;
    port.detail = "no node group: " + plan.why_off;
    rows.push_back(port);
    return rows;
  }
  const int p = *plan.port.value;
  if (!plan.etcd_endpoints.empty()) {
    rows = etcdChecks(plan.etcd_endpoints);  // the etcd cluster holds the group: no node listens on a group port
  } else if (*node.node_rank.value == 0) {
    const Status free = sizing::tcpPortFree(p);
    port.status = free.ok() ? sizing::CheckStatus::kPass : sizing::CheckStatus::kFail;
    port.detail = "port " + std::to_string(p) + " (" + plan.port.source + ") on this node (node 0): " +
                  (free.ok() ? "free" : "cannot be bound: " + free.error);
    if (!free.ok()) port.fix = "another job or service holds it: pick a free port with --group-port (or " +
                                 std::string(kGroupPortEnv) + ") on every node";
  } else {
    const Status reached = waitForMaster(plan.leader_addr, p, timeout);
    port.status = reached.ok() ? sizing::CheckStatus::kPass : sizing::CheckStatus::kWarn;
    port.detail = "node 0's group port " + plan.address() + ": " +
                  (reached.ok() ? "reachable" : "not reachable (" + reached.error + ")");
    if (!reached.ok()) port.fix = "start node 0 first (its taehv-run listens there), and let TCP port " +
                                 std::to_string(p) + " through any firewall between the nodes";
  }
  if (plan.etcd_endpoints.empty()) rows.push_back(port);
  sizing::CheckResult token;
  token.name = "node group token";
  token.detail = plan.token.description;
  if (plan.token.source == group::TokenSource::kDerived) {
    token.status = sizing::CheckStatus::kWarn;
    token.fix = std::string("give every node the same secret: export ") + group::kJobTokenEnv +
                "=$(openssl rand -hex 32) where the job is submitted, or --job-token-file";
  }
  rows.push_back(token);
  return rows;
}

}  // namespace

int runDoctor(Cli& cli) {
  po::options_description extra("doctor");
  // clang-format off
  extra.add_options()
    ("output-dir", po::value<std::string>()->value_name("DIR"),
        "output folder to check [default: the profile's output.dir, else the trainer's runs/taehv]")
    ("data", po::value<std::string>()->value_name("PATH"),
        "training data to check [default: the profile's data.source, else synthetic]")
    ("connect-timeout", po::value<double>()->default_value(3.0)->value_name("SECONDS"),
        "how long to wait for the master's port to accept");
  // clang-format on
  po::variables_map vm;
  if (auto done = cli.parse(extra, vm)) return *done;
  const double timeout_s = vm["connect-timeout"].as<double>();
  if (!(timeout_s > 0) || timeout_s > 600) {
    cli.log(LogLevel::kError, "--connect-timeout must be in (0, 600] seconds");
    return kUsageError;
  }

  sizing::DoctorInputs in;
  in.connect_timeout = std::chrono::milliseconds(std::llround(timeout_s * 1000));
  in.detected = detectAll(cli, in.plugin_load_errors);
  const std::string backend_flag = vm.count("backend") ? vm["backend"].as<std::string>() : "auto";
  if (backend_flag == "auto") {
    std::vector<sizing::PluginFacts> claimed;
    for (const auto& d : in.detected) {
      if (d.confidence > 0) claimed.push_back(d);
    }
    std::stable_sort(claimed.begin(), claimed.end(),
                     [](const auto& a, const auto& b) { return a.confidence > b.confidence; });
    if (claimed.size() > 1 && claimed[0].confidence == claimed[1].confidence) {
      in.backend_error = "backends '" + claimed[0].name + "' and '" + claimed[1].name +
                         "' both recognise this environment with confidence " + std::to_string(claimed[0].confidence);
    }
  }

  sizing::TrainProfile profile;
  auto resolved = cli.resolve(vm);
  const Checked<sizing::NodeSizingInput> sizing_input =
      nodeSizingInput(vm, cli.env(), resolved.ok() ? &resolved.value.node : nullptr);
  if (!sizing_input.ok()) {
    cli.log(LogLevel::kError, sizing_input.error);
    return kUsageError;
  }
  const sizing::NodeSizingInput& sin = sizing_input.value;
  if (resolved.ok()) {
    const NodeDescriptor& node = resolved.value.node;
    in.backend = resolved.value.plugin != nullptr ? resolved.value.plugin->name : "local";
    in.descriptor.nnodes = node.nnodes;
    if (node.elastic()) in.descriptor.min_nnodes = node.min_nnodes;
    in.descriptor.node_rank = node.node_rank;
    in.descriptor.nproc_per_node = node.nproc_per_node;
    if (node.countsKnown()) in.descriptor.world_size = node.worldSizeSourced();
    in.descriptor.master_addr = node.master_addr;
    in.descriptor.master_port = node.master_port;
    if (node.formation_master) in.descriptor.master_rule = node.formation_master->rule;
  } else {
    in.descriptor.error = resolved.error;
  }
  in.descriptor.env = cli.env();
  sizing::NodeSizing s = sizing::sizeNode(sin);
  in.inventory = s.inventory;
  in.visible = s.visible;
  in.nproc = s.nproc;
  in.tuning = s.tuning;
  if (resolved.ok() && s.ok() && !sin.nproc_requested.has()) {
    in.descriptor.nproc_per_node = s.nproc.nproc_per_node;  // what auto will choose
  }

  if (vm.count("config") && resolved.ok()) {
    NodeDescriptor node = resolved.value.node;
    if (s.ok()) node.nproc_per_node = in.descriptor.nproc_per_node;
    if (Status applied = applyProfile(vm["config"].as<std::string>(), node, &profile); !applied.ok()) {
      in.descriptor.error = applied.error;
    }
  }

  std::vector<std::string> candidates;
  if (auto nccl = envValue(cli.env(), sizing::kNcclLibraryEnv)) candidates.push_back(*nccl);
  candidates.push_back(sizing::kNcclLibrary);
  in.nccl = sizing::probeNccl(candidates);

  in.output_dir = vm.count("output-dir")        ? vm["output-dir"].as<std::string>()
                  : !profile.output_dir.empty() ? profile.output_dir
                                                : default_worker::kOutputDir;
  in.data_path = vm.count("data") ? vm["data"].as<std::string>() : profile.data_source;

  std::vector<sizing::CheckResult> rows = sizing::runDoctorChecks(in);
  if (resolved.ok()) {
    // What the launch would refuse (a --shutdown-grace of nan, a --log-dir that is a device), for this node as sized.
    ResolvedLaunch sized = resolved.value;
    if (s.ok()) sized.node.nproc_per_node = in.descriptor.nproc_per_node;
    if (Status options = checkLaunchOptions(cli, vm, sized); !options.ok()) {
      rows.push_back({"launch options", sizing::CheckStatus::kFail, options.error, "fix the value named"});
    }
    auto group = planGroup(resolved.value.node, groupFlags(vm), cli.env());
    if (!group.ok()) {
      rows.push_back({"node group", sizing::CheckStatus::kFail, group.error, "fix the value named"});
    } else {
      for (auto& row : groupChecks(resolved.value.node, group.value, in.connect_timeout)) rows.push_back(row);
    }
  }
  std::cout << sizing::renderDoctorTable(rows);
  return sizing::doctorExitCode(rows);
}

}  // namespace taehv
