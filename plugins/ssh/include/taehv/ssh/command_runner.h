// Running short commands in parallel and capturing their output, with one deadline for all (the preflight).
// An interface so that the preflight's interpretation is unit-tested without ssh.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "taehv/process/run.h"

namespace taehv::ssh {

/// How one command ended and what it printed (exit_code, signal, timed_out, spawn_error, out, err).
using Captured = process::RunResult;

class CommandRunner {
 public:
  virtual ~CommandRunner() = default;
  /// Runs the argvs (argv[0] an absolute path), at most `max_parallel` at once (process::kAllAtOnce: all),
  /// stdin /dev/null, environment `env`; `timeout` is a deadline for the whole call: what still runs then is
  /// killed (SIGKILL to its process group), what has not started by then never starts (not_started). Results
  /// are in the order of `argvs`.
  virtual std::vector<Captured> runAll(const std::vector<std::vector<std::string>>& argvs,
                                       const std::map<std::string, std::string>& env,
                                       std::chrono::milliseconds timeout, std::size_t max_parallel) = 0;
};

/// The real one: process::runPrograms (one process group per command, output read with poll()).
class ProcessCommandRunner final : public CommandRunner {
 public:
  std::vector<Captured> runAll(const std::vector<std::vector<std::string>>& argvs,
                               const std::map<std::string, std::string>& env,
                               std::chrono::milliseconds timeout, std::size_t max_parallel) override;
};

}  // namespace taehv::ssh
