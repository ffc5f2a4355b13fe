// The node group's leader (node 0): accepting connections, refusing strangers, admitting members by their JOIN,
// and the formation (each node's first rank and the world size, PROTOCOL.md "Formation").
#include "tcp_node_group_impl.h"

namespace taehv::group {

void TcpNodeGroup::Impl::doAccept() {
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

void TcpNodeGroup::Impl::onAccept(tcp::socket socket) {
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

void TcpNodeGroup::Impl::refuse(const ConnPtr& c, Attempt kind, const std::string& detail) {
  attempts_.note(kind, c->peer, detail);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++refused_;
  }
  closeConn(c);
}

void TcpNodeGroup::Impl::refuseJoin(const ConnPtr& c, const Message& join, Attempt kind, const std::string& detail,
                                    const std::string& why, bool may_retry) {
  attempts_.note(kind, c->peer, detail);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++refused_;
  }
  // Kept with the unauthenticated connections until it closes: the handshake timeout ends one whose REFUSED never
  // gets written.
  c->closing = true;
  c->session.setClientNonce(join.nonce);
  Message refused{MessageType::kRefused, 0, 0, {}, why};
  refused.procs = may_retry ? 1 : 0;
  send(c, refused);
}

void TcpNodeGroup::Impl::dropPending(const ConnPtr& c) {
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (*it == c) {
      pending_.erase(it);
      return;
    }
  }
}

void TcpNodeGroup::Impl::leaderFrame(const ConnPtr& c, const std::string& payload) {
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
      forgetProgress(c->rank);
      closeConn(c);
      publishMembers();
      checkFlushed();
      break;
    case MessageType::kHeartbeat:
      heardProgress(c->rank, in.message.text);  // besides refreshing last_heard (above)
      break;
    default:
      break;
  }
}

bool TcpNodeGroup::Impl::refuseGivenRank(const ConnPtr& c, const Message& join, const std::string& refused) {
  const auto rank = static_cast<long long>(join.rank);
  const std::string nnodes = std::to_string(o_.nnodes);
  if (rank < 1 || rank >= o_.nnodes) {
    refuseJoin(c, join, Attempt::kBadRank, "rank " + std::to_string(rank) + ", job has " + nnodes + " nodes",
               refused + (rank == 0 ? "node rank 0 is node 0's own"
                                    : "the job has " + nnodes + " nodes, node ranks 0.." + std::to_string(o_.nnodes - 1)) +
                   "; give every other node its own --node-rank from 1 to " + std::to_string(o_.nnodes - 1) +
                   " and the same --nnodes",
               false);
    return true;
  }
  if (const auto present = members_.find(static_cast<int>(rank)); present != members_.end()) {
    const Conn& there = *present->second;
    refuseJoin(c, join, Attempt::kDuplicateRank, "rank " + std::to_string(rank),
               refused + "node rank " + std::to_string(rank) + " is already in the group (host " + there.host +
                   ", address " + there.peer + "); give each node its own --node-rank",
               false);
    return true;
  }
  if (const auto out = o_.leave_out.find(static_cast<int>(rank));
      out != o_.leave_out.end() && elastic() &&
      o_.nnodes - static_cast<int>(o_.leave_out.size()) >= std::max(o_.min_nnodes, 1)) {
    refuseJoin(c, join, Attempt::kDuplicateRank, "rank " + std::to_string(rank) + ", left out: " + out->second,
               refused + "it is left out of formation " + std::to_string(o_.round) + " (--leave-out-stragglers): " +
                   out->second,
               false);
    return true;
  }
  return false;
}

void TcpNodeGroup::Impl::admit(const ConnPtr& c, const Message& join) {
  if (join.type != MessageType::kJoin || join.nonce.size() != kNonceBytes) {
    dropPending(c);
    refuse(c, Attempt::kNotJoin, "got message type " + std::to_string(static_cast<int>(join.type)));
    return;
  }
  const auto rank = static_cast<long long>(join.rank);
  const bool by_arrival = join.rank == kArrivalRank;
  const std::string refused = "node 0 (host " + o_.host + ") refused this node (" +
                              (by_arrival ? std::string("no --node-rank") : "--node-rank " + std::to_string(rank)) +
                              "): ";
  if (join.procs < 1 || join.procs > kMaxJoinProcs) {
    refuseJoin(c, join, Attempt::kBadRank,
               "rank " + std::to_string(rank) + " joined with " + std::to_string(join.procs) + " processes (1.." +
                   std::to_string(kMaxJoinProcs) + ")",
               refused + "it runs " + std::to_string(join.procs) + " processes; a node runs 1 to " +
                   std::to_string(kMaxJoinProcs),
               false);
    return;
  }
  if (by_arrival != o_.rank_by_arrival) {
    // One way per job (PROTOCOL.md, "Node ranks by arrival"): a rank given here and none there is a mistake.
    refuseJoin(c, join, Attempt::kBadRank, by_arrival ? "no rank, ranks are given" : "rank " + std::to_string(rank) +
                                                                                        ", ranks go by arrival",
               refused + (by_arrival ? "node 0 was given --node-rank 0, so every node needs its own --node-rank; or "
                                       "give none on any node (--rdzv-backend c10d: node ranks in order of arrival)"
                                     : "this job's nodes take node ranks in order of arrival (node 0 has none); drop "
                                       "--node-rank on every node, or give every node its own"),
               false);
    return;
  }
  // Given ranks are checked here; ranks by arrival are numbered when the group forms.
  if (!o_.rank_by_arrival && refuseGivenRank(c, join, refused)) return;
  if (formed_local_) {
    refuseJoin(c, join, Attempt::kDuplicateRank,
               "rank " + std::to_string(rank) + (elastic() ? ", group already formed (it joins at the next formation)"
                                                           : ", group already formed"),
               refused + "the group has formed without it" +
                   (elastic() ? "; it joins at the next formation" : ""),
               true);
    return;
  }
  dropPending(c);
  c->joined = true;
  c->rank = o_.rank_by_arrival ? next_arrival_++ : static_cast<int>(rank);
  c->host = join.text;
  c->procs = join.procs;
  c->session.setClientNonce(join.nonce);
  send(c, Message{MessageType::kWelcome, 0, 0, {}, o_.host});
  c->session.establish();
  heard(c);
  members_[c->rank] = c;
  log(LogLevel::kDebug, "node group: " +
                            (o_.rank_by_arrival ? std::string("a node without a node rank")
                                                : "node " + std::to_string(c->rank)) +
                            " (host " + c->host + ", " + c->peer + ") joined (" + std::to_string(members_.size()) +
                            " of " + std::to_string(o_.nnodes - 1) + ")");
  publishMembers();
  const int in = static_cast<int>(members_.size()) + 1;
  if (in == o_.nnodes) {
    formNow();
  } else if (elastic() && in >= o_.min_nnodes && !last_call_at_) {
    last_call_at_ = Clock::now() + kLastCall;  // MIN are in: more may come until the last call
  }
}

