// The etcd node group through the real taehv-run and a real etcd (PROTOCOL.md, "The etcd group"), nodes on
// loopback: formation in arrival order, node 0 killed and the others re-forming with a new master, strangers
// (another token, a forged record), etcd lost mid-run, and bad endpoints. Workers are /bin/sh scripts that append
// their environment to a file.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "etcd_server.h"
#include "run_process.h"
#include "taehv/group/etcd_node_group.h"

namespace taehv::test {
namespace {

using Clock = std::chrono::steady_clock;
const std::string kToken = "etcd-test-token-0123456789abcdef";

/// Every worker start as one line: "restart rank world group_rank group_world label".
std::vector<std::string> starts(const std::string& file) {
  std::ifstream in(file);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::sort(lines.begin(), lines.end());
  return lines;
}

/// Below the kernel's ephemeral range (32768-60999), where an outgoing connection of any process may hold a port.
int testPort(int slot) { return 20000 + static_cast<int>(::getpid() % 400) * 8 + slot * 2; }

class EtcdGroupCli : public ::testing::Test {
 protected:
  /// The etcd cluster's size.
  virtual int members() const { return 1; }
  void SetUp() override {
    etcd_ = std::make_unique<EtcdServer>(members());
    ASSERT_TRUE(etcd_->ok()) << etcd_->error();
    dir_ = tempDir();
    log_ = dir_ + "/starts";
  }
  void TearDown() override {
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  /// One node's taehv-run: `label` names it in the starts file; `node_rank` < 0 gives no --node-rank.
  std::future<ProcessResult> node(const std::string& label, const std::string& nnodes, int node_rank, int port,
                                  const std::string& script, std::vector<std::string> extra = {},
                                  const std::string& token = kToken,
                                  std::chrono::seconds timeout = std::chrono::seconds(90)) {
    const std::string record = "echo \"$TORCHELASTIC_RESTART_COUNT $RANK $WORLD_SIZE $GROUP_RANK $GROUP_WORLD_SIZE " +
                               label + "\" >> " + log_ + "; ";
    std::vector<std::string> argv = {taehvRun(), "--backend", "local", "--nnodes", nnodes, "--master-addr",
                                     "127.0.0.1", "--master-port", std::to_string(port), "--nproc-per-node", "1",
                                     "--shutdown-grace", "2", "--node-timeout", "3", "--run-id", run_id_,
                                     "--rdzv-backend", "etcd", "--rdzv-endpoint", etcd_->endpointText()};
    if (node_rank >= 0) argv.insert(argv.end(), {"--node-rank", std::to_string(node_rank)});
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), {"--", "/bin/sh", "-c", record + script});
    auto env = cleanEnv();
    env["TAEHV_JOB_TOKEN"] = token;
    return std::async(std::launch::async, [argv, env, timeout] { return runProcess(argv, env, timeout); });
  }

