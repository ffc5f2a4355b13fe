// One node of a loopback training test: a real taehv-run started in its own process group with its output in a log
// file, the job token and Gloo's interface (lo) in its environment. Used by EtcdTrain and EtcdNodeLocal.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace taehv::test {

struct TrainNode {
  pid_t pid = -1;
  std::string log;
  int exit_status = -1;  ///< the exit code, 128 + signal when killed; -1 while it runs

  /// Starts `argv` (argv[0] a path) with `token` as TAEHV_JOB_TOKEN, stdout and stderr into `log_file`.
  void spawn(const std::vector<std::string>& argv, const std::string& log_file, const std::string& token) {
    log = log_file;
    exit_status = -1;
    pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::setenv("TAEHV_JOB_TOKEN", token.c_str(), 1);
      ::setenv("GLOO_SOCKET_IFNAME", "lo", 1);
      std::vector<std::string> args = argv;
      std::vector<char*> c;
      for (auto& a : args) c.push_back(a.data());
      c.push_back(nullptr);
      ::execv(c[0], c.data());
      ::_exit(127);
    }
  }
  /// True once it ended (exit_status set).
  bool poll() {
    if (exit_status >= 0) return true;
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) != pid) return false;
    exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return true;
  }
  /// SIGKILLs its process group (taehv-run and its workers) unless it already ended.
  void kill() {
    if (pid > 0 && !poll()) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

}  // namespace taehv::test
