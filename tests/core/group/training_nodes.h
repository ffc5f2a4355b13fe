// The multi-node training tests of the node group (etcd_train_test, etcd_node_local_test, netns/etcd_netns_test,
// netns/elastic_netns_test): one node of a loopback test (a real taehv-run in its own process group, its output in a
// log file, the job token and Gloo's interface in its environment), and waiting until the nodes' training has saved
// a checkpoint, failing at once when a node ends first.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace taehv::test {

/// The whole file, "" when it cannot be read (a node's log, for a failure message).
inline std::string nodeLog(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

/// Waits until `dir`/elastic/checkpoint-`step`/state.json exists, at most `bound`, polling `nodes` (each with
/// poll(): true once it ended, exit_status and log, its log file) every 100 ms; then node 0's log must say the job
/// trained 4 ranks on Gloo. Fails the test (fatally: call it through ASSERT_NO_FATAL_FAILURE) when a node ended
/// first, with that node's log, or when time ran out, with node 0's.
template <typename Nodes>
void waitForCheckpoint(Nodes& nodes, const std::string& dir, int step, std::chrono::seconds bound) {
  const auto end = std::chrono::steady_clock::now() + bound;
  const std::string state = dir + "/elastic/checkpoint-" + std::to_string(step) + "/state.json";
  while (!std::filesystem::exists(state)) {
    for (auto& n : nodes) {
      ASSERT_FALSE(n.poll()) << "a node ended (exit " << n.exit_status << ") before step " << step << ":\n"
                             << nodeLog(n.log);
    }
    ASSERT_LT(std::chrono::steady_clock::now(), end)
        << "training did not reach step " << step << ":\n" << nodeLog(nodes[0].log);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const std::string log0 = nodeLog(nodes[0].log);
  ASSERT_NE(log0.find("4 rank(s), backend gloo"), std::string::npos) << log0;
}

/// One node of a loopback training test (EtcdTrain, EtcdNodeLocal).
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