void TcpNodeGroup::Impl::formNow() {
  formed_local_ = true;
  // Ranks are contiguous per node in node order: node k starts at the counts of nodes 0..k-1 (members_ is
  // ordered by --node-rank, or by arrival when ranks go by arrival, so the formation's node ranks 1, 2, ... follow it). 64-bit sums, clamped to the u32
  // field; the launcher checks the world size's limit.
  std::vector<int> counts = {o_.nproc};
  std::uint64_t world = static_cast<std::uint64_t>(std::max(o_.nproc, 0));
  for (auto& [r, m] : members_) {
    counts.push_back(static_cast<int>(m->procs));
    world += m->procs;
  }
  const auto clamp = [](std::uint64_t v) { return static_cast<std::uint32_t>(std::min<std::uint64_t>(v, UINT32_MAX)); };
  const auto nodes = static_cast<std::uint32_t>(members_.size() + 1);
  std::uint64_t first = static_cast<std::uint64_t>(std::max(o_.nproc, 0));
  std::uint32_t node_rank = 1;
  std::string order = o_.rank_by_arrival ? o_.host : "0";
  for (auto& [r, m] : members_) {
    Message formed{MessageType::kFormed, 0, 0, {}, {}};
    formed.procs = clamp(world);
    formed.first_rank = clamp(first);
    formed.nnodes = nodes;
    formed.node_rank = node_rank++;
    formed.round = static_cast<std::uint32_t>(std::max(o_.round, 0));
    send(m, formed);
    first += m->procs;
    order += "," + (o_.rank_by_arrival ? m->host : std::to_string(r));
  }
  if (o_.rank_by_arrival) {
    // From now on a member is named by the node rank it was given (its messages carry it too).
    std::map<int, ConnPtr> numbered;
    int next = 1;
    for (auto& [key, m] : members_) {
      m->rank = next;
      numbered[next++] = m;
    }
    members_ = std::move(numbered);
    publishMembers();
  }
  const std::string ordered = o_.rank_by_arrival ? "hosts " + order + " in order of arrival"
                                                 : "--node-rank " + order + " in that order";
  {
    std::lock_guard<std::mutex> lock(mu_);
    formed_ = true;
    agreed_.first_rank = 0;
    agreed_.world_size = static_cast<int>(std::min<std::uint64_t>(world, INT_MAX));
    agreed_.counts = formatCounts(counts);
    agreed_.node_rank = 0;
    agreed_.nnodes = static_cast<int>(nodes);
    agreed_.round = o_.round;
  }
  cv_.notify_all();
  if (elastic()) {
    log(LogLevel::kInfo, "node group: formed with " + std::to_string(nodes) + " of " + std::to_string(o_.min_nnodes) +
                             ".." + std::to_string(o_.nnodes) + " nodes (" + ordered + "; " +
                             "formation " + std::to_string(o_.round) + ", port " + std::to_string(bound_port_) + ")");
  } else {
    log(LogLevel::kInfo, "node group: all " + std::to_string(o_.nnodes) + " nodes joined (port " +
                             std::to_string(bound_port_) + (o_.rank_by_arrival ? "; " + ordered : std::string()) + ")");
  }
}

void TcpNodeGroup::Impl::memberLost(const ConnPtr& c, const std::string& why) {
  members_.erase(c->rank);  // its progress is kept: a loss stops the job, whose summary names where it was
  closeConn(c);
  publishMembers();
  if (elastic() && !formed_local_) {
    // Not in a formation yet: the group forms without it (or with it, if it joins again in time).
    log(LogLevel::kWarn, "node group: node " + std::to_string(c->rank) + " (host " + c->host + ", address " + c->peer +
                             ") left before the group formed: " + why);
    if (static_cast<int>(members_.size()) + 1 < o_.min_nnodes) last_call_at_.reset();
    return;
  }
  const std::string reason = "node " + std::to_string(c->rank) + " (host " + c->host + ", address " + c->peer +
                             ") lost: " + why + "; " + lastHeard(c);
  if (stopReasonLocked().empty()) {
    triggerStop(reason, c->rank, false, true);
  } else {
    log(LogLevel::kDebug, "node group: " + reason);
  }
  checkFlushed();
}

}  // namespace taehv::group
