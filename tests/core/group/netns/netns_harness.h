// What the network-namespace tests of the node group share: the namespaces ri-h1..N (tests/infra/group/
// netns_nodes.sh) held for a test's life, and one node's taehv-run started inside one of them.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace taehv::netns {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

inline std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

inline std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline int sh(const std::string& command) { return std::system(command.c_str()); }

/// The namespaces, held while the object lives (the script tears them down when our pipe closes).
class Namespaces {
 public:
  explicit Namespaces(int count) {
    int in[2];
    int out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) return;
    const std::string script = env("TAEHV_SOURCE_DIR") + "/tests/infra/group/netns_nodes.sh";
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::execl("/bin/bash", "bash", script.c_str(), "serve", std::to_string(count).c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    stdin_fd_ = in[1];
    std::string got;
    const auto end = Clock::now() + 20s;
    while (got.find("READY") == std::string::npos && Clock::now() < end) {
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
  ~Namespaces() {
    if (stdin_fd_ >= 0) ::close(stdin_fd_);
    if (pid_ > 0) ::waitpid(pid_, nullptr, 0);
  }
  bool ready() const { return ready_; }

 private:
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  bool ready_ = false;
};

/// One node's taehv-run inside a namespace, output to a file.
struct NodeProcess {
  pid_t pid = -1;
  std::string log;
  int exit_status = -1;
  Clock::time_point ended{};

  /// Runs `argv` (taehv-run and its worker command) in namespace ri-h<ns>, output to `log_file`, in its own process
  /// group, with the job token and Gloo's interface set.
  void spawn(int ns, const std::vector<std::string>& argv, const std::string& log_file) {
    log = log_file;
    std::vector<std::string> all = {"nsenter", "--net=/run/netns/ri-h" + std::to_string(ns), "--"};
    all.insert(all.end(), argv.begin(), argv.end());
    pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::setenv("TAEHV_JOB_TOKEN", "netns-test-token-0123456789abcdef", 1);
      ::setenv("GLOO_SOCKET_IFNAME", "eth0", 1);
      std::vector<char*> args;
      for (auto& a : all) args.push_back(a.data());
      args.push_back(nullptr);
      ::execvp("nsenter", args.data());
      ::_exit(127);
    }
  }

  /// Reaps the node if it has ended; true when it has.
  bool poll() {
    if (exit_status >= 0) return true;
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) != pid) return false;
    exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    ended = Clock::now();
    return true;
  }

  void kill() {
    if (exit_status < 0 && pid > 0) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      exit_status = 137;
    }
  }
};

}  // namespace taehv::netns
