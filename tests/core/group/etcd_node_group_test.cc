// The etcd node group's lead (core/group/src/etcd_node_group.cc) with real EtcdNodeGroup objects against a real
// etcd: the lead killed while the others wait hands over and the group forms; a stranger's value at the lead key
// does not block formation; a halt the lead writes reaches every member; a fresh group starts at the etcd member
// that answered last; the survivors of a loss form without the last call, a first formation still waits it.
#include "taehv/group/etcd_node_group.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <mutex>
#include <thread>

#include "etcd_server.h"
#include "taehv/group/session.h"

namespace taehv::group {
namespace {

using Clock = std::chrono::steady_clock;
using test::EtcdServer;

const std::string kRun = "lead-test";
const std::string kKey = jobKey("lead-test-token-0123456789abcdef", kRun);

EtcdGroupOptions options(const EtcdServer& etcd, int rank, int nnodes) {
  EtcdGroupOptions o;
  o.group.node_rank = rank;
  o.group.nnodes = nnodes;
  o.group.host = "h" + std::to_string(rank);
  o.group.job_key = kKey;
  o.group.node_timeout = std::chrono::seconds(3);
  o.group.heartbeat = std::chrono::milliseconds(500);
  o.endpoints = {etcd.endpoint()};
  o.run_id = kRun;
  o.address = "10.0.0." + std::to_string(rank + 1);
  return o;
}

/// Starts and forms every group at once (as N launchers would); each one's form() status.
std::vector<Status> formAll(std::vector<std::unique_ptr<EtcdNodeGroup>>& nodes, std::chrono::seconds within) {
  const auto deadline = Clock::now() + within;
  std::vector<std::future<Status>> forming;
  for (auto& n : nodes) {
    forming.push_back(std::async(std::launch::async, [&n, deadline]() -> Status {
      if (Status s = n->start(); !s.ok()) return s;
      return n->form(deadline);
    }));
  }
  std::vector<Status> out;
  for (auto& f : forming) out.push_back(f.get());
  return out;
}

class EtcdLead : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(etcd_.ok()) << etcd_.error(); }
  void TearDown() override {
    if (child_ > 0) {
      ::kill(child_, SIGKILL);
      ::waitpid(child_, nullptr, 0);
    }
  }

  /// Node 0 (--nnodes 3) in a child process of its own, alone, until it holds the lead key (at most 10 s): the
  /// key as it holds it, nullopt when it did not take it. The child forms when the others come, then waits to be
  /// killed (killLead()).
  std::optional<EtcdKeyValue> startLoneLead() {
    child_ = ::fork();
    if (child_ == 0) {
      EtcdNodeGroup lead(options(etcd_, 0, 3));
      if (lead.start().ok()) lead.form(Clock::now() + std::chrono::seconds(60));
      ::pause();
      _exit(0);
    }
    EtcdClient client({etcd_.endpoint()});
    for (int i = 0; i < 100 && child_ > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      auto got = client.get(etcdLeadKey(kRun, kKey));
      if (got.ok() && got.value) return got.value;
    }
    return std::nullopt;
  }
  /// SIGKILLs the lone lead's process: no goodbye, its lease runs out.
  void killLead() {
    ::kill(child_, SIGKILL);
    ::waitpid(child_, nullptr, 0);
    child_ = -1;
  }

  EtcdServer etcd_;
  pid_t child_ = -1;
};

