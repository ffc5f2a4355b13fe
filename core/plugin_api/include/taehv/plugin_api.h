// The taehv-run backend plugin ABI, version 3 (1 -> 2: Sourced carries an Origin beside its text; NodePlan gains
// gpu_indices, the scheduler's GPUs, and node_nprocs, every node's process count. 2 -> 3: a sub-command declares its
// options in CommandSpec and runCommand gets them parsed by the host (CommandArgs); JobRequest carries the launch
// flags typed and checked (JobFlags), so that no plugin reads the command line).
//
// A backend plugin is a shared library that maps one platform's environment (SLURM, Kubernetes, PAI, an SSH
// hostfile, ...) to the plan of one node: how many nodes, which one this is, how many workers it runs and where
// the master is, each value with the place it came from. It exports exactly two symbols:
//
//   extern "C" const taehv_plugin_info_t* taehv_plugin_info();     // stable forever; api_version comes first
//   extern "C" taehv::Backend*          taehv_plugin_create_v3(); // factory for API version 3
//
// TAEHV_DEFINE_PLUGIN below writes both. The loader reads the info first and calls the factory only when
// info->api_version == taehv::kPluginApiVersion. Plugins are loaded once and never unloaded, so objects they
// create may live as long as the process.
//
// Rules across this boundary: only standard-library types (plugins and taehv-run must be built with the same
// C++ standard library, as every Debian package is), and no exception crosses it: expected failures are
// values (PlanResult::error, exit codes) with a message a user can act on. The host owns logging.
// guardPluginCall below is the one guard of the boundary: TAEHV_DEFINE_PLUGIN runs every method of the backend
// under it (GuardedBackend), and the host runs every call into a plugin under it too (a plugin that throws
// anyway is reported by name and taehv-run exits with code 2).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "taehv/checked.h"

#define TAEHV_PLUGIN_VISIBLE __attribute__((visibility("default")))

extern "C" {
/// Describes a plugin. Layout is frozen: later API versions may only append fields.
struct taehv_plugin_info_t {
  std::uint32_t api_version;   ///< the taehv::kPluginApiVersion the plugin was built against
  const char* name;            ///< backend name used with --backend, e.g. "slurm"
  const char* plugin_version;  ///< the plugin's own version, e.g. "1.0.0"
  const char* description;     ///< one line for `taehv-run plugins`
};
}

namespace taehv {

/// Version of this ABI. Bump on any change to the classes below that is not purely additive at the end.
inline constexpr std::uint32_t kPluginApiVersion = 3;

/// torchrun's default rendezvous port: what the host uses when neither a flag, the backend's plan nor PET_*
/// names one, and what a backend renders into a job spec that names none.
inline constexpr int kDefaultMasterPort = 29500;

/// Names of the exported entry symbols.
inline constexpr const char* kPluginInfoSymbol = "taehv_plugin_info";
inline constexpr const char* kPluginFactorySymbol = "taehv_plugin_create_v3";

/// Where a value came from, for code that acts on it (Sourced::source says it, with details, for people).
enum class Origin : std::uint8_t {
  kUnset,    ///< not said (a backend's own values: the host marks them kBackend when it takes them)
  kFlag,     ///< a taehv-run command-line flag
  kBackend,  ///< the backend plugin's plan, read from its platform's environment
  kPetEnv,   ///< a PET_* variable (torchrun's flags as environment variables)
  kDefault,  ///< taehv-run's built-in default: nothing else gave one
  kRule,     ///< derived from other values by a rule (rank = node_rank * nproc_per_node + local_rank, ...)
  kProfile,  ///< a sizing profile chosen for the job's shape
};

/// A value together with where it came from. `source` reads like "env SLURM_NNODES",
/// "flag --nnodes", "env PET_NNODES", "rule: first host of SLURM_JOB_NODELIST n[1-3]" or "default";
/// `origin` is the kind of that place, which code tests (never the text).
template <typename T>
struct Sourced {
  std::optional<T> value;
  std::string source;
  Origin origin = Origin::kUnset;

