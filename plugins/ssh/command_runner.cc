#include "command_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace taehv::ssh {
namespace {

struct Running {
  pid_t pid = -1;
  int out_fd = -1;
  int err_fd = -1;
  bool exited = false;
  int status = 0;
};

void closeFd(int* fd) {
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
}

}  // namespace

std::string findInPath(const std::string& name, const std::map<std::string, std::string>& env) {
  if (name.find('/') != std::string::npos) return name;
  const auto it = env.find("PATH");
  const std::string path = it == env.end() ? std::string("/usr/local/bin:/usr/bin:/bin") : it->second;
  std::size_t start = 0;
  while (start <= path.size()) {
    const auto colon = path.find(':', start);
    std::string dir = path.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + name;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return {};
}

std::vector<Captured> ProcessCommandRunner::runAll(const std::vector<std::vector<std::string>>& argvs,
                                                   const std::map<std::string, std::string>& env,
                                                   std::chrono::milliseconds timeout) {
  std::vector<Captured> results(argvs.size());
  std::vector<Running> running(argvs.size());
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  for (std::size_t i = 0; i < argvs.size(); ++i) {
    std::vector<std::string> args = argvs[i];
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int out_pipe[2];
    int err_pipe[2];
    int exec_pipe[2];  // CLOEXEC: closes on a successful exec, carries errno otherwise
    if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
      results[i].spawn_error = std::strerror(errno);
      continue;
    }
    if (::pipe2(err_pipe, O_CLOEXEC) != 0 || ::pipe2(exec_pipe, O_CLOEXEC) != 0) {
      results[i].spawn_error = std::strerror(errno);
      ::close(out_pipe[0]);
      ::close(out_pipe[1]);
      continue;
    }
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
      // Child: only async-signal-safe calls until exec.
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      const int devnull = ::open("/dev/null", O_RDONLY);
      if (devnull >= 0) ::dup2(devnull, 0);
      ::dup2(out_pipe[1], 1);
      ::dup2(err_pipe[1], 2);
      ::execve(argv[0], argv.data(), envp.data());
      const int e = errno;
      [[maybe_unused]] const auto n = ::write(exec_pipe[1], &e, sizeof e);
      ::_exit(127);
    }
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    ::close(exec_pipe[1]);
    if (pid < 0) {
      results[i].spawn_error = std::strerror(errno);
      ::close(out_pipe[0]);
      ::close(err_pipe[0]);
      ::close(exec_pipe[0]);
      continue;
    }
    int e = 0;
    ssize_t n;
    do {
      n = ::read(exec_pipe[0], &e, sizeof e);
    } while (n < 0 && errno == EINTR);
    ::close(exec_pipe[0]);
    running[i].pid = pid;
    running[i].out_fd = out_pipe[0];
    running[i].err_fd = err_pipe[0];
    if (n == static_cast<ssize_t>(sizeof e)) {
      results[i].spawn_error = argvs[i][0] + ": " + std::strerror(e);
    }
  }

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool killed = false;
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<std::size_t, int>> owners;  // (index, 1=out 2=err)
    for (std::size_t i = 0; i < running.size(); ++i) {
      if (running[i].out_fd >= 0) {
        fds.push_back({running[i].out_fd, POLLIN, 0});
        owners.emplace_back(i, 1);
      }
      if (running[i].err_fd >= 0) {
        fds.push_back({running[i].err_fd, POLLIN, 0});
        owners.emplace_back(i, 2);
      }
    }
    if (fds.empty()) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 && !killed) {
      // Deadline: kill every command still holding its pipes open, then drain what they wrote.
      for (std::size_t i = 0; i < running.size(); ++i) {
        if (running[i].pid > 0 && (running[i].out_fd >= 0 || running[i].err_fd >= 0)) {
          results[i].timed_out = true;
          ::kill(-running[i].pid, SIGKILL);
        }
      }
      killed = true;
    }
    const int wait_ms = killed ? 1000 : static_cast<int>(std::max<long long>(left.count(), 1));
    const int rc = ::poll(fds.data(), fds.size(), wait_ms);
    if (rc < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (rc == 0 && killed) {
      // Something outside the group (a grandchild that setsid'd) holds a pipe: give up on it.
      for (auto& r : running) {
        closeFd(&r.out_fd);
        closeFd(&r.err_fd);
      }
      break;
    }
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      auto [i, which] = owners[k];
      char buf[4096];
      const ssize_t got = ::read(fds[k].fd, buf, sizeof buf);
      if (got > 0) {
        (which == 1 ? results[i].out : results[i].err).append(buf, static_cast<std::size_t>(got));
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        closeFd(which == 1 ? &running[i].out_fd : &running[i].err_fd);
      }
    }
  }
  for (std::size_t i = 0; i < running.size(); ++i) {
    if (running[i].pid <= 0) continue;
    // The pipes are closed, so the command has exited or is about to; a command that closed its output but
    // lives on past the deadline is killed.
    int status = 0;
    pid_t got;
    for (;;) {
      got = ::waitpid(running[i].pid, &status, killed ? 0 : WNOHANG);
      if (got < 0 && errno == EINTR) continue;
      if (got == 0) {
        if (std::chrono::steady_clock::now() >= deadline) {
          results[i].timed_out = true;
          ::kill(-running[i].pid, SIGKILL);
          killed = true;
        } else {
          ::usleep(10000);
        }
        continue;
      }
      break;
    }
    if (got == running[i].pid) {
      if (WIFEXITED(status)) results[i].exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) results[i].signal = WTERMSIG(status);
    }
  }
  return results;
}

}  // namespace taehv::ssh
