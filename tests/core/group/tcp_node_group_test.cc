// The node group over real TCP on loopback, several groups in one process: forming, a stop from one node reaching
// every node, lost nodes (connection closed, silent), and strangers who can neither join, stop nor crash it.
#include "taehv/group/tcp_node_group.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <future>
#include <mutex>
#include <regex>
#include <memory>
#include <thread>

#include "taehv/group/session.h"
#include "taehv/launch.h"
#include "taehv/group/wire.h"

namespace taehv::group {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

const std::string kToken = "test-token-0123456789abcdef";

GroupOptions optionsFor(int rank, int nnodes, int port, std::chrono::milliseconds timeout = 5s) {
  GroupOptions o;
  o.node_rank = rank;
  o.nnodes = nnodes;
  o.leader_addr = "127.0.0.1";
  o.bind_addr = "127.0.0.1";
  o.port = port;
  o.host = "h" + std::to_string(rank);
  o.job_key = jobKey(kToken, "run");
  o.node_timeout = timeout;
  return o;
}

/// Waits until `pred` holds or `limit` passes.
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 5s) {
  const auto end = Clock::now() + limit;
  while (Clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

/// A leader and nnodes-1 members, formed.
struct Job {
  explicit Job(int nnodes, std::chrono::milliseconds timeout = 5s) {
    leader = std::make_unique<TcpNodeGroup>(optionsFor(0, nnodes, 0, timeout));
    EXPECT_EQ(leader->start().error, "");
    port = leader->boundPort();
    for (int r = 1; r < nnodes; ++r) {
      members.push_back(std::make_unique<TcpNodeGroup>(optionsFor(r, nnodes, port, timeout)));
      EXPECT_EQ(members.back()->start().error, "");
    }
  }
  void form() {
    std::vector<std::future<Status>> formed;
    const auto deadline = Clock::now() + 10s;
    formed.push_back(std::async(std::launch::async, [&] { return leader->form(deadline); }));
    for (auto& m : members) formed.push_back(std::async(std::launch::async, [&m, deadline] { return m->form(deadline); }));
    for (auto& f : formed) ASSERT_EQ(f.get().error, "");
  }
  std::unique_ptr<TcpNodeGroup> leader;
  std::vector<std::unique_ptr<TcpNodeGroup>> members;
  int port = 0;
};

/// A blocking TCP client speaking (or not) the protocol by hand.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connected() const { return connected_; }
  void write(const std::string& bytes) { (void)!::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL); }
  /// The next frame's payload, or "" when the peer closed or nothing came within `limit`.
  std::string readFrame(std::chrono::milliseconds limit = 3s) {
    const auto end = Clock::now() + limit;
    while (Clock::now() < end) {
      if (auto frame = reader_.next(); frame.ok() && frame.value) return *frame.value;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n <= 0) return "";
      reader_.feed(buf, static_cast<std::size_t>(n));
    }
    return "";
  }
  /// True when the peer closed the connection within `limit`.
  bool closedByPeer(std::chrono::milliseconds limit = 3s) {
    const auto end = Clock::now() + limit;
    while (Clock::now() < end) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n <= 0) return true;
    }
    return false;
  }
  /// Runs a member's handshake for `rank` with `key`; returns the frames it sent (JOIN first).
  bool join(Session& session, int rank) {
    Opened c = session.open(readFrame());
    if (c.verdict != Verdict::kOk || c.message.type != MessageType::kChallenge) return false;
    session.setServerNonce(c.message.nonce);
    Message join{MessageType::kJoin, static_cast<std::uint32_t>(rank), 0, session.makeClientNonce(), "raw"};
    join.procs = 1;  // its process count
    sent.push_back(session.seal(join));
    write(sent.back());
    Opened w = session.open(readFrame());
    if (w.verdict != Verdict::kOk || w.message.type != MessageType::kWelcome) return false;
    session.establish();
    return true;
  }
  void sendSealed(Session& session, const Message& m) {
    sent.push_back(session.seal(m));
    write(sent.back());
  }
  std::vector<std::string> sent;

 private:
  int fd_ = -1;
  bool connected_ = false;
  FrameReader reader_;
};

TEST(GroupTcp, ThreeNodesFormAndAStopFromOneReachesEveryNode) {
  Job job(3);
  job.form();
  job.members[0]->requestStop("worker rank 3 exited with code 1");
  for (auto* g : {job.leader.get(), job.members[0].get(), job.members[1].get()}) {
    ASSERT_TRUE(eventually([&] { return readable(g->stopFd()); }));
    EXPECT_NE(g->stopReason().find("node 1 (host h1) stopped the job: worker rank 3 exited with code 1"), std::string::npos)
        << g->stopReason();
    EXPECT_FALSE(g->memberLost()) << "a stop is no node lost: the workers get --shutdown-grace";
  }
}