  bool has() const { return value.has_value(); }
  void set(T v, std::string from, Origin kind = Origin::kUnset) {
    value = std::move(v);
    source = std::move(from);
    origin = kind;
  }
};

/// Snapshot of the process environment (name -> value). Tests hand a backend a fake one.
using Env = std::map<std::string, std::string>;

enum class LogLevel { kDebug, kInfo, kWarn, kError };

/// What the host gives a backend. The host owns logging: write through `log`, not to stdout/stderr.
struct HostContext {
  std::function<void(LogLevel, const std::string&)> log;
  Env env;                ///< the environment to read (never getenv() directly)
  std::string self_path;  ///< absolute path of the running taehv-run
  std::string version;    ///< taehv-run's version, e.g. "0.1.0"
};

/// How sure a backend is that the environment is its platform. 0 = not mine; 100 = certain.
struct Detection {
  int confidence = 0;
  std::string reason;  ///< e.g. "SLURM_JOB_ID=42 and SLURM_PROCID set"
};

/// Values of declared options as the host parsed them, by name without dashes: every value given, in order (one
/// unless the option is repeatable); a switch maps to {"true"}. An option not given has no entry.
using OptionValues = std::map<std::string, std::vector<std::string>>;

/// The value of option `name` in `values` (the last one of a repeatable option), or nullptr when it was not given.
inline const std::string* optionValue(const OptionValues& values, const std::string& name) {
  const auto it = values.find(name);
  return it == values.end() || it->second.empty() ? nullptr : &it->second.back();
}

/// One option a backend declares: a launch option (Backend::options(), e.g. ssh's --hostfile) or an option of one
/// of its sub-commands (CommandSpec::options). The host parses it by the rules of its own options: `--name=value`
/// and `--name value`, a second occurrence refused unless `repeatable`, an unknown name answered with the close
/// declared names. Values reach the backend as text; the backend checks what they mean.
struct OptionSpec {
  OptionSpec() = default;
  OptionSpec(std::string name, std::string value_name, std::string help, bool repeatable = false,
             char short_name = 0)
      : name(std::move(name)),
        value_name(std::move(value_name)),
        help(std::move(help)),
        repeatable(repeatable),
        short_name(short_name) {}

  std::string name;        ///< without dashes: "hostfile"
  std::string value_name;  ///< e.g. "FILE"; empty = a switch without a value
  std::string help;
  bool repeatable = false;
  char short_name = 0;  ///< sub-command options only: a one-letter alias, 'N' for -N; 0 = none
};

/// What a sub-command takes besides its options.
enum class Operands : std::uint8_t {
  kNone,     ///< options only
  kWords,    ///< words among the options (host names, lists): CommandArgs::words
  kCommand,  ///< a worker command after `--` (optional; `--` followed by nothing is refused): CommandArgs::command
};

/// A sub-command a backend adds to the CLI (`taehv-run --backend NAME COMMAND ...`). The host parses the arguments
/// after COMMAND by this declaration, answers `--help`/`-h` from it (usage line, summary, options, `help`) and
/// calls Backend::runCommand only with arguments that parsed.
struct CommandSpec {
  CommandSpec() = default;
  CommandSpec(std::string name, std::string summary, std::vector<OptionSpec> options = {},
              Operands operands = Operands::kNone, std::string operands_name = "", std::string help = "")
      : name(std::move(name)),
        summary(std::move(summary)),
        options(std::move(options)),
        operands(operands),
        operands_name(std::move(operands_name)),
        help(std::move(help)) {}

  std::string name;
  std::string summary;  ///< one line for `taehv-run --help`
  std::vector<OptionSpec> options;
  Operands operands = Operands::kNone;
  std::string operands_name;  ///< kWords: how the usage line names them, e.g. "LIST..."
  std::string help;           ///< more lines for `--help`, printed after the options (what the command does)
};

/// A sub-command's arguments, parsed by the host from its CommandSpec.
struct CommandArgs {
  OptionValues options;               ///< the declared options given
  std::vector<std::string> words;     ///< Operands::kWords: the words, in order
  std::vector<std::string> command;   ///< Operands::kCommand: what followed `--`; empty = no `--`
};

/// What the user asked for, as far as a backend needs to know.
struct PlanRequest {
  /// This backend's own options (declared by options()).
  OptionValues options;
  /// The user's --nproc-per-node, if given as a number (a backend may need it to interpret its platform).
  std::optional<int> nproc_per_node;
};

/// The plan of one node, as far as the platform defines it. Anything left unset is filled by the host from
/// flags, torchrun's PET_* variables and defaults; a value the user gave as a flag overrides the backend's.
struct NodePlan {
  Sourced<int> nnodes;          ///< number of nodes (never processes)
  Sourced<int> node_rank;       ///< 0 .. nnodes-1
  Sourced<int> nproc_per_node;  ///< workers on this node
  Sourced<std::string> master_addr;
  Sourced<int> master_port;
  Sourced<std::string> run_id;
  Sourced<int> restart_count;  ///< restarts already done by the platform (e.g. SLURM_RESTART_COUNT)
  Sourced<int> gpus_on_node;   ///< GPUs the platform gave this node, if it says
  /// The physical GPU indices (driver ordinals, as NVML numbers them) a scheduler gave this node's job, when it
  /// says, e.g. "0,3" or "4-6" (SLURM_STEP_GPUS / SLURM_JOB_GPUS). With CUDA_VISIBLE_DEVICES unset, the host's
  /// sizing uses these GPUs only and hands them to the workers itself.
  Sourced<std::string> gpu_indices;

