// The one logger of taehv-run and taehv-train (spdlog underneath; no spdlog type crosses this header, so that
// libtorch's bundled fmt and the system's never meet in one translation unit).
//
// Every message has one shape, on stderr:
//   [node N rank R local L] PROGRAM: LEVEL: MESSAGE
// where the bracket names where the process sits in a job, from the variables the launcher gives each worker
// (GROUP_RANK, RANK, LOCAL_RANK as taehv-run and torchrun set them; only those that are set, and no bracket at all
// when none is: a program run alone, or taehv-run itself), and LEVEL is debug, info, warning or error.
// e.g. "taehv-run: error: unknown option '--nnode' (did you mean '--nnodes'?)",
//      "[node 0 rank 1 local 1] taehv-train: error: data: ... does not exist".
//
// What a command outputs for people and scripts to read as data (a training run's report and progress line, the
// effective config, a result line) is not a message: `report` writes it to stdout exactly as given.
//
// Thread-safe: the trainer's loader and watcher threads log too.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "taehv/plugin_api.h"  // LogLevel

namespace taehv::log {

/// Where this process sits in a job, as the launcher's environment says; each part absent when its variable is
/// unset or not a whole number >= 0.
struct Place {
  std::optional<int> node;        ///< GROUP_RANK: the node's rank
  std::optional<int> rank;        ///< RANK: the process's global rank
  std::optional<int> local_rank;  ///< LOCAL_RANK: its rank on its node

  /// Reads GROUP_RANK, RANK and LOCAL_RANK from `env` (the process's: processEnvironment() in taehv/env.h).
  static Place fromEnvironment(const Env& env);
};

/// What a message starts with: "[node 0 rank 1 local 1] taehv-train: " (the bracket only for the parts `place`
/// has), or "taehv-run: " alone.
std::string prefix(const std::string& program, const Place& place);

/// Names the program in every later message, with `place`; messages below info are hidden (setVerbose shows
/// them). Call once from main, before any thread logs; calling it again renames (taehv-train names the sub-command
/// it runs). A message written before any setup names the running executable.
void setup(const std::string& program, const Place& place);

/// Shows (true) or hides (false, the default) debug messages.
void setVerbose(bool on);

/// One message, as above; `message` may hold newlines (each line is written as given, after one prefix).
void write(LogLevel level, const std::string& message);
inline void debug(const std::string& message) { write(LogLevel::kDebug, message); }
inline void info(const std::string& message) { write(LogLevel::kInfo, message); }
inline void warn(const std::string& message) { write(LogLevel::kWarn, message); }
inline void error(const std::string& message) { write(LogLevel::kError, message); }

/// printf's formatting into a string, for messages and report lines with fixed-point figures:
/// format("step %lld: %.3f s", 3LL, 0.25) -> "step 3: 0.250 s".
std::string format(const char* format, ...) __attribute__((format(printf, 1, 2)));

/// Where `print` writes.
enum class Stream { kStdout, kStderr };

/// Text a command outputs, exactly as given (no prefix, no newline added), flushed: help text, the effective
/// config, JSON for scripts, a progress bar's carriage-return updates. Safe beside `write` from other threads.
void print(Stream stream, const std::string& text);

/// One line of a command's output on stdout (`line` and a newline): a training run's report and progress lines,
/// the result lines scripts parse (their formats are kept as they are, without a prefix).
inline void report(const std::string& line) { print(Stream::kStdout, line + "\n"); }

}  // namespace taehv::log
