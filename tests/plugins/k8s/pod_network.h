// Test helper: a stand-in for a cluster's pod network on one machine, so that simulated pods see exactly the
// environment a cluster gives them, master DNS name and port included. A private network and mount namespace (a
// holder process keeps them alive) has its loopback device up, pod 0's address kPodIp on it, and an /etc/hosts
// (bind-mounted over the real one, inside the namespace only) that resolves the given headless-Service names to it,
// as cluster DNS would. Pods are started in it with nsenter; nothing outside sees the names or the ports, so a test
// may use the platform's fixed port (29500) while other tests run. Needs root (unshare --net) and util-linux.
#pragma once

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "child_process.h"
#include "plugin_host.h"

namespace taehv::testing {

class PodNetwork {
 public:
  static constexpr const char* kPodIp = "10.77.0.1";

  /// Sets the namespace up; `names` resolve to kPodIp inside it. ok() says whether it worked, error() why not.
  PodNetwork(const std::string& dir, const std::vector<std::string>& names) {
    if (geteuid() != 0) {
      error_ = "needs root for a private network namespace (unshare --net)";
      return;
    }
    std::string hosts = "127.0.0.1 localhost\n";
    for (const auto& n : names) hosts += std::string(kPodIp) + " " + n + "\n";
    writeFile(dir + "/hosts", hosts);
    const std::string ready = dir + "/netns-ready";
    const std::string script = "ip link set lo up && ip addr add " + std::string(kPodIp) +
                               "/32 dev lo && mount --bind " + dir + "/hosts /etc/hosts && touch " + ready +
                               " && exec sleep 600";
    holder_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{"/usr/bin/unshare", "--net", "--mount", "--propagation", "private", "--", "/bin/sh",
                                 "-c", script},
        Env{{"PATH", "/usr/sbin:/usr/bin:/sbin:/bin"}}, dir + "/netns");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!std::filesystem::exists(ready) && holder_->running() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!std::filesystem::exists(ready)) error_ = "the pod network namespace did not come up: " + holder_->err();
  }

  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  /// `argv` run inside the namespace (nsenter execs it: the child's pid is argv[0]'s).
  std::vector<std::string> inside(const std::vector<std::string>& argv) const {
    std::vector<std::string> out = {"/usr/bin/nsenter", "-t", std::to_string(holder_->pid()), "-n", "-m", "--"};
    out.insert(out.end(), argv.begin(), argv.end());
    return out;
  }

 private:
  std::unique_ptr<ChildProcess> holder_;  // killed (with its group) when the network goes
  std::string error_;
};

}  // namespace taehv::testing
