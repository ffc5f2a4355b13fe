// The multi-node training tests of the node group (etcd_train_test, netns/etcd_netns_test, netns/elastic_netns_test):
// waiting until the nodes' training has saved a checkpoint, failing at once when a node ends first.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

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

}  // namespace taehv::test