// Node 0 alone takes the lead, then dies (SIGKILL: no goodbye, its lease runs out). Nodes 1 and 2 come, one of
// them takes the lead once the dead one's key went with its lease, and the two form without it.
TEST_F(EtcdLead, TheLeadKilledWhileWaitingHandsOverAndTheOthersForm) {
  EtcdClient client({etcd_.endpoint()});
  const std::optional<EtcdKeyValue> held = startLoneLead();
  ASSERT_TRUE(held.has_value()) << "the lone node did not take the lead";
  killLead();
  const auto killed = Clock::now();

  std::vector<std::unique_ptr<EtcdNodeGroup>> nodes;
  for (int rank : {1, 2}) {
    EtcdGroupOptions o = options(etcd_, rank, 3);
    o.group.min_nnodes = 2;
    nodes.push_back(std::make_unique<EtcdNodeGroup>(o));
  }
  const auto statuses = formAll(nodes, std::chrono::seconds(30));
  for (const Status& s : statuses) ASSERT_TRUE(s.ok()) << s.error;
  const auto took = Clock::now() - killed;
  for (int i = 0; i < 2; ++i) {
    const AgreedRanks a = nodes[static_cast<std::size_t>(i)]->agreedRanks();
    EXPECT_EQ(a.nnodes, 2) << "the dead node is not in the formation";
    EXPECT_EQ(a.node_rank, i);
    EXPECT_EQ(a.master_addr, "10.0.0.2") << "node 1 is the lowest alive";
  }
  auto now = client.get(etcdLeadKey(kRun, kKey));
  ASSERT_TRUE(now.ok() && now.value.has_value());
  EXPECT_NE(now.value->lease, held->lease) << "a live node holds the lead now";
  // The dead lease (3 s) plus kLastCall (5 s: 2 of MAX 3 nodes) plus slack.
  EXPECT_LT(took, std::chrono::seconds(3 + 5 + 6));
  for (auto& n : nodes) n->finish(true);
}

// A stranger (no job token) wrote the lead key, bound to a live lease of its own: the nodes take the key over
// (its value does not verify) and form.
TEST_F(EtcdLead, AStrangersLeadKeyDoesNotBlockFormation) {
  EtcdClient client({etcd_.endpoint()});
  auto lease = client.leaseGrant(std::chrono::seconds(60));
  ASSERT_TRUE(lease.ok()) << lease.error;
  char id[32];
  std::snprintf(id, sizeof id, "%llx", static_cast<unsigned long long>(lease.value));
  ASSERT_TRUE(client.put(etcdLeadKey(kRun, kKey), std::string("{\"id\":\"") + id + "\",\"v\":2,\"mac\":\"00\"}",
                         lease.value).ok());
  std::vector<std::unique_ptr<EtcdNodeGroup>> nodes;
  for (int rank : {0, 1, 2}) nodes.push_back(std::make_unique<EtcdNodeGroup>(options(etcd_, rank, 3)));
  const auto t0 = Clock::now();
  const auto statuses = formAll(nodes, std::chrono::seconds(20));
  for (const Status& s : statuses) ASSERT_TRUE(s.ok()) << s.error;
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5)) << "not blocked until the stranger's lease ends (60 s)";
  auto now = client.get(etcdLeadKey(kRun, kKey));
  ASSERT_TRUE(now.ok() && now.value.has_value());
  EXPECT_NE(now.value->lease, lease.value) << "a node of the job holds the lead";
  for (auto& n : nodes) n->finish(true);
}

// Node 2 stops (its workers failed): the lead writes the halt and every other member stops with node 2's reason,
// whichever node leads; a stranger's halt (not sealed) stops nobody.
TEST_F(EtcdLead, AHaltReachesEveryMemberAndAStrangersDoesNot) {
  std::vector<std::unique_ptr<EtcdNodeGroup>> nodes;
  for (int rank : {0, 1, 2}) nodes.push_back(std::make_unique<EtcdNodeGroup>(options(etcd_, rank, 3)));
  const auto statuses = formAll(nodes, std::chrono::seconds(20));
  for (const Status& s : statuses) ASSERT_TRUE(s.ok()) << s.error;
  EtcdClient client({etcd_.endpoint()});
  ASSERT_TRUE(client.put(etcdRunPrefix(kRun) + "halt", "{\"round\":0,\"reason\":\"forged\",\"v\":2,\"mac\":\"00\"}")
                  .ok());
  std::this_thread::sleep_for(std::chrono::seconds(1));
  for (auto& n : nodes) EXPECT_EQ(n->stopReason(), "") << "a forged halt stops nobody";
  const auto t0 = Clock::now();
  nodes[2]->requestStop("rank 2 exited with 1");
  for (int i = 0; i < 2; ++i) {
    const auto& n = nodes[static_cast<std::size_t>(i)];
    while (n->stopReason().empty() && Clock::now() - t0 < std::chrono::seconds(5)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_EQ(n->stopReason(), "node 2 (host h2, address 10.0.0.3) stopped: rank 2 exited with 1") << i;
    EXPECT_FALSE(n->memberLost()) << "a node that stopped is no node lost: the workers get --shutdown-grace";
  }
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2)) << "a halt travels by watch, not by the heartbeat";
  for (auto& n : nodes) n->finish(false);
}

