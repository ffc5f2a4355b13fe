// taehv-run describe: print each worker's rank, world and environment with provenance; start nothing.
#include <iostream>
#include <string>
#include <vector>

#include "commands/commands.h"
#include "taehv/describe.h"
#include "taehv/group/progress_summary.h"
#include "taehv/log.h"
#include "taehv/sizing_bridge.h"
#include "taehv/worker_env.h"

namespace taehv {
namespace po = boost::program_options;

namespace {

/// The hang detection and the status file of this node's launch.
std::string describeProgress(const LaunchSettings& settings) {
  const auto floor = std::chrono::duration<double>(settings.hang_timeout).count();
  const std::string status = process::statusFilePath(settings.log_dir);
  return "progress: " + std::string(process::kProgressSocketEnv) + " per worker; hang detection " +
         (floor > 0 ? "after max(" + std::to_string(static_cast<long long>(floor)) + " s, learned bound)" : "off") +
         "; stragglers (busy time over " + log::format("%.1f", group::kStragglerFactor) + "x the others') named by node 0" +
         (settings.leave_out_stragglers ? " and left out of the next re-formation" : "") +
         "\nstatus file: " + (status.empty() ? "none (give --log-dir)" : status) + "\n";
}

}  // namespace

int runDescribe(Cli& cli) {
  po::options_description extra("describe");
  extra.add_options()("json", "print the stable JSON form (its keys: docs/launching.md)");
  po::variables_map vm;
  if (auto done = cli.parse(extra, vm)) return *done;
  auto resolved = cli.resolve(vm);
  if (!resolved.ok()) {
    cli.log(LogLevel::kError, resolved.error);
    return kUsageError;
  }
  if (!resolved.value.backend_takes_over) {
    if (Status sized = applySizing(vm, cli.env(), resolved.value.node); !sized.ok()) {
      cli.log(LogLevel::kError, sized.error);
      return kUsageError;
    }
  }
  // What the launch would refuse, describe refuses too (a --shutdown-grace of nan, a --log-dir that is a file).
  if (Status options = checkLaunchOptions(cli, vm, resolved.value); !options.ok()) {
    cli.log(LogLevel::kError, options.error);
    return kUsageError;
  }
  const NodeDescriptor& node = resolved.value.node;
  auto workers = expandWorkers(node, cli.env());
  auto group = planGroup(node, groupFlags(vm), cli.env());
  if (!group.ok()) {
    cli.log(LogLevel::kError, group.error);
    return kUsageError;
  }
  if (vm.count("json")) {
    Utf8Repair repair;
    std::cout << describeJson(node, workers, &group.value, &repair);
    if (repair.any()) cli.log(LogLevel::kWarn, repair.sentence("describe --json"));
  } else {
    Checked<std::vector<std::string>> worker = cli.workerCommand();
    std::vector<std::string> command = worker.ok() ? worker.value : std::vector<std::string>{"<" + worker.error + ">"};
    insertProfileArgs(node, command);
    if (!resolved.value.detection.empty()) std::cout << "detected: " << resolved.value.detection << "\n";
    if (resolved.value.backend_takes_over) {
      std::cout << "note: backend " << node.backend << " starts the whole job itself; shown is this node's plan\n";
    }
    std::cout << describeText(node, workers, command);
    std::cout << "\n" << describeGroup(group.value);
    if (!resolved.value.backend_takes_over) std::cout << describeProgress(launchSettings(vm, node).value);
  }
  return 0;
}

}  // namespace taehv
