// No single point of failure, on a real network: three network namespaces t34h1..3 (10.234.34.2..4, bridge t34br;
// names of their own, so the test runs beside the ri-h suites), each with one member of ONE 3-member etcd cluster
// and one node's taehv-run training TAEHV on Gloo (taehv-train: node 0 runs 2 ranks, nodes 1 and 2 one each; world
// size 4, global batch 4), `--rdzv-backend etcd --rdzv-endpoint` naming the three members, `--nnodes 2:3`,
// `--max-restarts 1`, no `--master-addr` (each node registers the address of its own connection to etcd), and one
// checkpoint folder all three read (the shared folder).
// - Node 0's link cut (its veth down, so its etcd member is cut off too): nodes 1 and 2 re-form with node 1
//   (10.234.34.3) as the master, resume at 2 ranks and finish with the weights of an uninterrupted 2-rank run resumed
//   from the same checkpoint (ElasticNetns' tolerance, 2e-3 of the last two updates); node 0, on the minority side,
//   stops and says there is no quorum on its side, exit 1, never a hang. Prints the time from the cut to the next
//   training step.
// - One etcd member killed alone (the leader, which every node talks to first): the job does not notice.
// - A node started late (nodes 0 and 1 formed at 2): it joins at the next formation, up to MAX (shell workers).
// Needs root, iproute2, etcd and taehv-train (skipped otherwise, but for etcd: not installed is a failure); slow.
#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <thread>

#include "checkpoint_weights.h"
#include "core/group/training_nodes.h"
#include "infra/built_programs.h"
#include "netns_harness.h"
#include "taehv/group/etcd_client.h"