  /// Set to true when this process must become exactly one worker (e.g. SLURM with one task per GPU):
  /// the host then starts nothing and runs the command itself with `rank` and `local_rank` below.
  Sourced<bool> single_worker;
  Sourced<int> rank;
  Sourced<int> local_rank;

  /// Before starting, wait up to this many seconds for master_addr to resolve and master_port to accept
  /// (container platforms start pods in any order). 0 = do not wait. Only nodes other than node 0 wait.
  Sourced<int> master_wait_seconds;

  /// Extra environment for every worker, with provenance (name -> value).
  std::map<std::string, Sourced<std::string>> extra_env;

  /// Free-form lines `taehv-run describe` prints under the plan (how ambiguous values were resolved).
  std::vector<std::string> notes;

  /// Every node's process count in node order, when the platform knows them all (e.g. SLURM's tasks per node);
  /// nodes may differ. Unset: each node knows only its own count (nproc_per_node) and the node group agrees on the
  /// rank offsets at start. Node k's ranks start at the sum of the counts of nodes 0..k-1. (Appended last: the
  /// layout of the fields above is unchanged.)
  Sourced<std::vector<int>> node_nprocs;
};

/// A backend's plan, or one line saying what is wrong and how to fix it (`error`; then `value` is meaningless).
using PlanResult = Checked<NodePlan>;

/// The generic launch flags a backend that starts the whole job needs, as the user gave them and checked by the host
/// (each unset when not given): counts in range, a port 1..65535, --nnodes N or MIN:MAX within the host's limits.
struct JobFlags {
  std::optional<int> nnodes;      ///< --nnodes N, or MAX of --nnodes MIN:MAX
  std::optional<int> min_nnodes;  ///< MIN of --nnodes MIN:MAX (N for a fixed count)
  std::optional<int> node_rank;   ///< --node-rank
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
  std::optional<int> max_restarts;   ///< --max-restarts
  std::optional<int> restart_count;  ///< --restart-count
  bool standalone = false;           ///< --standalone
  bool no_node_group = false;        ///< --no-node-group
  /// --shutdown-grace: after a failure, SIGTERM to SIGKILL of the other workers (0..86400 s).
  std::optional<std::chrono::milliseconds> shutdown_grace;
};

/// A whole-job launch handed to a backend that starts workers on other machines itself (SSH fan-out).
struct JobRequest {
  PlanRequest request;  ///< request.nproc_per_node: --nproc-per-node as a number (unset for auto)
  JobFlags flags;
  /// The user's generic launch options to hand every node's taehv-run unchanged, as typed (e.g. {"--max-restarts",
  /// "1", "--log-dir", "/x"}). Without the flags that place a node in the job (--nnodes, --node-rank,
  /// --nproc-per-node, --master-addr, --master-port, --standalone, --restart-count): those the backend sets per
  /// node from `flags` and its own plan. Backend-specific options are not included.
  std::vector<std::string> launcher_args;
  /// The worker command after `--`; empty = the default trainer.
  std::vector<std::string> command;
};

/// A platform backend. Created once by the factory, used from the main thread only.
class TAEHV_PLUGIN_VISIBLE Backend {
 public:
  virtual ~Backend() = default;

  /// Does `host.env` look like this backend's platform, and how sure is it?
  virtual Detection detect(const HostContext& host) const = 0;

  /// This node's plan from the platform's environment. Contradictions are errors, never guesses.
  virtual PlanResult plan(const HostContext& host, const PlanRequest& request) const = 0;

  /// Extra options this backend accepts on the launch command line.
  virtual std::vector<OptionSpec> options() const { return {}; }

  /// Sub-commands this backend adds (`taehv-run --backend NAME COMMAND ARGS...`), each with its options.
  virtual std::vector<CommandSpec> commands() const { return {}; }

  /// Runs sub-command `name` with its arguments, parsed by the host from commands()' declaration (so they hold
  /// only declared options, and words or a command where the declaration allows them); returns the process exit
  /// code (2 = usage error, e.g. a value the command refuses).
  virtual int runCommand(const HostContext& host, const std::string& name, const CommandArgs& args) {
    (void)name;
    (void)args;
    if (host.log) host.log(LogLevel::kError, "this backend has no sub-commands");
    return 2;
  }

  /// True when this backend starts the whole job itself (on other machines) instead of planning this node.
  virtual bool takesOverLaunch(const HostContext& host, const PlanRequest& request) const {
    (void)host;
    (void)request;
    return false;
  }

