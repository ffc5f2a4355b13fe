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
  /// Runs every argv at once (argv[0] an absolute path), stdin /dev/null, environment `env`; kills what is
  /// still running after `timeout` (SIGKILL to its process group). Results are in the order of `argvs`.
  virtual std::vector<Captured> runAll(const std::vector<std::vector<std::string>>& argvs,
                                       const std::map<std::string, std::string>& env,
                                       std::chrono::milliseconds timeout) = 0;
};

/// The real one: process::runPrograms (one process group per command, output read with poll()).
class ProcessCommandRunner final : public CommandRunner {
 public:
  std::vector<Captured> runAll(const std::vector<std::vector<std::string>>& argvs,
                               const std::map<std::string, std::string>& env,
                               std::chrono::milliseconds timeout) override;
};

}  // namespace taehv::ssh