namespace {

using namespace taehv::netns;
namespace fs = std::filesystem;

const NetnsLayout kLayout{"t34h", "t34br", "10.234.34"};  // a subnet no other suite uses
constexpr int kNodes = 3;
constexpr int kNodeTimeoutS = 5;
constexpr int kGraceS = 3;
constexpr int kSteps = 8;
constexpr int kCutAfterStep = 3;
constexpr int kMasterPort = 29634;  ///< each namespace has its own ports: fixed ones are free
constexpr int kEtcdClientPort = 2379, kEtcdPeerPort = 2380;

/// taehv-train on tiny clips with plain SGD (as ElasticNetns and EtcdTrain), `steps` steps, a checkpoint every
/// `every`, resuming whatever is there.
std::vector<std::string> trainer(const std::string& out, int steps = kSteps, int every = 1) {
  std::vector<std::string> argv = {taehv::testing::builtBinDir() + "/taehv-train"};
  const std::vector<std::string> sets = {
      "data.size=32", "data.frames=4", "train.threads=1", "log.every=1", "log.preview_every=0",
      "checkpoint.export_safetensors=false", "train.steps=" + std::to_string(steps), "output.dir=" + out,
      "train.seed=3", "train.optimizer=sgd", "train.lr=0.5", "train.warmup_steps=0", "train.grad_clip=0",
      "train.weight_decay=0", "checkpoint.every=" + std::to_string(every), "checkpoint.keep=20", "dist.bucket_mb=4",
      "train.batch_per_rank=1"};
  for (const std::string& set : sets) {
    argv.push_back("--set");
    argv.push_back(set);
  }
  argv.insert(argv.end(), {"--resume", "latest"});
  return argv;
}

std::string etcdEndpoint(int node) { return kLayout.address(node + 1) + ":" + std::to_string(kEtcdClientPort); }

/// The three members' client endpoints, as --rdzv-endpoint takes them.
std::string etcdEndpoints() {
  std::string s;
  for (int i = 0; i < kNodes; ++i) s += std::string(i ? "," : "") + etcdEndpoint(i);
  return s;
}

/// Output of a shell command (etcdctl).
std::string capture(const std::string& command) {
  std::string out;
  if (FILE* p = ::popen(command.c_str(), "r")) {
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    ::pclose(p);
  }
  return out;
}

class EtcdNetns : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces)";
    if (sh("command -v ip >/dev/null && command -v nsenter >/dev/null && command -v unshare >/dev/null") != 0) {
      GTEST_SKIP() << "needs iproute2, nsenter, unshare";
    }
    SKIP_WITHOUT_TRAINER_OR_ASSERT_BUILT();
    ASSERT_EQ(sh("command -v etcd >/dev/null && command -v etcdctl >/dev/null"), 0)
        << "no etcd/etcdctl on PATH: install etcd-server and etcd-client (scripts/setup.sh does)";
    char tmpl[] = "/tmp/taehv-etcd-netns-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // The nodes' /etc (NodeProcess::etc_dir): the machine's hosts plus the namespaces' names, no DNS server.
    fs::create_directories(dir_ + "/etc");
    std::string hosts = readFile("/etc/hosts") + "\n" + kLayout.address(0) + " " + kLayout.bridge + "\n";
    for (int i = 1; i <= kNodes; ++i) hosts += kLayout.address(i) + " " + kLayout.name(i) + "\n";
    std::ofstream(dir_ + "/etc/hosts") << hosts;
    std::ofstream(dir_ + "/etc/resolv.conf") << "nameserver 127.0.0.1\n";
    namespaces_ = std::make_unique<Namespaces>(kNodes, kLayout);
    ASSERT_TRUE(namespaces_->ready()) << "namespaces did not come up";
    startEtcd();
  }
  void TearDown() override {
    for (auto& n : nodes_) n.kill();
    for (auto& m : etcd_) m.kill();
    namespaces_.reset();
    if (!HasFailure()) fs::remove_all(dir_);
  }

  NodeProcess inNamespace() const {
    NodeProcess p;
    p.ns_prefix = kLayout.prefix;
    p.etc_dir = dir_ + "/etc";
    return p;
  }

  /// One member per namespace, of one cluster, and waits (at most 30 s) until each answers a read (a quorum).
  void startEtcd() {
    std::string cluster;
    for (int i = 0; i < kNodes; ++i) {
      cluster += (i ? "," : "") + std::string("m") + std::to_string(i) + "=http://" + kLayout.address(i + 1) + ":" +
                 std::to_string(kEtcdPeerPort);
    }
    for (int i = 0; i < kNodes; ++i) {
      const std::string client = "http://" + etcdEndpoint(i);
      const std::string peer = "http://" + kLayout.address(i + 1) + ":" + std::to_string(kEtcdPeerPort);
      etcd_[static_cast<std::size_t>(i)] = inNamespace();
      etcd_[static_cast<std::size_t>(i)].spawn(
          i + 1,
          {"etcd", "--name", "m" + std::to_string(i), "--data-dir", dir_ + "/etcd" + std::to_string(i),
           "--listen-client-urls", client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
           "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster, "--initial-cluster-token", dir_},
          dir_ + "/etcd" + std::to_string(i) + ".log");
    }
    const auto end = Clock::now() + 30s;
    for (int i = 0; i < kNodes; ++i) {
      taehv::group::EtcdClient probe({{kLayout.address(i + 1), kEtcdClientPort}}, 500ms);
      while (!probe.rangePrefix("/").ok()) {
        ASSERT_FALSE(etcd_[static_cast<std::size_t>(i)].poll()) << readFile(etcd_[static_cast<std::size_t>(i)].log);
        ASSERT_LT(Clock::now(), end) << "etcd member " << i << " did not answer:\n"
                                     << readFile(etcd_[static_cast<std::size_t>(i)].log);
        std::this_thread::sleep_for(100ms);
      }
    }
  }

  /// Node `id` in namespace id+1: `nproc` ranks of the elastic job, no --master-addr; `worker`: the workers'
  /// command (none: taehv-train).
  void startNode(int id, int nproc, std::vector<std::string> worker = {}) {
    std::vector<std::string> argv = {taehv::testing::builtBinDir() + "/taehv-run", "--backend", "local", "--nnodes",
                                     "2:3", "--node-rank", std::to_string(id), "--master-port",
                                     std::to_string(kMasterPort), "--nproc-per-node", std::to_string(nproc),
                                     "--node-timeout", std::to_string(kNodeTimeoutS), "--shutdown-grace",
                                     std::to_string(kGraceS), "--max-restarts", "1", "--run-id", "t34-netns",
                                     "--rdzv-backend", "etcd", "--rdzv-endpoint", etcdEndpoints(), "--"};
    if (worker.empty()) worker = trainer(dir_ + "/elastic", steps_, every_);
    argv.insert(argv.end(), worker.begin(), worker.end());
    nodes_[static_cast<std::size_t>(id)] = inNamespace();
    nodes_[static_cast<std::size_t>(id)].spawn(id + 1, argv, dir_ + "/node" + std::to_string(id) + ".log");
  }

  /// Starts the three nodes (workers: `worker`, none: taehv-train) and waits until the 4 ranks have saved checkpoint
  /// `step`.
  void trainUntil(int step, const std::vector<std::string>& worker = {}) {
    startNode(0, 2, worker);
    startNode(1, 1, worker);
    startNode(2, 1, worker);
    ASSERT_NO_FATAL_FAILURE(taehv::test::waitForCheckpoint(nodes_, dir_, step, 300s));
  }

  /// Waits until every node has ended, at most `bound` after `t0`.
  void waitAll(Clock::time_point t0, std::chrono::seconds bound) {
    while (Clock::now() < t0 + bound) {
      bool all = true;
      for (auto& n : nodes_) all = n.poll() && all;
      if (all) return;
      std::this_thread::sleep_for(100ms);
    }
    for (auto& n : nodes_) EXPECT_TRUE(n.poll()) << "a node still runs:\n" << readFile(n.log);
  }

  double secondsSince(Clock::time_point t0, const NodeProcess& n) const {
    return std::chrono::duration<double>(n.ended - t0).count();
  }

  /// The final checkpoint's state: every sample of steps_ global batches of 4 used once.
  void expectAllSamplesOnce() {
    const auto state =
        nlohmann::json::parse(readFile(dir_ + "/elastic/checkpoint-" + std::to_string(steps_) + "/state.json"));
    EXPECT_EQ(state.at("samples_consumed").get<int64_t>(), 4 * steps_) << "none skipped or repeated";
    EXPECT_EQ(state.at("global_batch").get<int64_t>(), 4);
  }

  int steps_ = kSteps;  ///< the job's steps and checkpoint interval
  int every_ = 1;
  std::string dir_;
  std::unique_ptr<Namespaces> namespaces_;
  std::array<NodeProcess, kNodes> etcd_;
  std::array<NodeProcess, kNodes> nodes_;
};

