// A test's hold on an infrastructure recipe run as `bash SCRIPT serve ARGS...` (tests/infra/group/netns_nodes.sh,
// tests/infra/ssh/sshd_hosts.sh): the script brings its namespaces or hosts up, prints READY on stdout, and tears
// them down when its stdin (our pipe) reaches EOF, so even a test that crashes leaves nothing behind.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace taehv::testing {

class ServedScript {
 public:
  /// Starts the script and waits up to `timeout` for READY. `stderr_path` ("" = the test's own stderr) receives
  /// the script's stderr; `env` is set for the script only.
  ServedScript(const std::string& script, const std::vector<std::string>& args, std::chrono::seconds timeout,
               const std::string& stderr_path = "",
               const std::vector<std::pair<std::string, std::string>>& env = {}) {
    int in[2];
    int out[2];
    if (::pipe2(in, O_CLOEXEC) != 0) return;
    if (::pipe2(out, O_CLOEXEC) != 0) {
      ::close(in[0]);
      ::close(in[1]);
      return;
    }
    std::vector<std::string> argv = {"bash", script, "serve"};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      if (!stderr_path.empty()) {
        const int err = ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (err >= 0) ::dup2(err, 2);
      }
      for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
      std::vector<char*> raw;
      for (auto& a : argv) raw.push_back(a.data());
      raw.push_back(nullptr);
      ::execv("/bin/bash", raw.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    stdin_fd_ = in[1];
    std::string got;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (got.find("READY") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd p{out[0], POLLIN, 0};
      if (::poll(&p, 1, 200) <= 0) continue;
      char buf[256];
      const ssize_t n = ::read(out[0], buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, static_cast<std::size_t>(n));
    }
    ::close(out[0]);
    ready_ = got.find("READY") != std::string::npos;
  }

  /// Closes the script's stdin (it tears down) and waits for it: 15 s, then SIGTERM.
  ~ServedScript() {
    if (stdin_fd_ >= 0) ::close(stdin_fd_);
    if (pid_ <= 0) return;
    int status = 0;
    for (int i = 0; i < 300 && ::waitpid(pid_, &status, WNOHANG) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (::waitpid(pid_, &status, WNOHANG) == 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, &status, 0);
    }
  }
  ServedScript(const ServedScript&) = delete;
  ServedScript& operator=(const ServedScript&) = delete;

  bool ready() const { return ready_; }

 private:
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  bool ready_ = false;
};

}  // namespace taehv::testing
