// What the network-namespace tests of the node group share: the namespaces ri-h1..N (tests/infra/group/
// netns_nodes.sh) held for a test's life, and one node's taehv-run started inside one of them.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "infra/served_script.h"

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

/// Names and addresses for a test's own namespaces, so that it cannot collide with the suites using ri-h* (the
/// netns_lib.sh variables PFX, BR, NET).
struct NetnsNames {
  std::string prefix = "ri-h";   ///< namespaces <prefix>1..N, their host ends <prefix>N-v
  std::string bridge = "ri-br0";
  std::string net = "10.77.0";   ///< the bridge is <net>.1, namespace i is <net>.<i+1>
};

/// The namespaces, held while the object lives (the script tears them down when our pipe closes).
class Namespaces {
 public:
  explicit Namespaces(int count, const NetnsNames& names = {})
      : script_(env("TAEHV_SOURCE_DIR") + "/tests/infra/group/netns_nodes.sh", {std::to_string(count)}, 20s, "",
                {{"PFX", names.prefix}, {"BR", names.bridge}, {"NET", names.net}}) {}
  bool ready() const { return script_.ready(); }

 private:
  testing::ServedScript script_;
};

/// One node's taehv-run inside a namespace, output to a file.
struct NodeProcess {
  pid_t pid = -1;
  std::string log;
  int exit_status = -1;
  Clock::time_point ended{};
  std::string ns_prefix = "ri-h";  ///< NetnsNames::prefix of the namespaces it runs in

  /// Runs `argv` (taehv-run and its worker command) in namespace <ns_prefix><ns>, output to `log_file`, in its own
  /// process group, with the job token and Gloo's interface set.
  void spawn(int ns, const std::vector<std::string>& argv, const std::string& log_file) {
    log = log_file;
    std::vector<std::string> all = {"nsenter", "--net=/run/netns/" + ns_prefix + std::to_string(ns), "--"};
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
