// A node group member (every node but 0): connecting and joining (with retries until the deadline), following the
// leader's frames, and what happens when the leader is lost.
#include "tcp_node_group_impl.h"

namespace taehv::group {

void TcpNodeGroup::Impl::connect() {
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

void TcpNodeGroup::Impl::retryJoin(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    join_hint_ = why;
    if (o_.reforming && !ever_connected_ && Clock::now() - join_started_ >= o_.node_timeout) {
      // Node 0 was in the last formation: unreachable for a whole node timeout now, it is lost like a silent node.
      join_error_ = "node 0 (address " + o_.leader_addr + ":" + std::to_string(o_.port) + ") lost: not reachable " +
                    "for " + seconds(Clock::now() - join_started_) + " (--node-timeout " + seconds(o_.node_timeout) +
                    ") while the group re-forms (last error: " + why + ")";
      leader_lost_ = true;
    }
  }
  if (leader_lost_) {
    cv_.notify_all();
    return;
  }
  if (Clock::now() + kJoinRetry >= join_deadline_) return;  // form() reports the timeout
  auto timer = std::make_shared<asio::steady_timer>(io_, kJoinRetry);
  timer->async_wait([this, timer](boost::system::error_code ec) {
    if (!ec) connect();
  });
}

void TcpNodeGroup::Impl::memberFrame(const ConnPtr& c, const std::string& payload) {
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
      const std::uint32_t rank = o_.rank_by_arrival ? kArrivalRank : static_cast<std::uint32_t>(o_.node_rank);
      Message join{MessageType::kJoin, rank, 0, c->session.makeClientNonce(), o_.host};
      join.procs = static_cast<std::uint32_t>(std::max(o_.nproc, 0));
      send(c, join);
    } else if (in.message.type == MessageType::kRefused) {
      // Node 0 says why (PROTOCOL.md, "Strangers"): a rank out of range or taken ends this node with that line; a
      // group formed without it is waited out, as before, and said once.
      const std::string why = in.message.text.empty() ? "node 0 refused this node" : in.message.text;
      if (in.message.procs == 0) {
        joinFailed(c, why);
        return;
      }
      closeConn(c);
      if (refusal_said_ != why) {
        refusal_said_ = why;
        log(LogLevel::kInfo, "node group: " + why + "; trying again every " +
                                 std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(kJoinRetry).count()) +
                                 " ms until the join timeout");
      }
      retryJoin(why);
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
        agreed_.node_rank = static_cast<int>(std::min<std::uint32_t>(in.message.node_rank, INT_MAX));
        agreed_.nnodes = static_cast<int>(std::min<std::uint32_t>(in.message.nnodes, INT_MAX));
        agreed_.round = static_cast<int>(std::min<std::uint32_t>(in.message.round, INT_MAX));
        if (o_.rank_by_arrival) o_.node_rank = agreed_.node_rank;  // node 0 numbered this node on arrival
      }
      cv_.notify_all();
      break;
    }
    case MessageType::kStop:
      if (stopReasonLocked().empty()) setWaitingFor(0);
      triggerStop(in.message.text, 0);
      break;
    case MessageType::kHeartbeat:
      heardProgress(-1, in.message.text);  // node 0's relay of every node's progress
      break;
    default:
      break;
  }
}

void TcpNodeGroup::Impl::setWaitingFor(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  waiting_for_ = rank;
}

void TcpNodeGroup::Impl::joinFailed(const ConnPtr& c, const std::string& why) {
  closeConn(c);
  {
    std::lock_guard<std::mutex> lock(mu_);
    join_error_ = "node group: " + why;
  }
  cv_.notify_all();
}

void TcpNodeGroup::Impl::leaderLost(const std::string& why) {
  ConnPtr c = conn_;
  closeConn(c);
  {
    std::lock_guard<std::mutex> lock(mu_);
    leader_gone_ = true;
  }
  cv_.notify_all();
  const std::string reason = "node 0 (host " + c->host + ", address " + c->peer + ") lost: " + why + "; " + lastHeard(c);
  if (stopReasonLocked().empty() && !(finishing_ && c->out.empty())) {
    triggerStop(reason, 0, true);
  }
  checkFlushed();
}

}  // namespace taehv::group
