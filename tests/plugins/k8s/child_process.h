// Test helper: runs a real child process with exactly the environment given (nothing inherited), its output in
// files, and a deadline after which it is killed (by its own process group id, never by name).
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "plugin_host.h"

namespace taehv::testing {

class ChildProcess {
 public:
  /// Starts argv[0] (looked up on env's PATH by execvpe semantics via posix_spawnp is not used: argv[0] must be
  /// a path) with `env` only; stdout/stderr go to `out_prefix`.out / .err.
  ChildProcess(const std::vector<std::string>& argv, const Env& env, const std::string& out_prefix)
      : out_(out_prefix + ".out"), err_(out_prefix + ".err") {
    std::vector<std::string> env_strings;
    for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    std::vector<char*> c_argv, c_env;
    std::vector<std::string> args = argv;
    for (auto& a : args) c_argv.push_back(a.data());
    c_argv.push_back(nullptr);
    for (auto& e : env_strings) c_env.push_back(e.data());
    c_env.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);  // own group: the deadline kill reaches its workers
    posix_spawnattr_setpgroup(&attr, 0);
    if (posix_spawn(&pid_, args[0].c_str(), &actions, &attr, c_argv.data(), c_env.data()) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }

  ~ChildProcess() {
    if (pid_ > 0 && !done_) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

  /// True while the child has not exited (reaps it when it has).
  bool running() {
    if (done_ || pid_ <= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      done_ = true;
      status_ = status;
      return false;
    }
    return true;
  }

  /// Waits up to `limit`; kills the group past it. Returns the exit code, 128+signal, or -1 if it had to be killed.
  int wait(std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (running()) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(-pid_, SIGKILL);
        waitpid(pid_, &status_, 0);
        done_ = true;
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (pid_ <= 0) return -1;
    if (WIFEXITED(status_)) return WEXITSTATUS(status_);
    return 128 + WTERMSIG(status_);
  }

  std::string out() const { return readFile(out_); }
  std::string err() const { return readFile(err_); }

 private:
  pid_t pid_ = -1;
  bool done_ = false;
  int status_ = 0;
  std::string out_, err_;
};

}  // namespace taehv::testing