/// The count of `what` in `text`.
std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

/// The first line of `text` that contains `what` ("" when none).
std::string lineWith(const std::string& text, const std::string& what) {
  const auto at = text.find(what);
  if (at == std::string::npos) return "";
  const auto newline = text.rfind('\n', at);
  const std::size_t begin = newline == std::string::npos ? 0 : newline + 1;
  return text.substr(begin, text.find('\n', at) - begin);
}

TEST_F(EtcdNetns, Node0CutNodes1And2ReFormWithANewMasterNode0StopsForWantOfQuorum) {
  trainUntil(kCutAfterStep);
  const auto t0 = Clock::now();
  ASSERT_EQ(sh("ip link set " + kLayout.name(1) + "-v down"), 0);  // node 0 and its etcd member
  // The time to the next training step: node 1's first step line after it resumed.
  std::optional<double> to_step;
  while (Clock::now() < t0 + 300s) {
    bool all = true;
    for (auto& n : nodes_) all = n.poll() && all;
    if (!to_step) {
      const std::string log1 = readFile(nodes_[1].log);
      const auto resumed = log1.find("resumed from ");
      if (resumed != std::string::npos && log1.find("] step ", resumed) != std::string::npos) {
        to_step = std::chrono::duration<double>(Clock::now() - t0).count();
      }
    }
    if (all) break;
    std::this_thread::sleep_for(50ms);
  }
  const std::string log0 = readFile(nodes_[0].log), log1 = readFile(nodes_[1].log), log2 = readFile(nodes_[2].log);
  for (auto& n : nodes_) ASSERT_TRUE(n.poll()) << "a node still runs 300 s after the cut:\n" << readFile(n.log);
  std::printf("node 0 cut after step %d: node 0 ended %.1f s later (exit %d); nodes 1 and 2 trained again %.1f s "
              "after the cut and finished %.1f / %.1f s after it (exits %d, %d)\n",
              kCutAfterStep, secondsSince(t0, nodes_[0]), nodes_[0].exit_status, to_step.value_or(-1),
              secondsSince(t0, nodes_[1]), secondsSince(t0, nodes_[2]), nodes_[1].exit_status, nodes_[2].exit_status);
  EXPECT_EQ(nodes_[1].exit_status, 0) << log1;
  EXPECT_EQ(nodes_[2].exit_status, 0) << log2;
  ASSERT_TRUE(to_step.has_value()) << log1;
  // The bound of a hang, not the target: lease expiry (5 s), the grace (3 s), the last call (5 s), the workers' start.
  EXPECT_LT(*to_step, 90.0) << log1;

  // Node 0, the minority side: it stops and says why, with an exit that is not 0, within calls that time out.
  EXPECT_NE(nodes_[0].exit_status, 0) << log0;
  EXPECT_LT(secondsSince(t0, nodes_[0]), 90.0) << log0;
  EXPECT_NE(log0.find("no quorum on this node's side: etcd member(s) " + etcdEndpoint(0)), std::string::npos) << log0;
  EXPECT_EQ(log0.find("formation 1:"), std::string::npos) << log0;

  // Nodes 1 and 2 formed without node 0, with node 1 as the master at the address it registered.
  for (int i : {1, 2}) {
    const std::string& log = i == 1 ? log1 : log2;
    EXPECT_NE(log.find("(address " + kLayout.address(i + 1) + ", lease TTL"), std::string::npos) << log;
    EXPECT_NE(log.find("re-forming with the nodes alive for restart 1 of 1"), std::string::npos) << log;
    const std::string formed = lineWith(log, "node group (etcd): formation 1: ");
    EXPECT_EQ(formed.find("formation 1: node 1 (host "), formed.find("formation 1: ")) << log;
    EXPECT_EQ(formed.find("node 0 ("), std::string::npos) << log;
    EXPECT_NE(formed.find("; master node 1 (host "), std::string::npos) << log;
    EXPECT_NE(formed.find("address " + kLayout.address(2) + ")", formed.find("; master ")), std::string::npos) << log;
  }
  EXPECT_NE(log1.find("grad_accum 1 -> 2 at 2 ranks"), std::string::npos) << log1;
  EXPECT_NE(log1.find("2 rank(s), backend gloo"), std::string::npos) << log1;
  expectAllSamplesOnce();

  // The reference: 2 ranks (one node, loopback) resumed from a copy of the checkpoint the survivors resumed from.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log1, m, std::regex("resumed from (\\S+/checkpoint-([0-9]+)) at step"))) << log1;
  const std::string resumed = m[1].str();
  const int from = std::stoi(m[2].str());
  ASSERT_LE(from, kSteps - 3) << "too few steps after the resume to compare updates";
  const std::string ref = dir_ + "/reference";
  fs::create_directories(ref);
  fs::copy(resumed, ref + "/checkpoint-" + std::to_string(from), fs::copy_options::recursive);
  std::string command = taehv::testing::builtBinDir() + "/taehv-run --standalone --nproc-per-node 2 --";
  for (const auto& a : trainer(ref)) command += " '" + a + "'";
  ASSERT_EQ(sh(command + " > " + dir_ + "/reference.log 2>&1"), 0) << readFile(dir_ + "/reference.log");
  ASSERT_NE(readFile(dir_ + "/reference.log").find("resumed from " + ref + "/checkpoint-" + std::to_string(from)),
            std::string::npos) << readFile(dir_ + "/reference.log");
  const auto at = [](const std::string& out, int step) {
    return taehv::testing::loadTensors(out + "/checkpoint-" + std::to_string(step) + "/model.pt");
  };
  const auto w_ref = at(ref, kSteps);
  const double update = taehv::testing::distance(w_ref, at(ref, kSteps - 2));
  ASSERT_GT(update, 1e-4) << "training did not move the weights; the comparison would be meaningless";
  const double err = taehv::testing::distance(w_ref, at(dir_ + "/elastic", kSteps)) / update;
  std::printf("re-formed on etcd vs 2 ranks resumed from checkpoint-%d uninterrupted: |w_e - w_ref| / |last two "
              "updates| = %.3g\n", from, err);
  EXPECT_LT(err, 2e-3);
}

