// Running short commands in parallel and capturing their output, with one deadline for all (the preflight).
// An interface so that the preflight's interpretation is unit-tested without ssh.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace taehv::ssh {

/// How one command ended.
struct Captured {
  int exit_code = -1;      ///< valid when neither signal nor timed_out nor spawn_error
  int signal = 0;          ///< terminating signal, 0 if none
  bool timed_out = false;  ///< killed at the deadline
  std::string spawn_error; ///< could not start (e.g. "ssh: No such file or directory")
  std::string out;
  std::string err;
};

class CommandRunner {
 public:
  virtual ~CommandRunner() = default;
  /// Runs every argv at once (argv[0] an absolute path), stdin /dev/null, environment `env`; kills what is
  /// still running after `timeout` (SIGKILL to its process group). Results are in the order of `argvs`.
  virtual std::vector<Captured> runAll(const std::vector<std::vector<std::string>>& argvs,
                                       const std::map<std::string, std::string>& env,
                                       std::chrono::milliseconds timeout) = 0;
};

/// The real one: fork/exec, one process group per command, output read with poll().
class ProcessCommandRunner final : public CommandRunner {
 public:
  std::vector<Captured> runAll(const std::vector<std::vector<std::string>>& argvs,
                               const std::map<std::string, std::string>& env,
                               std::chrono::milliseconds timeout) override;
};

/// Finds `name` in the PATH of `env` (the host's environment, not ours); empty when not found.
/// A name containing '/' is returned as is.
std::string findInPath(const std::string& name, const std::map<std::string, std::string>& env);

}  // namespace taehv::ssh