// Node 0 takes the lead alone, the three form, then node 0 dies (SIGKILL) while running: its lead key goes with its
// lease, node 1 or 2 takes the lead, finds node 0's record gone and halts the formation: both stop saying so.
TEST_F(EtcdLead, TheLeadLostWhileRunningIsFoundByTheNextLead) {
  ASSERT_TRUE(startLoneLead().has_value()) << "the lone node did not take the lead";
  std::vector<std::unique_ptr<EtcdNodeGroup>> nodes;
  for (int rank : {1, 2}) nodes.push_back(std::make_unique<EtcdNodeGroup>(options(etcd_, rank, 3)));
  const auto statuses = formAll(nodes, std::chrono::seconds(20));
  killLead();
  const auto killed = Clock::now();
  for (const Status& s : statuses) ASSERT_TRUE(s.ok()) << s.error;
  for (auto& n : nodes) EXPECT_EQ(n->agreedRanks().nnodes, 3);
  for (auto& n : nodes) {
    while (n->stopReason().empty() && Clock::now() - killed < std::chrono::seconds(10)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(n->stopReason().rfind("node 0 (host h0, address 10.0.0.1) lost: its etcd lease expired", 0), 0u)
        << n->stopReason();
    EXPECT_TRUE(n->memberLost()) << "the lead's halt says a node was lost, and so does every member";
  }
  // The lease (3 s) and a heartbeat or two.
  EXPECT_LT(Clock::now() - killed, std::chrono::seconds(3 + 3));
  for (auto& n : nodes) n->finish(false);
}

/// The log lines of every group made with logInto(), for the tests that look for one.
struct Lines {
  std::mutex mu;
  std::vector<std::string> lines;
  bool has(const std::string& part) {
    std::lock_guard<std::mutex> lock(mu);
    return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(part) != l.npos; });
  }
};
EtcdGroupOptions logInto(EtcdGroupOptions o, Lines& into) {
  o.group.log = [&into](LogLevel, const std::string& line) {
    std::lock_guard<std::mutex> lock(into.mu);
    into.lines.push_back(line);
  };
  return o;
}

// Node 0's etcd member cut off (SIGSTOPped: connections hang, as across a cut link): the first group made after it
// waits out one call timeout there before member 1 answers; the next formation's fresh group starts at member 1
// (the endpoint that answered last in this process), so registering costs no call timeout.
TEST(EtcdEndpoints, AFreshGroupStartsAtTheMemberThatAnsweredLast) {
  EtcdServer etcd(3);
  ASSERT_TRUE(etcd.ok()) << etcd.error();
  auto make = [&etcd](int round) {
    EtcdGroupOptions o = options(etcd, 0, 1);
    o.endpoints = {etcd.endpoint(0), etcd.endpoint(1), etcd.endpoint(2)};
    o.group.round = round;
    return std::make_unique<EtcdNodeGroup>(o);
  };
  {
    auto before = make(0);
    ASSERT_TRUE(before->start().ok());
    ASSERT_TRUE(before->form(Clock::now() + std::chrono::seconds(10)).ok());
    before->finish(true);
  }
  etcd.pauseMember(0);
  // Members 1 and 2 elect a leader among themselves first (member 0 may have led).
  EtcdClient one({etcd.endpoint(1)});
  const auto wait_end = Clock::now() + std::chrono::seconds(15);
  while (!one.put("/probe", "x").ok() && Clock::now() < wait_end) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_TRUE(one.put("/probe", "x").ok()) << "members 1 and 2 did not go on without member 0";

  auto first = make(1);
  auto t0 = Clock::now();
  ASSERT_TRUE(first->start().ok());
  const auto first_took = Clock::now() - t0;
  ASSERT_TRUE(first->form(Clock::now() + std::chrono::seconds(10)).ok());
  first->finish(true);
  EXPECT_GE(first_took, kEtcdCallTimeout - std::chrono::milliseconds(100))
      << "member 0 answered after all: this test does not show the wait it is about";

  auto next = make(2);
  t0 = Clock::now();
  ASSERT_TRUE(next->start().ok());
  const auto next_took = Clock::now() - t0;
  ASSERT_TRUE(next->form(Clock::now() + std::chrono::seconds(10)).ok());
  next->finish(true);
  EXPECT_LT(next_took, kEtcdCallTimeout / 2) << "the fresh group asked the silent member 0 first";
}