TEST(GroupTcp, LeaderStopReachesEveryMember) {
  Job job(3);
  job.form();
  job.leader->requestStop("taehv-run was interrupted (signal 2)");
  for (auto& m : job.members) {
    ASSERT_TRUE(eventually([&] { return readable(m->stopFd()); }));
    EXPECT_NE(m->stopReason().find("node 0 (host h0) stopped the job"), std::string::npos) << m->stopReason();
  }
}

TEST(GroupTcp, AMemberWhoseProcessDiesIsLostAtOnceAndNamed) {
  Job job(3);
  job.form();
  const auto t0 = Clock::now();
  job.members[0].reset();  // its sockets close, as when the process is killed
  ASSERT_TRUE(eventually([&] { return readable(job.leader->stopFd()); }, 2s));
  EXPECT_LT(Clock::now() - t0, 2s);
  const std::string reason = job.leader->stopReason();
  EXPECT_NE(reason.find("node 1 (host h1, address 127.0.0.1:"), std::string::npos) << reason;
  EXPECT_NE(reason.find("lost: its connection closed"), std::string::npos) << reason;
  EXPECT_NE(reason.find("last heard at "), std::string::npos) << reason;
  EXPECT_TRUE(job.leader->memberLost()) << "its workers are stopped within kLostMemberGrace";
  ASSERT_TRUE(eventually([&] { return readable(job.members[1]->stopFd()); }, 2s));
  EXPECT_EQ(job.members[1]->stopReason(), reason);
}

TEST(GroupTcp, ASilentMemberIsLostAfterTheNodeTimeout) {
  const auto timeout = 1500ms;
  TcpNodeGroup leader(optionsFor(0, 2, 0, timeout));
  ASSERT_EQ(leader.start().error, "");
  RawClient raw(leader.boundPort());
  Session session(jobKey(kToken, "run"), Direction::kToLeader);
  ASSERT_TRUE(raw.join(session, 1));
  ASSERT_EQ(leader.form(Clock::now() + 5s).error, "");
  const auto joined = Clock::now();  // the member says nothing from here on
  ASSERT_TRUE(eventually([&] { return readable(leader.stopFd()); }, 5s));
  const auto detected = Clock::now() - joined;
  EXPECT_GE(detected, timeout);
  EXPECT_LT(detected, timeout + 1s);
  EXPECT_NE(leader.stopReason().find("node 1 (host raw, address 127.0.0.1:"), std::string::npos) << leader.stopReason();
  EXPECT_NE(leader.stopReason().find("not heard from for"), std::string::npos) << leader.stopReason();
}

TEST(GroupTcp, MembersStopWhenTheLeaderIsLost) {
  Job job(3);
  job.form();
  job.leader.reset();
  for (auto& m : job.members) {
    ASSERT_TRUE(eventually([&] { return readable(m->stopFd()); }, 2s));
    EXPECT_NE(m->stopReason().find("node 0 (host h0, address 127.0.0.1:"), std::string::npos) << m->stopReason();
    EXPECT_TRUE(m->memberLost());
  }
}

TEST(GroupTcp, MembersThatLeaveAreNotLostAndTheLeaderFinishes) {
  Job job(3);
  job.form();
  EXPECT_EQ(job.members[0]->finish(true).error, "");
  EXPECT_EQ(job.members[1]->finish(true).error, "");
  EXPECT_EQ(job.leader->finish(true).error, "");
}

TEST(GroupTcp, AWrongTokenCannotJoinAndSaysWhy) {
  TcpNodeGroup leader(optionsFor(0, 2, 0));
  ASSERT_EQ(leader.start().error, "");
  GroupOptions o = optionsFor(1, 2, leader.boundPort());
  o.job_key = jobKey("another-token-00000000000", "run");
  TcpNodeGroup member(o);
  ASSERT_EQ(member.start().error, "");
  const std::string why = member.form(Clock::now() + 3s).error;
  EXPECT_NE(why.find("job token differs"), std::string::npos) << why;
  EXPECT_EQ(leader.form(Clock::now() + 100ms).error.find("node(s) 1 did not join"), std::string("node group: ").size());
  EXPECT_EQ(leader.stopReason(), "");
}

