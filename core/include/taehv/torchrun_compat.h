// torchrun's command line on taehv-run: `taehv-run` in place of `torchrun` in a job script runs unchanged.
//
// PyTorch 2.13's torch/distributed/run.py (get_args_parser) is the reference: every option in both spellings
// (--nproc-per-node / --nproc_per_node, `=` or a space), its PET_* fallback, and the positional training_script with
// its arguments, no `--` needed. readTorchrunLine rewrites such a command line into taehv-run's own: options
// taehv-run has with torchrun's meaning pass through, torchrun's others are mapped onto them (--rdzv-endpoint onto
// --master-addr/--master-port, --rdzv-id onto --run-id, --shutdown-timeout onto --shutdown-grace), accepted with a
// note for --verbose where they mean nothing for exec'd workers (--start-method, --monitor-interval, ...), or refused
// with one line naming the option and why. The worker command is built as torchrun builds it: INTERPRETER -u
// [-m] SCRIPT ARGS..., or SCRIPT ARGS... with --no-python.
//
// The interpreter (torchrun's is its own sys.executable, or PYTHON_EXEC): --python PATH, else PYTHON_EXEC, else
// $VIRTUAL_ENV/bin/python3 of an active virtual environment, else python3 on PATH.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "taehv/checked.h"
#include "taehv/env.h"

namespace taehv {

/// How a taehv-run option (its name without dashes) is written: unknown to taehv-run, a flag, or one with a value.
enum class OptionArity { kUnknown, kFlag, kValue };

/// torchrun's log streams, as --redirects / --tee give them per local rank (torch's Std: 0 none, 1 out, 2 err, 3 both).
enum class LogStreams { kNone = 0, kOut = 1, kErr = 2, kBoth = 3 };

/// What readTorchrunLine needs to know of the host.
struct TorchrunContext {
  Env env;                                            ///< PET_*, PYTHON_EXEC, VIRTUAL_ENV, PATH
  std::function<OptionArity(const std::string&)> arity;  ///< taehv-run's own options, by name without dashes
  std::vector<std::string> sub_commands;              ///< taehv-run's sub-commands (a near miss is one, misspelt)
  /// Whether a backend's sub-command has this name; asked only for a positional without `--` (may call a plugin).
  std::function<bool(const std::string&)> is_backend_command = [](const std::string&) { return false; };
  bool has_separator = false;                         ///< a `--` followed: the worker command is given already
  std::function<int()> free_port;                     ///< a free TCP port (for a c10d endpoint's port 0)
};

/// A torchrun command line read as taehv-run's.
struct TorchrunLine {
  /// taehv-run's own options (torchrun's mapped onto them), then the sub-command and everything after it untouched.
  std::vector<std::string> launcher_args;
  /// The worker command built from the positional training_script; nullopt when none was given.
  std::optional<std::vector<std::string>> command;
  std::optional<std::string> module;  ///< -m MODULE: checked importable before anything starts
  std::optional<std::string> script;  ///< the script (without -m): checked to exist before anything starts
  std::string interpreter;            ///< the Python that runs the script; "" with --no-python
  std::string role = "default";       ///< --role: the workers' ROLE_NAME
  /// --redirects / --tee per local rank (a rank not listed: the `default`); empty: no torchrun log layout.
  std::vector<std::pair<int, LogStreams>> redirects, tees;
  LogStreams redirects_default = LogStreams::kNone, tees_default = LogStreams::kNone;
  /// What was accepted without effect and what was chosen (the interpreter): lines for --verbose.
  std::vector<std::string> notes;
};

/// Reads `args` (everything before `--`) as torchrun's command line; fails with one line naming the torchrun option
/// and what is wrong. Pure: starts nothing, reads the environment only through `context.env`.
Checked<TorchrunLine> readTorchrunLine(const std::vector<std::string>& args, const TorchrunContext& context);

/// Fails with one line when the worker command of `line` cannot start: a script that does not exist, a module the
/// interpreter cannot find (one short run of it: importlib.util.find_spec), a --no-python program not on PATH.
Status checkTorchrunWorker(const TorchrunLine& line, const Env& env);

/// What --redirects / --tee ask of local rank `local_rank`: the streams written to files, and of those the ones
/// also shown on the console.
struct WorkerLogStreams {
  LogStreams files = LogStreams::kNone;
  LogStreams console_too = LogStreams::kNone;
};
WorkerLogStreams workerLogStreams(const TorchrunLine& line, int local_rank);

/// torchrun's folder for one worker's logs: LOG_DIR/RUN_ID/attempt_RESTART/LOCAL_RANK (stdout.log, stderr.log and
/// error.json go in it). The one place this layout is computed; others writing per-worker files there call it.
std::string workerLogFolder(const std::string& log_dir, const std::string& run_id, int restart, int local_rank);

}  // namespace taehv