  /// Waits (at most 20 s) until `n` workers have started.
  bool workersStarted(std::size_t n) const {
    const auto end = Clock::now() + std::chrono::seconds(20);
    while (starts(log_).size() < n && Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return starts(log_).size() >= n;
  }

  std::unique_ptr<EtcdServer> etcd_;
  std::string dir_, log_;
  std::string run_id_ = "etcd-test-" + std::to_string(::getpid());
};

// No --node-rank: the nodes are numbered in the order they registered in etcd; the first is the master (rank 0).
TEST_F(EtcdGroupCli, NodesWithoutNodeRanksAreNumberedInArrivalOrder) {
  const int port = testPort(0);
  auto a = node("a", "3", -1, port, "exit 0");
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  auto b = node("b", "3", -1, port, "exit 0");
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  auto c = node("c", "3", -1, port, "exit 0");
  const auto ra = a.get(), rb = b.get(), rc = c.get();
  EXPECT_EQ(ra.exit_code, 0) << ra.err;
  EXPECT_EQ(rb.exit_code, 0) << rb.err;
  EXPECT_EQ(rc.exit_code, 0) << rc.err;
  EXPECT_EQ(starts(log_), (std::vector<std::string>{"0 0 3 0 3 a", "0 1 3 1 3 b", "0 2 3 2 3 c"}));
  EXPECT_NE(rc.err.find("formation 0: node 0 (host "), std::string::npos) << rc.err;
}

// Node 0 (the first master) killed with SIGKILL under --nnodes 2:3 --max-restarts 1: its lease expires, nodes 1
// and 2 stop, re-form in one transaction as nodes 0 and 1 of 2 with node 1 as the master, and finish. With the TCP
// group this ends the job (Elastic.Node0LostIsAClearEndForTheOthers).
TEST_F(EtcdGroupCli, Node0KilledTheOthersReFormWithANewMasterAndFinish) {
  const int port = testPort(1);
  const std::string wait_once = "[ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] && sleep 60; exit 0";
  const std::vector<std::string> elastic = {"--max-restarts", "1"};
  const auto t0 = Clock::now();
  auto n0 = node("0", "2:3", 0, port, "sleep 2; kill -KILL $PPID; sleep 60", elastic);
  auto n1 = node("1", "2:3", 1, port, wait_once, elastic);
  auto n2 = node("2", "2:3", 2, port, wait_once, elastic);
  const auto r0 = n0.get(), r1 = n1.get(), r2 = n2.get();
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("node 0 killed: nodes 1 and 2 re-formed with node 1 as master and finished %.1f s after the start\n",
              took);
  EXPECT_EQ(r0.exit_code, 128 + SIGKILL);
  EXPECT_EQ(r1.exit_code, 0) << r1.err;
  EXPECT_EQ(r2.exit_code, 0) << r2.err;
  EXPECT_EQ(starts(log_), (std::vector<std::string>{"0 0 3 0 3 0", "0 1 3 1 3 1", "0 2 3 2 3 2", "1 0 2 0 2 1",
                                                    "1 1 2 1 2 2"}));
  for (const auto* err : {&r1.err, &r2.err}) {
    EXPECT_NE(err->find("node 0 (host "), std::string::npos) << *err;
    EXPECT_NE(err->find("lost: its etcd lease expired"), std::string::npos) << *err;
    EXPECT_NE(err->find("formation 1: node 1 (host "), std::string::npos) << *err;
    EXPECT_NE(err->find("master node 1 (host "), std::string::npos) << *err;
    EXPECT_EQ(err->find("cannot re-form without node 0"), std::string::npos) << *err;
  }
  EXPECT_LT(took, 2 + 3 + 2 + 10) << "the kill at 2 s, the lease 3 s, grace 2 s, slack";
}

// A node with another job token, and a record forged under the job's prefix (a real lease, a wrong MAC), are not
// counted: the 2 real nodes form alone; the stranger says why it cannot join and keeps waiting (its join timeout
// is 300 s; the test ends it after 15 s).
TEST_F(EtcdGroupCli, AnotherTokenOrAForgedRecordCannotJoin) {
  group::EtcdClient client({etcd_->endpoint()});
  auto lease = client.leaseGrant(std::chrono::seconds(60));
  ASSERT_TRUE(lease.ok()) << lease.error;
  char id[32];
  std::snprintf(id, sizeof id, "%llx", static_cast<unsigned long long>(lease.value));
  const nlohmann::json forged = {{"v", 1}, {"phase", "waiting"}, {"round", 0}, {"rank", 0}, {"nproc", 1},
                                 {"addr", "10.9.9.9"}, {"host", "forged"}, {"reason", ""}, {"mac", std::string(64, '0')}};
  ASSERT_TRUE(client.put(group::etcdRunPrefix(run_id_) + "nodes/" + id, forged.dump(), lease.value).ok());

  const int port = testPort(2);
  auto stranger = node("s", "2", 1, port, "exit 0", {}, "another-token-0123456789abcdef", std::chrono::seconds(15));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  auto n0 = node("0", "2", 0, port, "exit 0");
  auto n1 = node("1", "2", 1, port, "exit 0");
  const auto r0 = n0.get(), r1 = n1.get(), rs = stranger.get();
  EXPECT_EQ(r0.exit_code, 0) << r0.err;
  EXPECT_EQ(r1.exit_code, 0) << r1.err;
  EXPECT_EQ(starts(log_), (std::vector<std::string>{"0 0 2 0 2 0", "0 1 2 1 2 1"}));
  EXPECT_NE(r0.err.find("do not verify with this node's job token"), std::string::npos) << r0.err;
  EXPECT_EQ(r0.err.find("forged"), std::string::npos) << r0.err;
  EXPECT_TRUE(rs.timed_out) << rs.err;
  EXPECT_NE(rs.err.find("do not verify with this node's job token"), std::string::npos) << rs.err;
}

// etcd killed mid-run: no node can renew its lease, so each stops its workers within --node-timeout (+ grace and
// slack) saying it lost etcd; none hangs.
TEST_F(EtcdGroupCli, EtcdLostStopsEveryNodeWithinTheNodeTimeout) {
  const int port = testPort(3);
  auto n0 = node("0", "2", 0, port, "sleep 60");
  auto n1 = node("1", "2", 1, port, "sleep 60");
  ASSERT_TRUE(workersStarted(2)) << starts(log_).size() << " worker(s) started";
  const auto t0 = Clock::now();
  etcd_->kill();
  const auto r0 = n0.get(), r1 = n1.get();
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("etcd killed: both nodes ended %.1f s later\n", took);
  for (const auto* r : {&r0, &r1}) {
    EXPECT_NE(r->exit_code, 0) << r->err;
    EXPECT_NE(r->err.find("could not reach etcd for"), std::string::npos) << r->err;
  }
  EXPECT_LT(took, 3 + 2 + 2 + 6) << "node timeout 3 s, a 2 s call, grace 2 s, slack";
}

class EtcdGroupCli3 : public EtcdGroupCli {
 protected:
  int members() const override { return 3; }
};

// One member of a 3-member etcd cluster killed mid-run (the first endpoint, the one the nodes talk to): the nodes go
// on to the next endpoint and the job does not notice: no stop, no restart, both nodes finish.
TEST_F(EtcdGroupCli3, OneEtcdMemberOfThreeLostTheJobGoesOn) {
  const int port = testPort(4);
  auto n0 = node("0", "2", 0, port, "sleep 10; exit 0");
  auto n1 = node("1", "2", 1, port, "sleep 10; exit 0");
  ASSERT_TRUE(workersStarted(2)) << starts(log_).size() << " worker(s) started";
  std::this_thread::sleep_for(std::chrono::seconds(2));
  etcd_->killMember(0);
  const auto r0 = n0.get(), r1 = n1.get();
  for (const auto* r : {&r0, &r1}) {
    EXPECT_EQ(r->exit_code, 0) << r->err;
    EXPECT_EQ(r->err.find("stopped"), std::string::npos) << r->err;
  }
  EXPECT_EQ(starts(log_), (std::vector<std::string>{"0 0 2 0 2 0", "0 1 2 1 2 1"})) << "no restart";
}

TEST(EtcdGroupCliInput, AnUnreachableEtcdOrABadListIsOneLineAndExit2) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"127.0.0.1:" + std::to_string(freeLoopbackPort()), "cannot reach etcd at 127.0.0.1:"},
      {"127.0.0.1:2379,,b:1", "entry 2 is empty"},
      {"etcd:99999", "port 99999 is not 1..65535"},
  };
  auto env = cleanEnv();
  env["TAEHV_JOB_TOKEN"] = kToken;
  for (const auto& [endpoints, says] : cases) {
    const auto t0 = Clock::now();
    const auto r = runProcess({taehvRun(), "--backend", "local", "--nnodes", "2", "--node-rank", "0", "--master-addr",
                               "127.0.0.1", "--rdzv-backend", "etcd", "--rdzv-endpoint", endpoints, "--", "true"},
                              env, std::chrono::seconds(30));
    EXPECT_EQ(r.exit_code, 2) << endpoints << ": " << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5)) << endpoints;
  }
  env["PET_RDZV_BACKEND"] = "etcd";
  const auto r = runProcess({taehvRun(), "--backend", "local", "--nnodes", "2", "--node-rank", "0", "--master-addr",
                             "127.0.0.1", "--", "true"}, env, std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("env PET_RDZV_BACKEND etcd needs --rdzv-endpoint"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace taehv::test
