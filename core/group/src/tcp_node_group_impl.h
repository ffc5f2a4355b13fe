// TcpNodeGroup's implementation, shared by its three files: tcp_node_group.cc (the public calls, connections, the
// clock, stopping), tcp_group_leader.cc (node 0: accepting, admitting, the formation) and tcp_group_member.cc (the
// other nodes: joining, following the leader). The leader's listener and every connection live on one Boost.Asio
// io_context run by one thread; the launcher's thread talks to it through post() and a mutex-guarded snapshot
// (formed, stop reason, members). Private to taehv::group.
#pragma once

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <array>
#include <boost/asio.hpp>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "taehv/group/session.h"
#include "taehv/group/tcp_node_group.h"
#include "taehv/group/wire.h"
#include "taehv/parse.h"
#include "stop_pipe.h"

namespace taehv::group {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using Wall = std::chrono::system_clock;

/// How often the event loop checks deadlines (heartbeats due, nodes silent, handshakes too slow).
constexpr std::chrono::milliseconds kTick{100};
/// After accept() fails (e.g. out of descriptors), wait this long before accepting again.
constexpr std::chrono::milliseconds kAcceptRetry{50};
/// Bytes read per wake-up.
constexpr std::size_t kReadBytes = 4096;

inline std::string wallTime(Wall::time_point t) {
  const std::time_t s = Wall::to_time_t(t);
  std::tm tm{};
  ::localtime_r(&s, &tm);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() % 1000;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

inline std::string seconds(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

/// Lets the leader hold many connections: raises the soft descriptor limit to the hard one.
inline void raiseDescriptorLimit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
}

struct Conn {
  Conn(asio::io_context& io, const std::string& key, Direction dir) : socket(io), session(key, dir) {}
  tcp::socket socket;
  Session session;
  FrameReader reader;
  std::array<char, kReadBytes> buffer{};
  std::deque<std::string> out;
  bool writing = false;
  bool closed = false;
  bool joined = false;  ///< handshake done (WELCOME sent / received)
  bool closing = false;  ///< leader: answered with REFUSED; nothing more is read, closed once it is written
  int rank = -1;
  std::uint32_t procs = 0;  ///< leader: the member's process count (from JOIN)
  std::string peer;  ///< the other side's address
  std::string host;  ///< the other side's host name (from JOIN / WELCOME)
  Clock::time_point connected_at{};
  Clock::time_point last_heard{};
  Wall::time_point last_heard_wall{};
};
using ConnPtr = std::shared_ptr<Conn>;

/// Largest process count a JOIN may carry (more than any node runs; the launcher's own limit is lower).
constexpr std::uint32_t kMaxJoinProcs = 1u << 20;

inline Attempt attemptFor(Verdict v) {
  switch (v) {
    case Verdict::kBadMac: return Attempt::kBadMac;
    case Verdict::kReplay: return Attempt::kReplay;
    default: return Attempt::kGarbage;
  }
}

class TcpNodeGroup::Impl {
 public:
  explicit Impl(GroupOptions options)
      : o_(std::move(options)),
        leader_(!o_.rank_by_arrival && o_.node_rank == 0),
        acceptor_(io_),
        tick_(io_),
        accept_retry_(io_),
        attempts_([this](const std::string& line) { log(LogLevel::kWarn, line); }) {}

  ~Impl() { shutdown(); }

  Status start();
  Status form(Clock::time_point deadline);

  int stopFd() const { return stop_pipe_.readFd(); }

  std::string stopReason() const;
  bool leaderLost() const;
  bool memberLost() const;
  void requestStop(const std::string& reason);
  Status finish(bool success);
  AgreedRanks agreedRanks() const;
  int boundPort() const;
  GroupStats stats() const;
  void setLocalProgress(const std::vector<RankSummary>& ranks);
  std::vector<RankSummary> peersProgress() const;

 private:
  void log(LogLevel level, const std::string& message) const;
  void shutdown();
  /// Binds and listens on the group port (bind_addr:port).
  boost::system::error_code listen();
  /// Ranks by arrival: leads (leader_, node rank 0) when leader_addr is an address of this machine and the group
  /// port is still free here; joins (no node rank until FORMED) when it is not, or another process holds the port.
  Status chooseRole();
  /// How messages name this node: "node R", or "a node without a node rank yet" (by arrival, before FORMED).
  std::string selfName() const;

  // ---- shared state ----------------------------------------------------------------------------------------

  /// The first reason wins: records it, wakes the launcher (stop pipe) and tells the other nodes.
  /// `leader_lost`: the stop is this member losing node 0 (leaderLost() says so when this reason wins).
  /// `leader_lost`: node 0 lost (a member's view); `member_lost`: another node lost (the leader's view).
  void triggerStop(const std::string& reason, int origin_rank, bool leader_lost = false, bool member_lost = false);
  /// Elastic: MIN..MAX nodes form; a fixed size only when all are in.
  bool elastic() const { return o_.min_nnodes > 0 && o_.min_nnodes < o_.nnodes; }
  void publishMembers();

  // ---- connections -----------------------------------------------------------------------------------------

  void closeConn(const ConnPtr& c);
  void send(const ConnPtr& c, const Message& m);
  void doWrite(const ConnPtr& c);
  void checkFlushed();
  void doRead(const ConnPtr& c);
  void heard(const ConnPtr& c);
  std::string lastHeard(const ConnPtr& c) const;
  void onDisconnect(const ConnPtr& c, const std::string& why);
  void onBadFrame(const ConnPtr& c, Attempt kind, const std::string& detail);

  // ---- the leader (tcp_group_leader.cc) ---------------------------------------------------------------------

  void doAccept();
  void onAccept(tcp::socket socket);
  void refuse(const ConnPtr& c, Attempt kind, const std::string& detail);
  /// Refuses a JOIN that verifies: logged like refuse(), and the member is told why with REFUSED (`why`, one line
  /// for it to print; `may_retry`: it may join a later formation) before the connection closes.
  void refuseJoin(const ConnPtr& c, const Message& join, Attempt kind, const std::string& detail,
                  const std::string& why, bool may_retry);
  void dropPending(const ConnPtr& c);
  void leaderFrame(const ConnPtr& c, const std::string& payload);
  void admit(const ConnPtr& c, const Message& join);
  /// A JOIN with a given node rank: refuses (REFUSED, true) one out of range, already present or left out.
  /// `refused`: the start of the line the member prints.
  bool refuseGivenRank(const ConnPtr& c, const Message& join, const std::string& refused);
  /// Lays the ranks out over the leader and every member in, sends each its FORMED (PROTOCOL.md, "Formation").
  void formNow();
  void memberLost(const ConnPtr& c, const std::string& why);

  // ---- a member (tcp_group_member.cc) ----------------------------------------------------------------------

  void connect();
  void retryJoin(const std::string& why);
  void memberFrame(const ConnPtr& c, const std::string& payload);
  void setWaitingFor(int rank);
  void joinFailed(const ConnPtr& c, const std::string& why);
  void leaderLost(const std::string& why);

  // ---- progress (PROTOCOL.md, "Progress") -----------------------------------------------------------------

  /// What this node's next heartbeat carries: a member its own summary, the leader every node's (most behind first).
  std::string heartbeatText() const;
  /// A heartbeat's text from node `from` (a member's own summary; -1: node 0's relay). Text that does not decode is
  /// ignored (a peer of another version), logged once.
  void heardProgress(int from, const std::string& text);
  /// Leader: a member that left (its workers finished) no longer counts in the job's progress (nor as a straggler).
  /// A lost member's is kept: the loss stops the job, and the summary at the stop says where its ranks were.
  void forgetProgress(int from) {
    std::lock_guard<std::mutex> lock(mu_);
    peer_progress_.erase(from);
  }

  // ---- the clock -------------------------------------------------------------------------------------------

  void scheduleTick();
  void onTick();
  std::string stopReasonLocked() const;

  GroupOptions o_;
  bool leader_;  ///< set by the constructor, or by start() when ranks go by arrival; fixed once the thread runs
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::steady_timer tick_;
  asio::steady_timer accept_retry_;
  std::thread thread_;
  StopPipe stop_pipe_;
  AttemptLog attempts_;

  // Shared with the launcher's thread, under mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string stop_reason_;
  std::string join_error_;
  bool formed_ = false;
  AgreedRanks agreed_;  ///< set with formed_
  bool flushed_ = false;
  std::string join_hint_;        ///< member: why the last join attempt failed
  std::string refusal_said_;     ///< member: the last REFUSED reason logged (each is logged once)
  bool ever_connected_ = false;  ///< member: some connection to the leader was accepted
  int waiting_for_ = -1;      ///< stopped by this node's STOP: finish() lets it end first
  bool leader_gone_ = false;  ///< member: the leader's connection is gone
  bool leader_lost_ = false;  ///< member: the stop that won was losing node 0
  bool member_lost_ = false;  ///< the stop that won was losing a node (node 0 included): memberLost()
  std::map<int, bool> present_;  ///< leader: members joined and not gone
  std::uint64_t refused_ = 0;
  std::vector<RankSummary> local_progress_;  ///< this node's ranks (setLocalProgress)
  Clock::time_point local_progress_at_{};    ///< when they were handed over
  struct HeardProgress {
    std::vector<RankSummary> ranks;
    Clock::time_point at{};
  };
  std::map<int, HeardProgress> peer_progress_;  ///< by sender (-1: node 0's relay on a member)
  bool progress_garbage_logged_ = false;
  int bound_port_ = 0;

  // The event loop's own.
  std::deque<ConnPtr> pending_;     ///< leader: connected, no valid JOIN yet (oldest first)
  std::map<int, ConnPtr> members_;  ///< leader: by node rank (by arrival: by order of arrival until formed)
  int next_arrival_ = 1;            ///< leader, ranks by arrival: the key of the next member admitted
  bool formed_local_ = false;
  std::optional<Clock::time_point> last_call_at_;  ///< leader, elastic: form at this time with whoever is in
  Clock::time_point join_started_{};                ///< member: when form() began
  ConnPtr conn_;                    ///< member: the connection to the leader
  Clock::time_point join_deadline_{};
  Clock::time_point next_beat_{};
  bool finishing_ = false;
};

}  // namespace taehv::group
