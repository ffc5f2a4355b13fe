// The default command: start this node's workers, or hand the whole job to a backend that takes it over.
#include <algorithm>
#include <string>
#include <vector>

#include "commands/commands.h"
#include "taehv/env.h"
#include "taehv/sizing_bridge.h"

namespace taehv {
namespace po = boost::program_options;

Checked<LaunchSettings> launchSettings(const po::variables_map& vm, const NodeDescriptor& node) {
  Checked<LaunchSettings> result;
  LaunchSettings& settings = result.value;
  const Checked<std::chrono::milliseconds> grace = shutdownGrace(vm);
  if (!grace.ok()) return {grace.error};
  settings.shutdown_grace = grace.value;
  const Checked<std::chrono::milliseconds> hang = hangTimeout(vm);
  if (!hang.ok()) return {hang.error};
  settings.hang_timeout = hang.value;
  settings.prefix_output = !vm.count("no-prefix");
  settings.leave_out_stragglers = vm.count("leave-out-stragglers") > 0;
  if (settings.leave_out_stragglers && !node.elastic()) {
    return {"--leave-out-stragglers needs --nnodes MIN:MAX with MIN < MAX (the job must be able to re-form "
            "without a node); this job has --nnodes " + node.nnodesText()};
  }
  if (vm.count("log-dir")) {
    settings.log_dir = vm["log-dir"].as<std::string>();
    if (Status dir = checkLogDir(settings.log_dir); !dir.ok()) return {dir.error};
  }
  if (vm.count("local-ranks-filter")) {
    Checked<std::vector<int>> ranks = parseRankList(vm["local-ranks-filter"].as<std::string>());
    if (!ranks.ok()) return {ranks.error};
    for (int local : ranks.value) {
      if (local >= *node.nproc_per_node.value) {
        return {"--local-ranks-filter names local rank " + std::to_string(local) + " but this node runs " +
                std::to_string(*node.nproc_per_node.value) + " worker(s)"};
      }
    }
    settings.local_ranks = ranks.value;
  }
  return result;
}

/// torchrun's --redirects / --tee: per local rank, into settings.stream_logs (with --log-dir; without it torchrun
/// writes to a temporary folder of its own, taehv-run keeps the output on the console and says so).
void torchrunStreamLogs(const Cli& cli, const NodeDescriptor& node, LaunchSettings& settings) {
  for (int local = 0; local < *node.nproc_per_node.value; ++local) {
    const WorkerLogStreams streams = workerLogStreams(cli.torchrun(), local);
    if (streams.files != LogStreams::kNone) settings.stream_logs[local] = streams;
  }
  if (!settings.stream_logs.empty() && settings.log_dir.empty()) {
    settings.stream_logs.clear();
    cli.log(LogLevel::kInfo, "--redirects/--tee without --log-dir: the output stays on the console (torchrun "
                                "writes it to a new temporary folder); give --log-dir DIR for DIR/RUN_ID/attempt_N/"
                                "LOCAL_RANK/stdout.log and stderr.log");
  }
}

/// torchrun exits 1 on every failure once its agent runs (a worker's ChildFailedError, a signal's SignalException,
/// a lost rendezvous: all raised out of its @record main) and 2 on a usage error. In torchrun's form taehv-run does
/// the same, so a script that tests for torchrun's codes keeps working; its own code (the failing worker's, 75 for a
/// lost node, 128+N for a signal: docs/launching.md) is named in one line. With `--` or a sub-command, its own codes.
int torchrunExitCode(const Cli& cli, int code) {
  if (!cli.torchrun().command || code == 0 || code == 1 || code == kUsageError) return code;
  cli.log(LogLevel::kInfo, "exit 1 as torchrun exits on a failure (taehv-run's own exit code: " + std::to_string(code) +
                               "; give the command after -- to keep it)");
  return 1;
}

/// torchrun's warning when it sets OMP_NUM_THREADS for the workers (taehv-run's value: cpu cores / local workers).
void warnOmpThreads(const Cli& cli, const NodeDescriptor& node) {
  if (envValue(cli.env(), "OMP_NUM_THREADS") || *node.nproc_per_node.value <= 1) return;
  const int threads = std::max(1, *node.cpu_cores.value / *node.nproc_per_node.value);
  cli.log(LogLevel::kWarn, "setting OMP_NUM_THREADS=" + std::to_string(threads) + " for each worker (" +
                               std::to_string(*node.cpu_cores.value) + " cpu cores / " +
                               std::to_string(*node.nproc_per_node.value) + " local workers) to avoid overloading "
                               "the system; set OMP_NUM_THREADS to tune it for your application");
}

Status checkLaunchOptions(const Cli& cli, const po::variables_map& vm, const ResolvedLaunch& r) {
  if (r.backend_takes_over) return {cli.jobFlags(vm).error};
  return {launchSettings(vm, r.node).error};
}

int runLaunch(Cli& cli) {
  po::variables_map vm;
  if (auto done = cli.parse(po::options_description(), vm)) return *done;
  // Before anything else, and whoever starts the workers (this node, or a backend that takes over).
  const Checked<std::chrono::milliseconds> grace = shutdownGrace(vm);
  if (!grace.ok()) {
    cli.log(LogLevel::kError, grace.error);
    return kUsageError;
  }
  if (const Checked<std::chrono::milliseconds> hang = hangTimeout(vm); !hang.ok()) {
    cli.log(LogLevel::kError, hang.error);
    return kUsageError;
  }
  auto resolved = cli.resolve(vm, /*plan_when_taken_over=*/false);
  if (!resolved.ok()) {
    cli.log(LogLevel::kError, resolved.error);
    return kUsageError;
  }
  ResolvedLaunch& r = resolved.value;
  if (r.backend_takes_over) {
    Checked<JobFlags> flags = cli.jobFlags(vm);
    if (!flags.ok()) {
      cli.log(LogLevel::kError, flags.error);
      return kUsageError;
    }
    JobRequest job;
    job.request = r.request;
    job.flags = flags.value;
    job.launcher_args = cli.launcherArgs();
    job.command = cli.command();
    return r.plugin->backend->launch(cli.host(), job);
  }
  // Checked after a take-over: a backend that starts the job elsewhere needs no local trainer.
  Checked<std::vector<std::string>> worker = cli.workerCommand();
  if (!worker.ok()) {
    cli.log(LogLevel::kError, worker.error);
    return kUsageError;
  }
  std::vector<std::string>& command = worker.value;
  if (Status sized = applySizing(vm, cli.env(), r.node); !sized.ok()) {
    cli.log(LogLevel::kError, sized.error);  // before anything starts
    return kUsageError;
  }
  Checked<LaunchSettings> checked = launchSettings(vm, r.node);
  if (!checked.ok()) {
    cli.log(LogLevel::kError, checked.error);
    return kUsageError;
  }
  if (!r.node.profile.reason.empty()) cli.log(LogLevel::kInfo, "profile: " + r.node.profile.reason);
  insertProfileArgs(r.node, command);
  LaunchSettings& settings = checked.value;
  settings.command = command;
  torchrunStreamLogs(cli, r.node, settings);
  warnOmpThreads(cli, r.node);
  auto group = planGroup(r.node, groupFlags(vm), cli.env());
  if (!group.ok()) {
    cli.log(LogLevel::kError, group.error);
    return kUsageError;
  }
  settings.group = group.value;
  const int code = launchNode(r.node, settings, cli.env(), [&cli](LogLevel l, const std::string& m) { cli.log(l, m); });
  return torchrunExitCode(cli, code);
}

}  // namespace taehv
