// TcpNodeGroup: the leader's listener and every connection live on one Boost.Asio io_context run by one thread;
// the launcher's thread talks to it through post() and a mutex-guarded snapshot (formed, stop reason, members).
#include "taehv/group/tcp_node_group.h"

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
#include <thread>

#include "taehv/group/session.h"
#include "taehv/group/wire.h"
#include "taehv/parse.h"

namespace taehv::group {
namespace {

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

std::string wallTime(Wall::time_point t) {
  const std::time_t s = Wall::to_time_t(t);
  std::tm tm{};
  ::localtime_r(&s, &tm);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() % 1000;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

std::string seconds(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

/// Lets the leader hold many connections: raises the soft descriptor limit to the hard one.
void raiseDescriptorLimit() {
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

Attempt attemptFor(Verdict v) {
  switch (v) {
    case Verdict::kBadMac: return Attempt::kBadMac;
    case Verdict::kReplay: return Attempt::kReplay;
    default: return Attempt::kGarbage;
  }
}

}  // namespace

int defaultGroupPort(int master_port) { return master_port < 65535 ? master_port + 1 : master_port - 1; }

class TcpNodeGroup::Impl {
 public:
  explicit Impl(GroupOptions options)
      : o_(std::move(options)),
        leader_(o_.node_rank == 0),
        acceptor_(io_),
        tick_(io_),
        accept_retry_(io_),
        attempts_([this](const std::string& line) { log(LogLevel::kWarn, line); }) {
    if (::pipe2(stop_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) stop_pipe_[0] = stop_pipe_[1] = -1;
  }

  ~Impl() {
    shutdown();
    for (int fd : stop_pipe_) {
      if (fd >= 0) ::close(fd);
    }
  }

  std::string start() {
    if (stop_pipe_[0] < 0) return "node group: cannot create its stop pipe";
    if (leader_) {
      raiseDescriptorLimit();
      boost::system::error_code ec;
      const auto address = asio::ip::make_address(o_.bind_addr, ec);
      if (ec) return "node group: bad listen address '" + o_.bind_addr + "': " + ec.message();
      const tcp::endpoint endpoint(address, static_cast<unsigned short>(o_.port));
      acceptor_.open(endpoint.protocol(), ec);
      if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
      if (!ec) acceptor_.bind(endpoint, ec);
      if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
      if (ec) {
        return "node group: cannot listen on " + o_.bind_addr + ":" + std::to_string(o_.port) + " (" + ec.message() +
               "); another job may hold it: pick a free one with --group-port or TAEHV_GROUP_PORT on every node";
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        bound_port_ = acceptor_.local_endpoint().port();
      }
      doAccept();
    }
    next_beat_ = Clock::now() + o_.heartbeat;
    scheduleTick();
    thread_ = std::thread([this] { io_.run(); });
    return "";
  }

  std::string form(Clock::time_point deadline) {
    if (!leader_) {
      asio::post(io_, [this, deadline] {
        join_deadline_ = deadline;
        connect();
      });
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_until(lock, deadline, [this] { return formed_ || !stop_reason_.empty() || !join_error_.empty(); });
    if (!stop_reason_.empty()) return stop_reason_;
    if (!join_error_.empty()) return join_error_;
    if (formed_) return "";
    if (leader_) {
      std::string missing;
      for (int r = 1; r < o_.nnodes; ++r) {
        if (!present_.count(r)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      return "node group: node(s) " + missing + " did not join node 0's group on port " + std::to_string(bound_port_) +
             " in time; check that taehv-run runs there with the same --master-addr, --master-port, --nnodes and "
             "job token";
    }
    const std::string at = "node 0's group port " + o_.leader_addr + ":" + std::to_string(o_.port);
    if (!ever_connected_) {
      return "node group: " + at + " did not accept a connection in time (last error: " + join_hint_ +
             "); check that node 0's taehv-run is running and reachable from this node";
    }
    return "node group: " + at + " accepted connections but did not admit this node in time (" + join_hint_ +
           "); check that every node has the same job token and a node rank of its own";
  }

  int stopFd() const { return stop_pipe_[0]; }

  std::string stopReason() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stop_reason_;
  }

  void requestStop(const std::string& reason) {
    asio::post(io_, [this, reason] {
      triggerStop("node " + std::to_string(o_.node_rank) + " (host " + o_.host + ") stopped the job: " + reason,
                  o_.node_rank);
    });
  }

  std::string finish(bool success) {
    if (!thread_.joinable()) return stopReason();
    {
      // Stopped by another node's STOP: let that node (and, for a member, the leader relaying it) end first.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, kOriginLinger, [this] {
        return waiting_for_ < 0 || (leader_ ? !present_.count(waiting_for_) : leader_gone_);
      });
    }
    if (success && leader_) {
      asio::post(io_, [this] { finishing_ = true; });
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return present_.empty() || !stop_reason_.empty(); });
    }
    asio::post(io_, [this, success] {
      finishing_ = true;
      if (success && !leader_ && conn_ && conn_->joined && stop_reason_.empty()) {
        send(conn_, Message{MessageType::kLeave, static_cast<std::uint32_t>(o_.node_rank), 0, {}, {}});
      }
      checkFlushed();
    });
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, kFlushTimeout, [this] { return flushed_; });
    }
    shutdown();
    return stopReason();
  }