// Issue 38, defect 21: a node refused by the leader (its node rank taken or out of range) only waited, saying nothing,
// until its join timeout. Now the leader answers REFUSED with the reason, and the node's form() ends at once with it;
// the group still forms with the right nodes. A node late for a formed group is told why it waits.
TEST(GroupTcp, ANodeRefusedByTheLeaderIsToldWhyAndEndsAtOnce) {
  TcpNodeGroup leader(optionsFor(0, 3, 0));
  ASSERT_EQ(leader.start().error, "");
  const int port = leader.boundPort();
  TcpNodeGroup first(optionsFor(1, 3, port));
  ASSERT_EQ(first.start().error, "");
  auto first_formed = std::async(std::launch::async, [&] { return first.form(Clock::now() + 20s); });
  ASSERT_TRUE(eventually([&] { return leader.stats().members == 1; }));

  const auto refusedAt = [&](int rank, int nnodes) {
    TcpNodeGroup node(optionsFor(rank, nnodes, port));
    EXPECT_EQ(node.start().error, "");
    const auto t0 = Clock::now();
    const std::string why = node.form(Clock::now() + 20s).error;
    EXPECT_LT(Clock::now() - t0, 5s) << "waited for the join timeout: " << why;
    return why;
  };
  std::string why = refusedAt(1, 3);  // a second node given --node-rank 1
  EXPECT_EQ(why.rfind("node group: node 0 (host h0) refused this node (--node-rank 1): node rank 1 is already in the "
                      "group (host h1, address 127.0.0.1:",
                      0),
            0u)
      << why;
  EXPECT_NE(why.find("); give each node its own --node-rank"), std::string::npos) << why;
  why = refusedAt(5, 6);  // a node started with another --nnodes
  EXPECT_EQ(why, "node group: node 0 (host h0) refused this node (--node-rank 5): the job has 3 nodes, node ranks 0..2; "
                 "give every other node its own --node-rank from 1 to 2 and the same --nnodes");
  EXPECT_EQ(leader.stats().members, 1) << "the node already there keeps its place";

  TcpNodeGroup second(optionsFor(2, 3, port));
  ASSERT_EQ(second.start().error, "");
  auto second_formed = std::async(std::launch::async, [&] { return second.form(Clock::now() + 20s); });
  ASSERT_EQ(leader.form(Clock::now() + 20s).error, "");
  EXPECT_EQ(first_formed.get().error, "");
  EXPECT_EQ(second_formed.get().error, "");
  EXPECT_EQ(leader.stopReason(), "");

  // Node 2 leaves (its workers finished); a node 2 started again now finds the group formed without it: it waits
  // (a formation may come), and its timeout says why.
  EXPECT_EQ(second.finish(true).error, "");
  ASSERT_TRUE(eventually([&] { return leader.stats().members == 1; }));
  TcpNodeGroup late(optionsFor(2, 3, port));
  ASSERT_EQ(late.start().error, "");
  why = late.form(Clock::now() + 2s).error;
  EXPECT_NE(why.find("refused this node (--node-rank 2): the group has formed without it"), std::string::npos) << why;
}

std::vector<RankSummary> ranksOf(std::initializer_list<int> ranks, std::int64_t step) {
  std::vector<RankSummary> out;
  for (int r : ranks) {
    RankSummary s;
    s.rank = r;
    s.node = 9;  // a node's claim about itself: the group uses the connection's identity instead
    s.step = step;
    s.section = "forward_backward";
    s.busy_s = 0.1 * (r + 1);
    s.busy_steps = 20;
    out.push_back(s);
  }
  return out;
}

TEST(GroupTcp, ProgressTravelsWithHeartbeatsToEveryNode) {
  Job job(3);
  job.form();
  job.leader->setLocalProgress(ranksOf({0, 1}, 12));
  job.members[0]->setLocalProgress(ranksOf({2, 3}, 11));
  job.members[1]->setLocalProgress(ranksOf({4, 5}, 12));
  // The leader holds each member's own summary, named by the member's identity.
  ASSERT_TRUE(eventually([&] { return job.leader->peersProgress().size() == 4; }, 5s));
  for (const RankSummary& r : job.leader->peersProgress()) {
    EXPECT_EQ(r.node, r.rank / 2) << r.rank;
    EXPECT_EQ(r.step, r.rank / 2 == 1 ? 11 : 12);
    EXPECT_DOUBLE_EQ(r.busy_s, 0.1 * (r.rank + 1));
  }
  // A member gets node 0's relay: every other node's ranks, its own left out (it knows them first-hand).
  ASSERT_TRUE(eventually([&] { return job.members[0]->peersProgress().size() == 4; }, 5s));
  std::vector<int> seen;
  for (const RankSummary& r : job.members[0]->peersProgress()) seen.push_back(r.rank);
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 4, 5}));
  // Ages grow between heartbeats: a node that stopped sending shows as silent, and its view as old.
  const RankSummary before = job.leader->peersProgress().front();
  std::this_thread::sleep_for(300ms);
  EXPECT_GT(job.leader->peersProgress().front().age_s, before.age_s);
  EXPECT_GT(job.leader->peersProgress().front().view_age_s, before.view_age_s);
}

