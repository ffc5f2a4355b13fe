// Progress across nodes (issue 33) through the real taehv-run on loopback: two nodes of one rank each, whose workers
// report steps over the progress channel with set times (progress_worker.py, no training). The node group carries
// each node's summary with its heartbeats; node 0 names a straggler on node 1 and, when a hang on node 1 stops the
// job, which rank is behind at which step.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <regex>

#include "etcd_server.h"
#include "run_process.h"
#include "taehv/group/progress_summary.h"

namespace taehv::test {
namespace {

const std::string kToken = "progress-test-token-0123456789abcdef";

std::map<std::string, std::string> progressEnv() {
  auto env = cleanEnv();
  env.erase("TAEHV_GROUP_PORT");
  env["TAEHV_JOB_TOKEN"] = kToken;
  env["PYTHONPATH"] = TAEHV_PROGRESS_HELPER_DIR;
  return env;
}

/// `wrap`: a command the worker runs under (a shell that joins a cgroup), before the Python worker.
std::vector<std::string> node(int rank, int port, const std::vector<std::string>& run_options,
                              const std::vector<std::string>& worker, const std::string& nnodes = "2",
                              const std::vector<std::string>& wrap = {}) {
  std::vector<std::string> argv = {taehvRun(), "--backend", "local", "--nnodes", nnodes, "--node-rank",
                                   std::to_string(rank), "--master-addr", "127.0.0.1", "--master-port",
                                   std::to_string(port), "--nproc-per-node", "1", "--shutdown-grace", "2"};
  argv.insert(argv.end(), run_options.begin(), run_options.end());
  argv.push_back("--");
  argv.insert(argv.end(), wrap.begin(), wrap.end());
  argv.insert(argv.end(), {TAEHV_TEST_PYTHON, TAEHV_PROGRESS_WORKER});
  argv.insert(argv.end(), worker.begin(), worker.end());
  return argv;
}

/// Below the kernel's ephemeral range (32768-60999), where an outgoing connection of any process may hold a port, and
/// clear of the other group tests' ranges (elastic 12000-15199, arrival 16000-17599, etcd_cli 20000-23199): 17600-19799.
int portFor(int offset) { return 17600 + static_cast<int>(::getpid() % 200) * 2 + offset; }

/// Runs two nodes, node 1's rank busy 0.3 s per step, node 0's 0.05 s (then it waits 0.25 s, as in a collective),
/// with `options` on both; checks that node 0 names rank 1 and node 1 as stragglers with their figures, once, and that
/// both nodes finish.
void expectNode0NamesTheStragglerOnNode1(int port, const std::vector<std::string>& options) {
  const auto env = progressEnv();
  auto node0 = std::async(std::launch::async, [&] {
    return runProcess(node(0, port, options, {"40", "0.05", "0.25"}), env, std::chrono::seconds(60));
  });
  auto node1 = std::async(std::launch::async, [&] {
    return runProcess(node(1, port, options, {"40", "0.3", "0.0"}), env, std::chrono::seconds(60));
  });
  const auto r1 = node1.get();
  const auto r0 = node0.get();
  EXPECT_EQ(r0.exit_code, 0) << r0.err;
  EXPECT_EQ(r1.exit_code, 0) << r1.err;
  const std::regex rank1(R"(rank 1 busy (0\.[0-9]+) s per step \(median of ([0-9]+) steps\), ([0-9.]+)x the others' median (0\.[0-9]+) s)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r0.err, m, rank1)) << r0.err;
  EXPECT_GE(std::stod(m[1]), 0.29);
  EXPECT_LT(std::stod(m[4]), 0.1) << "rank 0's busy time: 0.05 s, its 0.25 s in the exchange not counted";
  EXPECT_GE(std::stoi(m[2]), 5);
  EXPECT_NE(r0.err.find("; node 1 busy "), std::string::npos) << r0.err;
  EXPECT_EQ(r0.err.find("rank 0 busy"), std::string::npos) << r0.err;
  std::size_t said = 0;
  for (std::size_t at = 0; (at = r0.err.find("stragglers (", at)) != std::string::npos; ++at) ++said;
  EXPECT_EQ(said, 1u) << r0.err;
  EXPECT_EQ(r1.err.find("stragglers"), std::string::npos) << "node 0 speaks for the job\n" << r1.err;
}

TEST(GroupProgress, Node0NamesASlowRankOnNode1AsAStragglerAndTheJobGoesOn) {
  expectNode0NamesTheStragglerOnNode1(portFor(0), {});
}

// The same through the etcd group: each node's record carries its summary, every node reads them; the formation's
// first node (node 0 here) speaks.
TEST(GroupProgress, WithTheEtcdGroupTheFirstNodeNamesTheStraggler) {
  EtcdServer etcd;
  ASSERT_TRUE(etcd.ok()) << etcd.error();
  expectNode0NamesTheStragglerOnNode1(portFor(800), {"--rdzv-backend", "etcd", "--rdzv-endpoint", etcd.endpointText(),
                                                     "--run-id", "progress-" + std::to_string(::getpid()),
                                                     "--node-timeout", "5"});
}

/// Rank 1 (node 1) goes silent in step 6's data; rank 0 (node 0) waits in step 7's exchange (it keeps reporting).
/// Node 1 names its hung rank (2 s floor), the group stops, and node 0's line says who is behind, at which step.
void expectNode0NamesTheRankBehindAfterAHangOnNode1(int port, const std::vector<std::string>& options) {
  const auto env = progressEnv();
  std::vector<std::string> with_floor = options;
  with_floor.insert(with_floor.end(), {"--hang-timeout", "2"});
  auto node0 = std::async(std::launch::async, [&] {
    return runProcess(node(0, port, with_floor, {"100", "0.05", "0.05", "wait_at=7"}), env, std::chrono::seconds(90));
  });
  auto node1 = std::async(std::launch::async, [&] {
    return runProcess(node(1, port, with_floor, {"100", "0.05", "0.05", "stall_at=6"}), env, std::chrono::seconds(90));
  });
  const auto r1 = node1.get();
  const auto r0 = node0.get();
  EXPECT_NE(r1.err.find("hang: rank 1 hung in section data of step 6"), std::string::npos) << r1.err;
  EXPECT_EQ(r0.exit_code, 75) << r0.err;
  const std::regex spread(
      R"(job progress when it stopped \(every node's last heartbeat\): step 6: rank 1 in data; step 7: rank 0 in )"
      R"(exchange; behind: rank 1 \(node 1\) at step 6, 1 step behind step 7; silent longest: rank 1 \(node 1, )"
      R"(([0-9.]+) s\))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r0.err, m, spread)) << r0.err;
  EXPECT_GE(std::stod(m[1]), 1.5) << "its silence as node 1 last reported it";
  EXPECT_FALSE(r0.timed_out);
  EXPECT_FALSE(r1.timed_out);
}

TEST(GroupProgress, WhenAHangOnNode1StopsTheJobNode0NamesTheRankBehind) {
  expectNode0NamesTheRankBehindAfterAHangOnNode1(portFor(400), {});
}

// The same through the etcd group: node 1's record says "stopped", node 0 (the formation's first node) names who was
// behind from node 1's last record.
TEST(GroupProgress, WithTheEtcdGroupTheFirstNodeNamesTheRankBehindAfterAHang) {
  EtcdServer etcd;
  ASSERT_TRUE(etcd.ok()) << etcd.error();
  expectNode0NamesTheRankBehindAfterAHangOnNode1(
      portFor(1000), {"--rdzv-backend", "etcd", "--rdzv-endpoint", etcd.endpointText(), "--run-id",
                      "progress-hang-" + std::to_string(::getpid()), "--node-timeout", "5"});
}

/// A CPU quota for the processes that join it: a cgroup v2 cpu.max where this host has one with the cpu controller,
/// else a cgroup v1 cpu.cfs_quota_us; removed with the object. ok() false when neither can be made (no root, no
/// writable cgroup file system).
class CpuQuota {
 public:
  /// `percent` of one CPU, in cgroup `name`.
  CpuQuota(const std::string& name, int percent) {
    namespace fs = std::filesystem;
    const std::string quota = std::to_string(1000 * percent);  // microseconds per 100 ms period
    std::error_code ec;
    if (readFile("/sys/fs/cgroup/cgroup.controllers").find("cpu") != std::string::npos &&
        fs::create_directory("/sys/fs/cgroup/" + name, ec)) {
      dir_ = "/sys/fs/cgroup/" + name;
      ok_ = write(dir_ + "/cpu.max", quota + " 100000");
    } else if (fs::exists("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") &&
               fs::create_directory("/sys/fs/cgroup/cpu/" + name, ec)) {
      dir_ = "/sys/fs/cgroup/cpu/" + name;
      ok_ = write(dir_ + "/cpu.cfs_period_us", "100000") && write(dir_ + "/cpu.cfs_quota_us", quota);
    }
  }
  ~CpuQuota() {
    if (!dir_.empty()) ::rmdir(dir_.c_str());
  }
  bool ok() const { return ok_; }
  /// A shell that moves itself into the group, then runs the rest of the command line.
  std::vector<std::string> wrap() const {
    return {"/bin/sh", "-c", "echo $$ > " + dir_ + "/cgroup.procs && exec \"$@\"", "sh"};
  }

 private:
  static bool write(const std::string& path, const std::string& text) {
    std::ofstream out(path);
    out << text << std::flush;
    return static_cast<bool>(out);
  }
  std::string dir_;
  bool ok_ = false;
};

// A straggler slowed by real CPU contention, not a sleep (issue 33): both nodes' workers spin for the same CPU time
// per step (progress_worker.py cpu=1), node 1's under a 10% CPU quota (a cgroup; skipped where none can be made. A
// competing process pinned to the worker's core, tried first, did not set it apart in 4 runs of 4 on this 2-core
// machine shared with other builds: the unpinned rank met as much contention on the other core). Node 0 names rank 1
// within a few steps with its measured slowdown; nobody is called hung and both nodes finish.
TEST(GroupProgress, ANodeWhoseWorkerIsCpuThrottledIsNamedAStragglerWithItsSlowdown) {
  const int port = portFor(1800);
  const auto env = progressEnv();
  CpuQuota quota("t33-straggler-" + std::to_string(::getpid()), 10);
  if (!quota.ok()) GTEST_SKIP() << "needs a writable cgroup file system with the cpu controller (root)";
  auto node0 = std::async(std::launch::async, [&] {
    // Node 0 runs longer than node 1 (0.3 s a step against about 0.5 s), so it still judges when node 1's rank has
    // held its verdict kStragglerConfirmSteps steps.
    return runProcess(node(0, port, {}, {"60", "0.05", "0.25", "cpu=1"}), env, std::chrono::seconds(120));
  });
  auto node1 = std::async(std::launch::async, [&] {
    return runProcess(node(1, port, {}, {"30", "0.05", "0.0", "cpu=1"}, "2", quota.wrap()), env,
                      std::chrono::seconds(120));
  });
  const auto r1 = node1.get();
  const auto r0 = node0.get();
  EXPECT_EQ(r0.exit_code, 0) << r0.err;
  EXPECT_EQ(r1.exit_code, 0) << r1.err;
  const std::regex rank1(
      R"(rank 1 busy ([0-9.]+) s per step \(median of ([0-9]+) steps\), ([0-9.]+)x the others' median ([0-9.]+) s)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r0.err, m, rank1)) << r0.err << "\nnode 1:\n" << r1.err;
  std::printf("named after %s steps: rank 1 busy %s s per step, %sx rank 0's %s s\n", m[2].str().c_str(),
              m[1].str().c_str(), m[3].str().c_str(), m[4].str().c_str());
  EXPECT_GT(std::stod(m[3]), group::kStragglerFactor);
  EXPECT_LE(std::stoi(m[2]), group::kStragglerMinSteps + group::kStragglerConfirmSteps + 5)
      << "named within a few steps of the first judgement (kStragglerMinSteps) held kStragglerConfirmSteps";
  EXPECT_EQ(r0.err.find("rank 0 busy"), std::string::npos) << r0.err;
  for (const auto* r : {&r0, &r1}) EXPECT_EQ(r->err.find("hang:"), std::string::npos) << r->err;
}

// --leave-out-stragglers: three nodes under --nnodes 2:3, node 2's rank busy 0.3 s per step (the others 0.05 s).
// Node 1's worker fails at step 35 of the first attempt (node 2 judged from step 11, kStragglerMinSteps, named from
// step 16, kStragglerConfirmSteps; heartbeats carry it a second or more later, more under load: at step 25 a -j2
// run had not named it yet); the nodes re-form, node 0 leaves node 2 out (it ends at
// once with node 0's reason), and nodes 0 and 1 run the restart to the end.
TEST(GroupProgress, LeaveOutStragglersReFormsWithoutTheSlowNode) {
  const int port = portFor(1200);
  const auto env = progressEnv();
  const std::vector<std::string> options = {"--max-restarts", "1", "--leave-out-stragglers"};
  std::vector<std::future<ProcessResult>> nodes;
  const std::vector<std::vector<std::string>> workers = {
      {"40", "0.05", "0.25"}, {"40", "0.05", "0.25", "fail_at=35"}, {"40", "0.3", "0.0"}};
  for (int r = 0; r < 3; ++r) {
    nodes.push_back(std::async(std::launch::async, [&, r] {
      return runProcess(node(r, port, options, workers[static_cast<std::size_t>(r)], "2:3"), env,
                        std::chrono::seconds(120));
    }));
  }
  const ProcessResult r0 = nodes[0].get(), r1 = nodes[1].get(), r2 = nodes[2].get();
  EXPECT_EQ(r0.exit_code, 0) << r0.err;
  EXPECT_EQ(r1.exit_code, 0) << r1.err;
  EXPECT_EQ(r2.exit_code, 1) << r2.err;
  EXPECT_NE(r0.err.find("leaving node 2 out of the next formation (--leave-out-stragglers): a straggler in the last "
                        "formation (busy 0.3"),
            std::string::npos)
      << r0.err;
  EXPECT_NE(r0.err.find("formed with 2 of 2..3 nodes (--node-rank 0,1 in that order; formation 1"), std::string::npos)
      << r0.err;
  EXPECT_NE(r2.err.find("it is left out of formation 1 (--leave-out-stragglers): a straggler"), std::string::npos)
      << r2.err;
  EXPECT_FALSE(r0.timed_out || r1.timed_out || r2.timed_out);
}

TEST(GroupProgress, LeaveOutStragglersNeedsAnElasticJobOnTheTcpGroup) {
  const ProcessResult r = runProcess(node(0, portFor(1600), {"--leave-out-stragglers"}, {"1", "0", "0"}),
                                     progressEnv(), std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--leave-out-stragglers needs --nnodes MIN:MAX with MIN < MAX"), std::string::npos) << r.err;
  const ProcessResult d = runProcess({taehvRun(), "describe", "--nnodes", "2:3", "--node-rank", "0", "--master-addr",
                                      "127.0.0.1", "--leave-out-stragglers"},
                                     progressEnv(), std::chrono::seconds(30));
  EXPECT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.out.find("stragglers (busy time over 1.5x the others') named by node 0 and left out of the next "
                       "re-formation"),
            std::string::npos)
      << d.out;
  EtcdServer etcd;
  ASSERT_TRUE(etcd.ok()) << etcd.error();
  const ProcessResult e = runProcess(
      node(0, portFor(1600), {"--leave-out-stragglers", "--rdzv-backend", "etcd", "--rdzv-endpoint", etcd.endpointText()},
           {"1", "0", "0"}, "1:2"),
      progressEnv(), std::chrono::seconds(30));
  EXPECT_EQ(e.exit_code, 2) << e.err;
  EXPECT_NE(e.err.find("--leave-out-stragglers is not implemented for the etcd node group"), std::string::npos)
      << e.err;
}

}  // namespace
}  // namespace taehv::test