TEST_F(EtcdNetns, OneEtcdMemberKilledTheJobDoesNotNotice) {
  // The member every node talks to first (the first endpoint) is made the leader too, then killed alone.
  const std::string ctl = "ETCDCTL_API=3 etcdctl --dial-timeout 2s --command-timeout 5s --endpoints " + etcdEndpoints();
  const auto status = nlohmann::json::parse(capture(ctl + " endpoint status -w json"), nullptr, false);
  ASSERT_TRUE(status.is_array() && status.size() == kNodes) << status.dump();
  std::uint64_t first = 0;
  for (const auto& s : status) {
    if (s.value("Endpoint", "") == etcdEndpoint(0)) {
      first = s.at("Status").at("header").at("member_id").get<std::uint64_t>();
    }
  }
  ASSERT_NE(first, 0u) << status.dump();
  char hex[32];
  std::snprintf(hex, sizeof hex, "%llx", static_cast<unsigned long long>(first));
  if (status[0].at("Status").value("leader", std::uint64_t{0}) != first) {
    ASSERT_EQ(sh(ctl + " move-leader " + hex + " > " + dir_ + "/move-leader.log 2>&1"), 0)
        << readFile(dir_ + "/move-leader.log");
  }

  // Long enough after the kill for a node that could not renew its lease to be lost twice over (2 x --node-timeout):
  // rank 0 sleeps 0.6 s in every step's forward/backward (the test hook; the others wait for it in the exchange), so
  // the 25 steps after the kill take at least 15 s however fast the machine (an idle one ran them in 9.7 s).
  steps_ = 30;
  every_ = 5;
  std::vector<std::string> slowed = {"/usr/bin/env", "TAEHV_TEST_SLOW_SECTION=forward_backward:*:0.6"};
  for (const std::string& a : trainer(dir_ + "/elastic", steps_, every_)) slowed.push_back(a);
  trainUntil(every_, slowed);
  const auto t0 = Clock::now();
  etcd_[0].kill();
  waitAll(t0, 300s);
  for (int i = 0; i < kNodes; ++i) {
    const NodeProcess& n = nodes_[static_cast<std::size_t>(i)];
    const std::string log = readFile(n.log);
    std::printf("etcd member 0 (the leader) killed after step %d of %d: node %d finished %.1f s later (exit %d)\n",
                every_, steps_, i, secondsSince(t0, n), n.exit_status);
    EXPECT_EQ(n.exit_status, 0) << log;
    EXPECT_GT(secondsSince(t0, n), 2.0 * kNodeTimeoutS) << "the job ended too soon after the kill to tell";
    EXPECT_EQ(count(log, "node group (etcd): formation "), 1u) << log;
    EXPECT_EQ(log.find("re-forming"), std::string::npos) << log;
    EXPECT_EQ(log.find("stopping"), std::string::npos) << log;
  }
  expectAllSamplesOnce();
}