  /// Runs the whole job; returns its exit code. Called only when takesOverLaunch() returned true.
  virtual int launch(const HostContext& host, const JobRequest& job) {
    (void)job;
    if (host.log) host.log(LogLevel::kError, "this backend cannot launch jobs itself");
    return 2;
  }
};

/// Returns body(); if it throws, returns on_exception(message) instead, message being the exception's what()
/// (or a note that it was no std::exception). The one guard of the plugin boundary, on both of its sides.
template <typename Body, typename OnException>
auto guardPluginCall(Body&& body, OnException&& on_exception) -> decltype(body()) {
  try {
    return body();
  } catch (const std::exception& e) {
    return on_exception(std::string(e.what()));
  } catch (...) {
    return on_exception(std::string("an exception that is not a std::exception"));
  }
}

/// Backend Impl with every method run under guardPluginCall, so that nothing Impl throws leaves the plugin:
/// plan() then fails with "<name> backend: <what>", runCommand() and launch() log "<name> <command>: <what>" and
/// return 1, detect() logs it and answers confidence 0, takesOverLaunch() logs it and answers false; options()
/// and commands(), which have no logger, write it to stderr and answer none. TAEHV_DEFINE_PLUGIN's factory
/// creates this around the plugin's class.
template <typename Impl>
class GuardedBackend final : public Backend {
 public:
  explicit GuardedBackend(std::string name) : name_(std::move(name)) {}

  Detection detect(const HostContext& host) const override {
    return guardPluginCall([&] { return impl_.detect(host); },
                           [&](const std::string& what) { return logged<Detection>(host, "detect", what); });
  }
  PlanResult plan(const HostContext& host, const PlanRequest& request) const override {
    return guardPluginCall([&] { return impl_.plan(host, request); }, [&](const std::string& what) {
      PlanResult failed;
      failed.error = name_ + " backend: " + what;
      return failed;
    });
  }
  std::vector<OptionSpec> options() const override {
    return guardPluginCall([&] { return impl_.options(); },
                           [&](const std::string& what) { return printed<std::vector<OptionSpec>>("options", what); });
  }
  std::vector<CommandSpec> commands() const override {
    return guardPluginCall([&] { return impl_.commands(); }, [&](const std::string& what) {
      return printed<std::vector<CommandSpec>>("commands", what);
    });
  }
  int runCommand(const HostContext& host, const std::string& name, const CommandArgs& args) override {
    return guardPluginCall([&] { return impl_.runCommand(host, name, args); },
                           [&](const std::string& what) { return logged<int>(host, name, what, 1); });
  }
  bool takesOverLaunch(const HostContext& host, const PlanRequest& request) const override {
    return guardPluginCall([&] { return impl_.takesOverLaunch(host, request); },
                           [&](const std::string& what) { return logged<bool>(host, "takesOverLaunch", what, false); });
  }
  int launch(const HostContext& host, const JobRequest& job) override {
    return guardPluginCall([&] { return impl_.launch(host, job); },
                           [&](const std::string& what) { return logged<int>(host, "launch", what, 1); });
  }

 private:
  template <typename T>
  T logged(const HostContext& host, const std::string& where, const std::string& what, T answer = T()) const {
    if (host.log) host.log(LogLevel::kError, name_ + " " + where + ": " + what);
    return answer;
  }
  template <typename T>
  T printed(const char* where, const std::string& what) const {
    std::fprintf(stderr, "%s backend: %s(): %s\n", name_.c_str(), where, what.c_str());
    return T();
  }

  std::string name_;
  Impl impl_;
};

}  // namespace taehv

/// Defines both entry symbols for backend class CLASS (default-constructible, derived from taehv::Backend, its
/// overrides public). NAME, VERSION and DESCRIPTION are string literals. The factory returns CLASS inside a
/// GuardedBackend, or null when constructing it threw.
#define TAEHV_DEFINE_PLUGIN(CLASS, NAME, VERSION, DESCRIPTION)                                        \
  extern "C" TAEHV_PLUGIN_VISIBLE const taehv_plugin_info_t* taehv_plugin_info() {                      \
    static const taehv_plugin_info_t info{taehv::kPluginApiVersion, NAME, VERSION, DESCRIPTION};        \
    return &info;                                                                                      \
  }                                                                                                    \
  extern "C" TAEHV_PLUGIN_VISIBLE taehv::Backend* taehv_plugin_create_v3() {                          \
    try {                                                                                              \
      return new taehv::GuardedBackend<CLASS>(NAME);                                                   \
    } catch (...) {                                                                                    \
      return nullptr;                                                                                  \
    }                                                                                                  \
  }