TEST(GroupTcp, APeerWithoutProgressOrWithGarbageInItsHeartbeatsChangesNothing) {
  std::vector<std::string> lines;
  std::mutex lines_mu;
  GroupOptions o = optionsFor(0, 2, 0);
  o.log = [&](LogLevel, const std::string& line) {
    std::lock_guard<std::mutex> lock(lines_mu);
    lines.push_back(line);
  };
  TcpNodeGroup leader(o);
  ASSERT_EQ(leader.start().error, "");
  RawClient old(leader.boundPort());
  Session session(jobKey(kToken, "run"), Direction::kToLeader);
  ASSERT_TRUE(old.join(session, 1));
  ASSERT_EQ(leader.form(Clock::now() + 10s).error, "");
  ASSERT_EQ(session.open(old.readFrame()).message.type, MessageType::kFormed);
  leader.setLocalProgress(ranksOf({0}, 3));
  // As a node of an older version: heartbeats with no text; then one with garbage where the summary goes.
  old.sendSealed(session, Message{MessageType::kHeartbeat, 1, 0, {}, {}});
  old.sendSealed(session, Message{MessageType::kHeartbeat, 1, 0, {}, "P2 not,a,summary;"});
  old.sendSealed(session, Message{MessageType::kHeartbeat, 1, 0, {}, "garbage again"});
  // The leader's heartbeat carries its summary in the text field every version of the protocol already has: an
  // older member opens and decodes it as any heartbeat.
  std::string text;
  for (int i = 0; i < 4 && text.empty(); ++i) {
    Opened beat = session.open(old.readFrame());
    ASSERT_EQ(beat.verdict, Verdict::kOk);
    ASSERT_EQ(beat.message.type, MessageType::kHeartbeat);
    text = beat.message.text;
  }
  // Its ages (ms: the silence, the view's) are as of the heartbeat, not of setLocalProgress.
  EXPECT_TRUE(std::regex_match(text, std::regex("P2 0,0,3,forward_backward,0,[0-9]+,100,20,[0-9]+;"))) << text;
  old.sendSealed(session, Message{MessageType::kHeartbeat, 1, 0, {}, {}});
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(readable(leader.stopFd())) << leader.stopReason();
  EXPECT_TRUE(leader.peersProgress().empty());
  std::lock_guard<std::mutex> lock(lines_mu);
  int said = 0;
  for (const std::string& l : lines) said += l.find("ignoring the progress in node 1's heartbeats") != std::string::npos;
  EXPECT_EQ(said, 1) << "said once";
}