TEST_F(EtcdNetns, ALateNodeJoinsAtTheNextFormationUpToMax) {
  // Workers that say where they run. In the first formation node 1's fail after 10 s, which makes the next one,
  // and node 0's run until stopped; in the next they all end well after 2 s.
  const std::vector<std::string> worker = {
      "/bin/sh", "-c",
      "echo \"worker rank $RANK of $WORLD_SIZE, node $GROUP_RANK of $GROUP_WORLD_SIZE, restart "
      "$TORCHELASTIC_RESTART_COUNT\"; if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then "
      "if [ \"$GROUP_RANK\" = 1 ]; then sleep 10; exit 1; fi; exec sleep 120; fi; exec sleep 2"};
  startNode(0, 1, worker);
  startNode(1, 1, worker);
  const auto end = Clock::now() + 60s;
  while (readFile(nodes_[1].log).find("formation 0: ") == std::string::npos) {
    ASSERT_LT(Clock::now(), end) << "nodes 0 and 1 did not form:\n" << readFile(nodes_[1].log);
    std::this_thread::sleep_for(100ms);
  }
  startNode(2, 1, worker);  // late: the group has formed at 2 of --nnodes 2:3
  waitAll(Clock::now(), 120s);
  const std::string log0 = readFile(nodes_[0].log), log2 = readFile(nodes_[2].log);
  for (int i = 0; i < kNodes; ++i) {
    const NodeProcess& n = nodes_[static_cast<std::size_t>(i)];
    EXPECT_EQ(n.exit_status, 0) << readFile(n.log);
  }
  const std::string first = lineWith(log0, "node group (etcd): formation 0: ");
  EXPECT_EQ(first.find("node 2 ("), std::string::npos) << log0;
  EXPECT_NE(log0.find("worker rank 0 of 2, node 0 of 2, restart 0"), std::string::npos) << log0;
  EXPECT_EQ(log2.find("formation 0: "), std::string::npos) << log2;
  const std::string next = lineWith(log2, "node group (etcd): formation 1: ");
  EXPECT_NE(next.find("node 0 ("), std::string::npos) << log2;
  EXPECT_NE(next.find("node 1 ("), std::string::npos) << log2;
  EXPECT_NE(next.find("node 2 (host "), std::string::npos) << log2;
  EXPECT_NE(log2.find("worker rank 2 of 3, node 2 of 3, restart 1"), std::string::npos) << log2;
}

}  // namespace
