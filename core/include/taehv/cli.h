// The taehv-run command line:
//
//   taehv-run [--backend NAME|auto|local] [--plugin-dir D]... [launch options] [-- command...]
//   taehv-run describe [--json] [launch options] [-- command...]
//   taehv-run plugins [--json]
//   taehv-run doctor [--output-dir DIR] [--data PATH] [--connect-timeout SECONDS] [launch options] [-- command...]
//   taehv-run --backend NAME <backend sub-command> ARGS...
//   taehv-run --version | --help
//
// Sub-commands are a table (subCommands()); a backend's own sub-commands (Backend::commands()) come after it.
// Exit codes: the job's exit code when a job ran; 2 for usage, configuration and plugin errors.
#pragma once

#include <boost/program_options.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "taehv/backend_registry.h"
#include "taehv/command_line.h"
#include "taehv/descriptor.h"
#include "taehv/launch.h"
#include "taehv/plugin_api.h"
#include "taehv/plugin_loader.h"
#include "taehv/torchrun_compat.h"

namespace taehv {

/// A node ready to run: the chosen backend (nullptr = local mode) and the resolved descriptor.
struct ResolvedLaunch {
  LoadedPlugin* plugin = nullptr;
  std::string detection;  ///< why auto-detection chose the backend; "" when not auto
  PlanRequest request;
  NodeDescriptor node;
  bool backend_takes_over = false;  ///< Backend::takesOverLaunch() said yes: hand it the whole job
};

/// One taehv-run invocation: its arguments, environment, loaded plugins and logging.
class Cli {
 public:
  /// `args` excludes argv[0]; `self_path` is the absolute path of taehv-run.
  Cli(std::vector<std::string> args, Env env, std::string self_path);

  /// Runs the invocation and returns the process exit code.
  int run();

  // ---- for sub-commands ----
  /// The arguments of this sub-command (options before and after its name), without the part after `--`.
  const std::vector<std::string>& args() const { return args_; }
  /// The worker command after `--` (empty when none was given).
  const std::vector<std::string>& command() const { return command_; }
  const Env& env() const { return env_; }
  const HostContext& host() const { return host_; }
  void log(LogLevel level, const std::string& message) const;

  /// Parses args() with the launch options, the backend options and `extra`. Returns nullopt to go on, or the
  /// code to exit with now: kUsageError after one error line, 0 after --help/-h printed the sub-command's usage
  /// and options. Use: `if (auto done = cli.parse(extra, vm)) return *done;`
  std::optional<int> parse(const boost::program_options::options_description& extra,
                           boost::program_options::variables_map& vm);

  /// Chooses the backend, asks it for this node's plan and resolves the node descriptor from `vm`. When the
  /// backend takes over the launch and `plan_when_taken_over` is false, stops before planning (node unset).
  Checked<ResolvedLaunch> resolve(const boost::program_options::variables_map& vm, bool plan_when_taken_over = true);

  /// The worker command: what followed `--`, else taehv-train beside taehv-run; fails when neither.
  Checked<std::vector<std::string>> workerCommand() const;

  /// Every plugin on the search path, loaded (errors listed, not fatal).
  std::vector<LoadedPlugin*> allPlugins(std::vector<std::string>& errors);

  /// Launch options from `vm` as the user typed them, for every node's taehv-run (JobRequest::launcher_args):
  /// those that place a node in the job excepted.
  std::vector<std::string> launcherArgs() const { return launcher_args_; }
  /// The command line read as torchrun's (torchrun_compat.h): role, log streams, notes.
  const TorchrunLine& torchrun() const { return torchrun_; }

  /// The launch flags of `vm`, typed and checked, for a backend that takes over the launch (JobRequest::flags).
  Checked<JobFlags> jobFlags(const boost::program_options::variables_map& vm) const;

 private:
  boost::program_options::options_description launchOptions() const;
  boost::program_options::options_description backendOptions() const;
  int dispatch();
  /// Reads raw_args_ as torchrun's command line with the options of `table`; nullopt, or the exit code.
  std::optional<int> readTorchrun(const boost::program_options::options_description& table);
  /// What readTorchrunLine needs: `table`'s options (it must outlive the context), the sub-command names (the
  /// loaded backends' too when `with_backend_commands`).
  TorchrunContext torchrunContext(const boost::program_options::options_description& table,
                                  bool with_backend_commands) const;
  // The steps of resolve(); each fills its part of `r` or fails with the error that ends it.
  Status chooseBackend(const LaunchFlags& flags, ResolvedLaunch& r, std::string& passed_over);
  Status backendRequest(const boost::program_options::variables_map& vm, ResolvedLaunch& r) const;
  Status planNode(const LaunchFlags& flags, bool plan_when_taken_over, ResolvedLaunch& r) const;

  std::vector<std::string> raw_args_;  // everything before `--`
  std::vector<std::string> args_;      // raw_args_ without the sub-command name
  const struct SubCommand* sub_command_ = nullptr;  // the built-in sub-command running, nullptr = launch
  std::vector<std::string> command_;
  bool has_separator_ = false;
  Env env_;
  std::string self_path_;
  HostContext host_;
  std::string backend_ = "auto";
  std::vector<std::string> plugin_dirs_;
  BackendRegistry backends_;     // the plugins loaded for this invocation's backend choice
  bool backend_loaded_ = false;  // backends_.load() succeeded (always for auto and local)
  std::vector<std::string> launcher_args_;
  TorchrunLine torchrun_;
};

/// A built-in sub-command.
struct SubCommand {
  std::string name;
  std::string summary;
  std::function<int(Cli&)> run;
};

/// --shutdown-grace from `vm` (its default when not given), or why it is refused (outside 0..86400 seconds).
Checked<std::chrono::milliseconds> shutdownGrace(const boost::program_options::variables_map& vm);

/// --hang-timeout from `vm` (process::kDefaultHangFloor when not given; 0 = no hang detection), or why it is refused
/// (not 0 and outside kMinHangTimeout..kMaxHangTimeout).
Checked<std::chrono::milliseconds> hangTimeout(const boost::program_options::variables_map& vm);
/// --hang-timeout's range besides 0: under 1 s every pause would be a hang; over a week it is off in all but name.
inline constexpr double kMinHangTimeout = 1;
inline constexpr double kMaxHangTimeout = 7 * 86400;

/// The built-in sub-commands, in help order.
const std::vector<SubCommand>& subCommands();

/// Builds a Cli from main()'s arguments and the real environment and runs it.
int runTaehvRun(int argc, char** argv);

}  // namespace taehv