// --nnodes 2:3: three nodes form, node 2 dies (no goodbye: its group destroyed, its lease runs out). The lead
// halts formation 0; nodes 0 and 1 register afresh for formation 1 and, every live member of formation 0 being
// back, the lead proposes at once instead of waiting kLastCall (5 s) for a third node.
TEST_F(EtcdLead, TheSurvivorsOfALossFormWithoutTheLastCall) {
  Lines lines;
  auto make = [&](int rank, int round) {
    EtcdGroupOptions o = logInto(options(etcd_, rank, 3), lines);
    o.group.min_nnodes = 2;
    o.group.round = round;
    return std::make_unique<EtcdNodeGroup>(o);
  };
  std::vector<std::unique_ptr<EtcdNodeGroup>> nodes;
  for (int rank : {0, 1, 2}) nodes.push_back(make(rank, 0));
  for (const Status& s : formAll(nodes, std::chrono::seconds(20))) ASSERT_TRUE(s.ok()) << s.error;
  EXPECT_EQ(nodes[0]->agreedRanks().nnodes, 3);

  nodes[2].reset();  // killed: no record written, its lease (3 s) runs out
  const auto end = Clock::now() + std::chrono::seconds(20);
  while ((nodes[0]->stopReason().empty() || nodes[1]->stopReason().empty()) && Clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const auto lost = Clock::now();
  ASSERT_NE(nodes[0]->stopReason().find("node 2"), std::string::npos) << nodes[0]->stopReason();
  ASSERT_FALSE(nodes[1]->stopReason().empty());

  std::vector<std::unique_ptr<EtcdNodeGroup>> survivors;
  for (int rank : {0, 1}) {
    nodes[static_cast<std::size_t>(rank)]->finish(false);
    survivors.push_back(make(rank, 1));
  }
  for (const Status& s : formAll(survivors, std::chrono::seconds(20))) ASSERT_TRUE(s.ok()) << s.error;
  const auto took = Clock::now() - lost;
  for (int i = 0; i < 2; ++i) {
    const AgreedRanks a = survivors[static_cast<std::size_t>(i)]->agreedRanks();
    EXPECT_EQ(a.round, 1);
    EXPECT_EQ(a.nnodes, 2);
  }
  EXPECT_TRUE(lines.has("proposing at once: every live member of formation 0 is waiting"));
  EXPECT_LT(took, kLastCall - std::chrono::seconds(2)) << "the lead waited the last call for nobody";
  for (auto& n : survivors) n->finish(true);
}

// --nnodes 2:3, a first formation: two nodes in, the lead still waits kLastCall for a third before it forms.
TEST_F(EtcdLead, AFirstFormationStillWaitsTheLastCall) {
  Lines lines;
  std::vector<std::unique_ptr<EtcdNodeGroup>> nodes;
  for (int rank : {0, 1}) {
    EtcdGroupOptions o = logInto(options(etcd_, rank, 3), lines);
    o.group.min_nnodes = 2;
    nodes.push_back(std::make_unique<EtcdNodeGroup>(o));
  }
  const auto t0 = Clock::now();
  for (const Status& s : formAll(nodes, std::chrono::seconds(20))) ASSERT_TRUE(s.ok()) << s.error;
  EXPECT_GE(Clock::now() - t0, kLastCall);
  EXPECT_EQ(nodes[0]->agreedRanks().nnodes, 2);
  EXPECT_FALSE(lines.has("proposing at once"));
  for (auto& n : nodes) n->finish(true);
}

}  // namespace
}  // namespace taehv::group