TEST(GroupTcp, StrangersCanNeitherJoinStopNorCrashTheGroup) {
  TcpNodeGroup leader(optionsFor(0, 3, 0, 30s));
  ASSERT_EQ(leader.start().error, "");
  const int port = leader.boundPort();

  // A stranger's flood before the job forms: 1,000 connections, a third send garbage, a third close at once, a
  // third stay open and silent.
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &lim);
  {
    std::vector<std::unique_ptr<RawClient>> flood;
    for (int i = 0; i < 1000; ++i) {
      auto c = std::make_unique<RawClient>(port);
      ASSERT_TRUE(c->connected()) << "connection " << i;
      if (i % 3 == 0) c->write("GET / HTTP/1.0\r\n\r\n" + std::string(i % 50, 'z'));
      if (i % 3 == 1) continue;  // closed when it goes out of scope now
      flood.push_back(std::move(c));
    }
    ASSERT_TRUE(eventually([&] { return leader.stats().refused >= 600; }, 10s)) << leader.stats().refused;
  }

  // The real nodes still get in: one through TcpNodeGroup, one by hand (its frames are "captured").
  TcpNodeGroup member(optionsFor(1, 3, port, 30s));
  ASSERT_EQ(member.start().error, "");
  auto member_formed = std::async(std::launch::async, [&] { return member.form(Clock::now() + 10s); });
  RawClient real(port);
  Session real_session(jobKey(kToken, "run"), Direction::kToLeader);
  ASSERT_TRUE(real.join(real_session, 2));
  ASSERT_EQ(leader.form(Clock::now() + 10s).error, "");
  ASSERT_EQ(member_formed.get().error, "");
  real.readFrame();  // FORMED
  real.sendSealed(real_session, Message{MessageType::kHeartbeat, 2, 0, {}, {}});
  const std::string captured_stop = real_session.seal(Message{MessageType::kStop, 2, 0, {}, "captured"});
  const std::uint64_t refused_before = leader.stats().refused;

  // Replays of the captured JOIN and HEARTBEAT on new connections, and the STOP the real node never sent.
  for (const std::string& frame : {real.sent[0], real.sent[1], captured_stop}) {
    RawClient replay(port);
    ASSERT_FALSE(replay.readFrame().empty());  // the CHALLENGE: the listener serves
    replay.write(frame);
    EXPECT_TRUE(replay.closedByPeer());
  }
  // A forged JOIN for the rank already there, and a forged STOP, with a guessed token.
  for (MessageType type : {MessageType::kJoin, MessageType::kStop}) {
    RawClient forger(port);
    Session guess(jobKey("guessed-token-0000000000", "run"), Direction::kToLeader);
    Opened c = guess.open(forger.readFrame());
    ASSERT_EQ(c.verdict, Verdict::kBadMac);  // the leader's CHALLENGE does not verify under the wrong key either
    guess.setServerNonce(std::string(kNonceBytes, 'x'));
    forger.write(guess.seal(Message{type, 1, 0, guess.makeClientNonce(), "forged"}));
    EXPECT_TRUE(forger.closedByPeer());
  }
  // Garbage that looks like a frame header with a huge length.
  {
    RawClient garbage(port);
    garbage.write(std::string("\x7f\xff\xff\xff", 4) + std::string(100, 'A'));
    EXPECT_TRUE(garbage.closedByPeer());
  }
  EXPECT_GE(leader.stats().refused, refused_before + 6);

  // Nothing changed: no node stopped, both members are still in, and the real STOP path still works.
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(leader.stopReason(), "");
  EXPECT_EQ(member.stopReason(), "");
  EXPECT_EQ(leader.stats().members, 2);
  real.write(captured_stop);  // on its own connection, with the next counter: genuine
  ASSERT_TRUE(eventually([&] { return readable(member.stopFd()); }));
  EXPECT_NE(member.stopReason().find("captured"), std::string::npos);
}

/// A node without a node rank (--rdzv-backend c10d, no --node-rank): host `host`, `nproc` processes.
GroupOptions byArrival(const std::string& host, int nnodes, int port, int nproc, int min_nnodes = 0, int round = 0) {
  GroupOptions o = optionsFor(0, nnodes, port);
  o.rank_by_arrival = true;
  o.node_rank = 0;  // what the launcher's default says; ignored by arrival
  o.host = host;
  o.nproc = nproc;
  o.min_nnodes = min_nnodes;
  o.round = round;
  o.reforming = round > 0;
  return o;
}

/// Starts `g` and its form() on another thread; returns the future of form().
std::future<Status> startForming(TcpNodeGroup& g) {
  EXPECT_EQ(g.start().error, "");
  return std::async(std::launch::async, [&g] { return g.form(Clock::now() + 15s); });
}