  AgreedRanks agreedRanks() const {
    std::lock_guard<std::mutex> lock(mu_);
    return agreed_;
  }

  int boundPort() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bound_port_;
  }

  GroupStats stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return GroupStats{refused_, static_cast<int>(present_.size())};
  }

 private:
  void log(LogLevel level, const std::string& message) const {
    if (o_.log) o_.log(level, message);
  }

  void shutdown() {
    if (!thread_.joinable()) return;
    asio::post(io_, [this] {
      boost::system::error_code ec;
      acceptor_.close(ec);
      tick_.cancel();
      accept_retry_.cancel();
      for (auto& c : pending_) closeConn(c);
      for (auto& [rank, c] : members_) closeConn(c);
      if (conn_) closeConn(conn_);
      io_.stop();
    });
    thread_.join();
  }

  // ---- shared state ----------------------------------------------------------------------------------------

  /// The first reason wins: records it, wakes the launcher (stop pipe) and tells the other nodes.
  void triggerStop(const std::string& reason, int origin_rank) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!stop_reason_.empty()) return;
      stop_reason_ = reason;
    }
    cv_.notify_all();
    const char byte = 1;
    if (::write(stop_pipe_[1], &byte, 1) < 0) {
      // The pipe is non-blocking and was empty: nothing to do.
    }
    log(LogLevel::kDebug, "node group: stopping: " + reason);
    const Message stop{MessageType::kStop, static_cast<std::uint32_t>(o_.node_rank), 0, {}, reason};
    if (leader_) {
      for (auto& [rank, c] : members_) {
        if (rank != origin_rank) send(c, stop);
      }
    } else if (origin_rank == o_.node_rank && conn_ && conn_->joined) {
      send(conn_, stop);
    }
  }

  void publishMembers() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      present_.clear();
      for (auto& [rank, c] : members_) present_.insert({rank, true});
    }
    cv_.notify_all();
  }

  // ---- connections -----------------------------------------------------------------------------------------

  void closeConn(const ConnPtr& c) {
    if (c->closed) return;
    c->closed = true;
    boost::system::error_code ec;
    c->socket.shutdown(tcp::socket::shutdown_both, ec);
    c->socket.close(ec);
  }

  void send(const ConnPtr& c, const Message& m) {
    if (c->closed) return;
    c->out.push_back(c->session.seal(m));
    if (!c->writing) doWrite(c);
  }

  void doWrite(const ConnPtr& c) {
    c->writing = true;
    asio::async_write(c->socket, asio::buffer(c->out.front()), [this, c](boost::system::error_code ec, std::size_t) {
      c->writing = false;
      if (ec) return;  // the read side sees the broken connection
      c->out.pop_front();
      if (!c->out.empty() && !c->closed) {
        doWrite(c);
      } else {
        checkFlushed();
      }
    });
  }

  void checkFlushed() {
    if (!finishing_) return;
    auto busy = [](const ConnPtr& c) { return c && !c->closed && (c->writing || !c->out.empty()); };
    bool any = busy(conn_);
    for (auto& [rank, c] : members_) any = any || busy(c);
    if (any) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      flushed_ = true;
    }
    cv_.notify_all();
  }

  void doRead(const ConnPtr& c) {
    c->socket.async_read_some(asio::buffer(c->buffer), [this, c](boost::system::error_code ec, std::size_t n) {
      if (c->closed) return;
      if (ec) {
        onDisconnect(c, ec == asio::error::eof ? "its connection closed" : "its connection broke (" + ec.message() + ")");
        return;
      }
      c->reader.feed(c->buffer.data(), n);
      std::string payload;
      std::string error;
      for (;;) {
        const auto status = c->reader.next(&payload, &error);
        if (status == FrameReader::Status::kNeedMore) break;
        if (status == FrameReader::Status::kBad) {
          onBadFrame(c, Attempt::kGarbage, error);
          return;
        }
        if (leader_) {
          leaderFrame(c, payload);
        } else {
          memberFrame(c, payload);
        }
        if (c->closed) return;
      }
      doRead(c);
    });
  }

  void heard(const ConnPtr& c) {
    c->last_heard = Clock::now();
    c->last_heard_wall = Wall::now();
  }

  std::string lastHeard(const ConnPtr& c) const {
    return "last heard at " + wallTime(c->last_heard_wall) + " (" + seconds(Clock::now() - c->last_heard) + " before)";
  }

  // ---- the leader ------------------------------------------------------------------------------------------

  void doAccept() {
    acceptor_.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (ec) {  // out of descriptors, or a connection reset before we took it: try again shortly
        accept_retry_.expires_after(kAcceptRetry);
        accept_retry_.async_wait([this](boost::system::error_code e) {
          if (!e) doAccept();
        });
        return;
      }
      onAccept(std::move(socket));
      doAccept();
    });
  }

  void onAccept(tcp::socket socket) {
    auto c = std::make_shared<Conn>(io_, o_.job_key, Direction::kToMember);
    c->socket = std::move(socket);
    boost::system::error_code ec;
    const auto remote = c->socket.remote_endpoint(ec);
    c->peer = ec ? "?" : remote.address().to_string() + ":" + std::to_string(remote.port());
    c->connected_at = Clock::now();
    const std::size_t cap = std::max(kMaxPendingConnections, 2 * static_cast<std::size_t>(o_.nnodes));
    if (pending_.size() >= cap) {
      ConnPtr oldest = pending_.front();
      pending_.pop_front();
      refuse(oldest, Attempt::kTooMany, std::to_string(cap) + " held");
    }
    pending_.push_back(c);
    Message challenge{MessageType::kChallenge, 0, 0, c->session.makeServerNonce(), {}};
    send(c, challenge);
    doRead(c);
  }

  void refuse(const ConnPtr& c, Attempt kind, const std::string& detail) {
    attempts_.note(kind, c->peer, detail);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++refused_;
    }
    closeConn(c);
  }

  void dropPending(const ConnPtr& c) {
    for (auto it = pending_.begin(); it != pending_.end(); ++it) {
      if (*it == c) {
        pending_.erase(it);
        return;
      }
    }
  }

  void leaderFrame(const ConnPtr& c, const std::string& payload) {
    Opened in = c->session.open(payload);
    if (!c->joined) {
      if (in.verdict != Verdict::kOk) {
        dropPending(c);
        refuse(c, attemptFor(in.verdict), in.error);
        return;
      }
      admit(c, in.message);
      return;
    }
    if (in.verdict != Verdict::kOk) {
      // Only the member itself (or someone who can inject into its TCP stream) writes here.
      attempts_.note(attemptFor(in.verdict), c->peer, "on node " + std::to_string(c->rank) + "'s connection");
      memberLost(c, "its connection carried a message that does not verify (" + std::string(attemptName(attemptFor(in.verdict))) + ")");
      return;
    }
    heard(c);
    switch (in.message.type) {
      case MessageType::kStop:
        if (stopReasonLocked().empty()) setWaitingFor(c->rank);
        triggerStop(in.message.text, c->rank);
        break;
      case MessageType::kLeave:
        log(LogLevel::kInfo, "node group: node " + std::to_string(c->rank) + " (host " + c->host + ") finished and left");
        members_.erase(c->rank);
        closeConn(c);
        publishMembers();
        checkFlushed();
        break;
      default:
        break;  // heartbeats only refresh last_heard
    }
  }

  void admit(const ConnPtr& c, const Message& join) {
    if (join.type != MessageType::kJoin || join.nonce.size() != kNonceBytes) {
      dropPending(c);
      refuse(c, Attempt::kNotJoin, "got message type " + std::to_string(static_cast<int>(join.type)));
      return;
    }
    const auto rank = static_cast<long long>(join.rank);
    if (join.procs < 1 || join.procs > kMaxJoinProcs) {
      dropPending(c);
      refuse(c, Attempt::kBadRank, "rank " + std::to_string(rank) + " joined with " + std::to_string(join.procs) +
                                       " processes (1.." + std::to_string(kMaxJoinProcs) + ")");
      return;
    }
    if (rank < 1 || rank >= o_.nnodes) {
      dropPending(c);
      refuse(c, Attempt::kBadRank, "rank " + std::to_string(rank) + ", job has " + std::to_string(o_.nnodes) + " nodes");
      return;
    }
    if (members_.count(static_cast<int>(rank)) || formed_local_) {
      dropPending(c);
      refuse(c, Attempt::kDuplicateRank, "rank " + std::to_string(rank) + (formed_local_ ? ", group already formed" : ""));
      return;
    }
    dropPending(c);
    c->joined = true;
    c->rank = static_cast<int>(rank);
    c->host = join.text;
    c->procs = join.procs;
    c->session.setClientNonce(join.nonce);
    send(c, Message{MessageType::kWelcome, 0, 0, {}, o_.host});
    c->session.establish();
    heard(c);
    members_[c->rank] = c;
    log(LogLevel::kDebug, "node group: node " + std::to_string(c->rank) + " (host " + c->host + ", " + c->peer +
                              ") joined (" + std::to_string(members_.size()) + " of " + std::to_string(o_.nnodes - 1) + ")");
    publishMembers();
    if (static_cast<int>(members_.size()) == o_.nnodes - 1) {
      formed_local_ = true;
      // Ranks are contiguous per node in node order: node k starts at the counts of nodes 0..k-1 (members_ is
      // ordered by rank). 64-bit sums, clamped to the u32 field; the launcher checks the world size's limit.
      std::vector<int> counts = {o_.nproc};
      std::uint64_t world = static_cast<std::uint64_t>(std::max(o_.nproc, 0));
      for (auto& [r, m] : members_) {
        counts.push_back(static_cast<int>(m->procs));
        world += m->procs;
      }
      const auto clamp = [](std::uint64_t v) { return static_cast<std::uint32_t>(std::min<std::uint64_t>(v, UINT32_MAX)); };
      std::uint64_t first = static_cast<std::uint64_t>(std::max(o_.nproc, 0));
      for (auto& [r, m] : members_) {
        Message formed{MessageType::kFormed, 0, 0, {}, {}};
        formed.procs = clamp(world);
        formed.first_rank = clamp(first);
        send(m, formed);
        first += m->procs;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        formed_ = true;
        agreed_.first_rank = 0;
        agreed_.world_size = static_cast<int>(std::min<std::uint64_t>(world, INT_MAX));
        agreed_.counts = formatCounts(counts);
      }
      cv_.notify_all();
      log(LogLevel::kInfo, "node group: all " + std::to_string(o_.nnodes) + " nodes joined (port " +
                               std::to_string(bound_port_) + ")");
    }
  }

  void memberLost(const ConnPtr& c, const std::string& why) {
    members_.erase(c->rank);
    closeConn(c);
    publishMembers();
    const std::string reason = "node " + std::to_string(c->rank) + " (host " + c->host + ", address " + c->peer +
                               ") lost: " + why + "; " + lastHeard(c);
    if (stopReasonLocked().empty()) {
      triggerStop(reason, c->rank);
    } else {
      log(LogLevel::kDebug, "node group: " + reason);
    }
    checkFlushed();
  }

  // ---- a member --------------------------------------------------------------------------------------------

  void connect() {
    if (finishing_ || !stopReasonLocked().empty()) return;
    conn_ = std::make_shared<Conn>(io_, o_.job_key, Direction::kToLeader);
    conn_->peer = o_.leader_addr + ":" + std::to_string(o_.port);
    conn_->connected_at = Clock::now();
    ConnPtr c = conn_;
    boost::system::error_code ec;
    tcp::resolver resolver(io_);
    auto endpoints = resolver.resolve(o_.leader_addr, std::to_string(o_.port), ec);
    if (ec) {
      retryJoin("cannot resolve " + o_.leader_addr + ": " + ec.message());
      return;
    }
    asio::async_connect(c->socket, endpoints, [this, c](boost::system::error_code e, const tcp::endpoint&) {
      if (c->closed) return;
      if (e) {
        closeConn(c);
        retryJoin("connect: " + e.message());
        return;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        ever_connected_ = true;
      }
      doRead(c);
    });
  }

  void retryJoin(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      join_hint_ = why;
    }
    if (Clock::now() + kJoinRetry >= join_deadline_) return;  // form() reports the timeout
    auto timer = std::make_shared<asio::steady_timer>(io_, kJoinRetry);
    timer->async_wait([this, timer](boost::system::error_code ec) {
      if (!ec) connect();
    });
  }

  void memberFrame(const ConnPtr& c, const std::string& payload) {
    Opened in = c->session.open(payload);
    if (!c->joined) {
      if (in.verdict != Verdict::kOk) {
        joinFailed(c, in.verdict == Verdict::kBadMac
                          ? "node 0 answered with a message that does not verify: its job token differs from this "
                            "node's (set the same TAEHV_JOB_TOKEN or --job-token-file on every node)"
                          : "node 0 sent something that is not the group protocol (" + in.error +
                                "): is --group-port another service's port?");
        return;
      }
      if (in.message.type == MessageType::kChallenge && in.message.nonce.size() == kNonceBytes) {
        c->session.setServerNonce(in.message.nonce);
        Message join{MessageType::kJoin, static_cast<std::uint32_t>(o_.node_rank), 0, c->session.makeClientNonce(), o_.host};
        join.procs = static_cast<std::uint32_t>(std::max(o_.nproc, 0));
        send(c, join);
      } else if (in.message.type == MessageType::kWelcome) {
        c->session.establish();
        c->joined = true;
        c->host = in.message.text;
        heard(c);
        log(LogLevel::kDebug, "node group: joined node 0 (host " + c->host + ", " + c->peer + ")");
      }
      return;
    }
    if (in.verdict != Verdict::kOk) {
      leaderLost("its connection carried a message that does not verify (" +
                 std::string(attemptName(attemptFor(in.verdict))) + ")");
      return;
    }
    heard(c);
    switch (in.message.type) {
      case MessageType::kFormed: {
        {
          std::lock_guard<std::mutex> lock(mu_);
          formed_ = true;
          agreed_.first_rank = static_cast<int>(std::min<std::uint32_t>(in.message.first_rank, INT_MAX));
          agreed_.world_size = static_cast<int>(std::min<std::uint32_t>(in.message.procs, INT_MAX));
        }
        cv_.notify_all();
        break;
      }
      case MessageType::kStop:
        if (stopReasonLocked().empty()) setWaitingFor(0);
        triggerStop(in.message.text, 0);
        break;
      default:
        break;
    }
  }

  void setWaitingFor(int rank) {
    std::lock_guard<std::mutex> lock(mu_);
    waiting_for_ = rank;
  }

  void joinFailed(const ConnPtr& c, const std::string& why) {
    closeConn(c);
    {
      std::lock_guard<std::mutex> lock(mu_);
      join_error_ = "node group: " + why;
    }
    cv_.notify_all();
  }

  void leaderLost(const std::string& why) {
    ConnPtr c = conn_;
    closeConn(c);
    {
      std::lock_guard<std::mutex> lock(mu_);
      leader_gone_ = true;
    }
    cv_.notify_all();
    const std::string reason = "node 0 (host " + c->host + ", address " + c->peer + ") lost: " + why + "; " + lastHeard(c);
    if (stopReasonLocked().empty() && !(finishing_ && c->out.empty())) {
      triggerStop(reason, 0);
    }
    checkFlushed();
  }

  void onDisconnect(const ConnPtr& c, const std::string& why) {
    if (leader_) {
      if (c->joined) {
        memberLost(c, why + " without a LEAVE");
      } else {
        dropPending(c);
        refuse(c, Attempt::kClosedEarly, "");
      }
      return;
    }
    if (c->joined) {
      leaderLost(why);
      return;
    }
    closeConn(c);
    retryJoin("node 0 closed the connection during the handshake: is the job token the same on every node, and is "
              "node rank " + std::to_string(o_.node_rank) + " given to one node only?");
  }

  void onBadFrame(const ConnPtr& c, Attempt kind, const std::string& detail) {
    if (leader_) {
      if (c->joined) {
        attempts_.note(kind, c->peer, detail + ", on node " + std::to_string(c->rank) + "'s connection");
        memberLost(c, "its connection carried garbage (" + detail + ")");
      } else {
        dropPending(c);
        refuse(c, kind, detail);
      }
      return;
    }
    if (c->joined) {
      leaderLost("its connection carried garbage (" + detail + ")");
    } else {
      joinFailed(c, "node 0's port does not speak the group protocol (" + detail + "): is --group-port another "
                    "service's port?");
    }
  }

  // ---- the clock -------------------------------------------------------------------------------------------

  void scheduleTick() {
    tick_.expires_after(kTick);
    tick_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      onTick();
      scheduleTick();
    });
  }

  void onTick() {
    const auto now = Clock::now();
    const bool beat = now >= next_beat_;
    if (beat) next_beat_ = now + o_.heartbeat;
    const Message heartbeat{MessageType::kHeartbeat, static_cast<std::uint32_t>(o_.node_rank), 0, {}, {}};
    if (leader_) {
      while (!pending_.empty() && now - pending_.front()->connected_at > kHandshakeTimeout) {
        ConnPtr c = pending_.front();
        pending_.pop_front();
        refuse(c, Attempt::kHandshakeTimeout, "");
      }
      std::vector<ConnPtr> silent;
      for (auto& [rank, c] : members_) {
        if (now - c->last_heard > o_.node_timeout) {
          silent.push_back(c);
        } else if (beat) {
          send(c, heartbeat);
        }
      }
      for (auto& c : silent) memberLost(c, "not heard from for " + seconds(now - c->last_heard) + " (--node-timeout " +
                                               seconds(o_.node_timeout) + ")");
      return;
    }
    if (!conn_ || conn_->closed) return;
    if (!conn_->joined) {
      if (now - conn_->connected_at > kHandshakeTimeout) {
        closeConn(conn_);
        retryJoin("node 0 accepted the connection but did not complete the handshake within " + seconds(kHandshakeTimeout));
      }
      return;
    }
    if (now - conn_->last_heard > o_.node_timeout) {
      leaderLost("not heard from for " + seconds(now - conn_->last_heard) + " (--node-timeout " + seconds(o_.node_timeout) + ")");
      return;
    }
    if (beat) send(conn_, heartbeat);
  }

  std::string stopReasonLocked() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stop_reason_;
  }

  GroupOptions o_;
  const bool leader_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::steady_timer tick_;
  asio::steady_timer accept_retry_;
  std::thread thread_;
  int stop_pipe_[2] = {-1, -1};
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
  bool ever_connected_ = false;  ///< member: some connection to the leader was accepted
  int waiting_for_ = -1;      ///< stopped by this node's STOP: finish() lets it end first
  bool leader_gone_ = false;  ///< member: the leader's connection is gone
  std::map<int, bool> present_;  ///< leader: members joined and not gone
  std::uint64_t refused_ = 0;
  int bound_port_ = 0;

  // The event loop's own.
  std::deque<ConnPtr> pending_;     ///< leader: connected, no valid JOIN yet (oldest first)
  std::map<int, ConnPtr> members_;  ///< leader: by node rank
  bool formed_local_ = false;
  ConnPtr conn_;                    ///< member: the connection to the leader
  Clock::time_point join_deadline_{};
  Clock::time_point next_beat_{};
  bool finishing_ = false;
};

TcpNodeGroup::TcpNodeGroup(GroupOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
TcpNodeGroup::~TcpNodeGroup() = default;
std::string TcpNodeGroup::start() { return impl_->start(); }
std::string TcpNodeGroup::form(std::chrono::steady_clock::time_point deadline) { return impl_->form(deadline); }
int TcpNodeGroup::stopFd() const { return impl_->stopFd(); }
std::string TcpNodeGroup::stopReason() const { return impl_->stopReason(); }
void TcpNodeGroup::requestStop(const std::string& reason) { impl_->requestStop(reason); }
std::string TcpNodeGroup::finish(bool success) { return impl_->finish(success); }
AgreedRanks TcpNodeGroup::agreedRanks() const { return impl_->agreedRanks(); }
int TcpNodeGroup::boundPort() const { return impl_->boundPort(); }
GroupStats TcpNodeGroup::stats() const { return impl_->stats(); }

}  // namespace taehv::group