// Issue 35: three nodes without node ranks, all on 127.0.0.1 (the endpoint's address is local to each): the first to
// bind the group port leads as node 0, the others are numbered 1 and 2 in order of arrival, ranks laid out over them
// in that order (counts 1, 2, 3: first ranks 0, 1, 3 of 6); a member is then named by the node rank it was given. A
// second formation (elastic 2:3, as after a restart) numbers them again, densely, in its own order of arrival.
TEST(GroupTcp, WithoutNodeRanksTheFirstToBindLeadsAndTheOthersAreNumberedByArrival) {
  // A port free now (the launcher's helper): nodes without node ranks must all know it before any binds it.
  const int port = freeTcpPort();
  ASSERT_GT(port, 0);
  for (int round : {0, 1}) {
    SCOPED_TRACE("formation " + std::to_string(round));
    TcpNodeGroup a(byArrival("ha", 3, port, 1, 2, round));
    TcpNodeGroup b(byArrival("hb", 3, port, 2, 2, round));
    TcpNodeGroup c(byArrival("hc", 3, port, 3, 2, round));
    // Round 0: a binds first, then b, then c arrive. Round 1: a leads again, c arrives before b.
    auto fa = startForming(a);
    ASSERT_EQ(a.boundPort(), port);
    TcpNodeGroup& second = round == 0 ? b : c;
    TcpNodeGroup& third = round == 0 ? c : b;
    auto f2 = startForming(second);
    EXPECT_EQ(second.boundPort(), 0) << "the port was taken: it joins";
    ASSERT_TRUE(eventually([&] { return a.stats().members == 1; }));
    auto f3 = startForming(third);
    for (auto* f : {&fa, &f2, &f3}) ASSERT_EQ(f->get().error, "");
    const AgreedRanks ra = a.agreedRanks(), r2 = second.agreedRanks(), r3 = third.agreedRanks();
    EXPECT_EQ(ra.node_rank, 0);
    EXPECT_EQ(r2.node_rank, 1);
    EXPECT_EQ(r3.node_rank, 2);
    for (const AgreedRanks* r : {&ra, &r2, &r3}) {
      EXPECT_EQ(r->nnodes, 3);
      EXPECT_EQ(r->world_size, 6);
      EXPECT_EQ(r->round, round);
      EXPECT_EQ(r->master_addr, "127.0.0.1");
    }
    EXPECT_EQ(ra.first_rank, 0);
    EXPECT_EQ(r2.first_rank, 1);  // after node 0's one process
    EXPECT_EQ(r3.first_rank, 1 + (round == 0 ? 2 : 3));
    third.requestStop("worker rank 5 exited with code 1");
    for (auto* g : {&a, &b, &c}) {
      ASSERT_TRUE(eventually([&] { return readable(g->stopFd()); }));
      EXPECT_NE(g->stopReason().find("node 2 (host " + std::string(round == 0 ? "hc" : "hb") + ") stopped the job"),
                std::string::npos)
          << g->stopReason();
    }
  }
}

// One way per job: a node with a node rank is refused by a node 0 that numbers by arrival, and a node without one by a
// node 0 that was given --node-rank 0, each at once with one line saying what to change (the REFUSED of "Strangers").
TEST(GroupTcp, NodeRanksByArrivalAndGivenNodeRanksDoNotMix) {
  const int port = freeTcpPort();
  ASSERT_GT(port, 0);
  {
    TcpNodeGroup leader(byArrival("ha", 2, port, 1));
    ASSERT_EQ(leader.start().error, "");
    ASSERT_EQ(leader.boundPort(), port);
    TcpNodeGroup given(optionsFor(1, 2, port));
    ASSERT_EQ(given.start().error, "");
    const auto t0 = Clock::now();
    const std::string why = given.form(Clock::now() + 15s).error;
    EXPECT_LT(Clock::now() - t0, 5s) << why;
    EXPECT_NE(why.find("node 0 (host ha) refused this node (--node-rank 1): this job's nodes take node ranks in "
                       "order of arrival"),
              std::string::npos)
        << why;
  }
  TcpNodeGroup leader(optionsFor(0, 2, port));
  ASSERT_EQ(leader.start().error, "");
  GroupOptions o = byArrival("hb", 2, port, 1);
  o.leader_addr = "127.0.0.2";  // not where node 0 listens...
  o.bind_addr = "127.0.0.2";
  TcpNodeGroup none(o);
  ASSERT_EQ(none.start().error, "");  // ...but local too: it binds 127.0.0.2 and leads a group nobody joins
  EXPECT_EQ(none.boundPort(), port);
  GroupOptions far = byArrival("hd", 2, port, 1);
  far.leader_addr = "192.0.2.1";  // TEST-NET-1: no address of this machine, so it never leads
  TcpNodeGroup remote(far);
  ASSERT_EQ(remote.start().error, "");
  EXPECT_EQ(remote.boundPort(), 0);
  GroupOptions member = byArrival("hc", 2, port, 1);
  member.leader_addr = "localhost";  // local, and the port is node 0's: it joins
  TcpNodeGroup joining(member);
  ASSERT_EQ(joining.start().error, "");
  EXPECT_EQ(joining.boundPort(), 0);
  const std::string why = joining.form(Clock::now() + 15s).error;
  EXPECT_NE(why.find("node 0 (host h0) refused this node (no --node-rank): node 0 was given --node-rank 0"),
            std::string::npos)
      << why;
}

}  // namespace
}  // namespace taehv::group
