// TcpNodeGroup: the public calls, the connections' reads and writes, the clock (heartbeats, silence, deadlines) and
// stopping. The leader's and the members' own parts are tcp_group_leader.cc and tcp_group_member.cc.
#include "taehv/group/tcp_node_group.h"

#include "tcp_node_group_impl.h"

namespace taehv::group {

int defaultGroupPort(int master_port) { return master_port < 65535 ? master_port + 1 : master_port - 1; }

namespace {

/// True when `host` resolves to an address this machine (this network namespace) can bind: the node that owns the
/// rendezvous endpoint, as torchrun's c10d backend decides which node hosts its store.
bool isLocalAddress(asio::io_context& io, const std::string& host) {
  boost::system::error_code ec;
  tcp::resolver resolver(io);
  const auto endpoints = resolver.resolve(host, "0", ec);
  if (ec) return false;
  for (const auto& entry : endpoints) {
    tcp::socket probe(io);
    probe.open(entry.endpoint().protocol(), ec);
    if (!ec) probe.bind(tcp::endpoint(entry.endpoint().address(), 0), ec);
    if (!ec) return true;
  }
  return false;
}

}  // namespace

boost::system::error_code TcpNodeGroup::Impl::listen() {
  raiseDescriptorLimit();
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(o_.bind_addr, ec);
  if (ec) return ec;
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(o_.port));
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
  }
  return ec;
}

Status TcpNodeGroup::Impl::chooseRole() {
  leader_ = false;
  if (isLocalAddress(io_, o_.leader_addr)) {
    const boost::system::error_code ec = listen();
    if (!ec) {
      leader_ = true;
    } else if (ec == asio::error::address_in_use) {
      // As torchrun's c10d store host: of several processes on the endpoint's machine, the first to bind leads.
      log(LogLevel::kDebug, "node group: " + o_.leader_addr + " is this machine's, but port " +
                                std::to_string(o_.port) + " is taken here (another node of the job leads): joining");
    } else {
      return {"node group: cannot listen on " + o_.bind_addr + ":" + std::to_string(o_.port) + " (" + ec.message() +
              ")"};
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  o_.node_rank = leader_ ? 0 : -1;  // a member learns its rank from FORMED
  return {};
}

std::string TcpNodeGroup::Impl::selfName() const {
  std::lock_guard<std::mutex> lock(mu_);
  return o_.node_rank >= 0 ? "node " + std::to_string(o_.node_rank) : std::string("a node without a node rank yet");
}

Status TcpNodeGroup::Impl::start() {
  if (!stop_pipe_.ok()) return {"node group: cannot create its stop pipe"};
  if (o_.rank_by_arrival) {
    if (Status s = chooseRole(); !s.ok()) return s;
  } else if (leader_) {
    if (const boost::system::error_code ec = listen()) {
      return {"node group: cannot listen on " + o_.bind_addr + ":" + std::to_string(o_.port) + " (" + ec.message() +
              "); another job may hold it: pick a free one with --group-port or TAEHV_GROUP_PORT on every node"};
    }
  }
  if (leader_) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      bound_port_ = acceptor_.local_endpoint().port();
    }
    doAccept();
  }
  next_beat_ = Clock::now() + o_.heartbeat;
  if (leader_ && elastic() && o_.min_nnodes <= 1) last_call_at_ = Clock::now() + kLastCall;
  scheduleTick();
  thread_ = std::thread([this] { io_.run(); });
  return {};
}

Status TcpNodeGroup::Impl::form(Clock::time_point deadline) {
  if (!leader_) {
    asio::post(io_, [this, deadline] {
      join_deadline_ = deadline;
      join_started_ = Clock::now();
      connect();
    });
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_until(lock, deadline, [this] { return formed_ || !stop_reason_.empty() || !join_error_.empty(); });
  if (!stop_reason_.empty()) return {stop_reason_};
  if (!join_error_.empty()) return {join_error_};
  if (formed_) return {};
  if (leader_) {
    std::string missing;
    if (elastic()) {
      return {"node group: " + std::to_string(present_.size() + 1) + " node(s) joined node 0's group on port " +
              std::to_string(bound_port_) + " in time, fewer than the " + std::to_string(o_.min_nnodes) +
              " the job needs (--nnodes " + std::to_string(o_.min_nnodes) + ":" + std::to_string(o_.nnodes) + ")"};
    }
    if (o_.rank_by_arrival) {
      return {"node group: " + std::to_string(present_.size() + 1) + " of " + std::to_string(o_.nnodes) +
              " nodes joined node 0's group on port " + std::to_string(bound_port_) + " in time (node ranks by "
              "arrival); check that taehv-run runs on the others with the same --rdzv-endpoint, --nnodes and job "
              "token"};
    }
    for (int r = 1; r < o_.nnodes; ++r) {
      if (!present_.count(r)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    return {"node group: node(s) " + missing + " did not join node 0's group on port " + std::to_string(bound_port_) +
            " in time; check that taehv-run runs there with the same --master-addr, --master-port, --nnodes and "
            "job token"};
  }
  const std::string at = "node 0's group port " + o_.leader_addr + ":" + std::to_string(o_.port);
  if (!ever_connected_) {
    return {"node group: " + at + " did not accept a connection in time (last error: " + join_hint_ +
            "); check that node 0's taehv-run is running and reachable from this node"};
  }
  return {"node group: " + at + " accepted connections but did not admit this node in time (" + join_hint_ +
          "); check that every node has the same job token and a node rank of its own"};
}

std::string TcpNodeGroup::Impl::stopReason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_reason_;
}

bool TcpNodeGroup::Impl::leaderLost() const {
  std::lock_guard<std::mutex> lock(mu_);
  return leader_lost_;
}

bool TcpNodeGroup::Impl::memberLost() const {
  std::lock_guard<std::mutex> lock(mu_);
  return member_lost_;
}

void TcpNodeGroup::Impl::requestStop(const std::string& reason) {
  asio::post(io_, [this, reason] {
    triggerStop(selfName() + " (host " + o_.host + ") stopped the job: " + reason, o_.node_rank);
  });
}

Status TcpNodeGroup::Impl::finish(bool success) {
  if (!thread_.joinable()) return {stopReason()};
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
  return {stopReason()};
}

AgreedRanks TcpNodeGroup::Impl::agreedRanks() const {
  std::lock_guard<std::mutex> lock(mu_);
  AgreedRanks out = agreed_;
  out.master_addr = o_.leader_addr;  // node 0, always
  return out;
}

int TcpNodeGroup::Impl::boundPort() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bound_port_;
}

GroupStats TcpNodeGroup::Impl::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return GroupStats{refused_, static_cast<int>(present_.size())};
}

void TcpNodeGroup::Impl::log(LogLevel level, const std::string& message) const {
  if (o_.log) o_.log(level, message);
}

void TcpNodeGroup::Impl::shutdown() {
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

void TcpNodeGroup::Impl::triggerStop(const std::string& reason, int origin_rank, bool leader_lost, bool member_lost) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stop_reason_.empty()) return;
    stop_reason_ = reason;
    leader_lost_ = leader_lost;
    member_lost_ = leader_lost || member_lost;
  }
  cv_.notify_all();
  stop_pipe_.raise();
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

void TcpNodeGroup::Impl::publishMembers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    present_.clear();
    for (auto& [rank, c] : members_) present_.insert({rank, true});
  }
  cv_.notify_all();
}

void TcpNodeGroup::Impl::closeConn(const ConnPtr& c) {
  if (c->closed) return;
  c->closed = true;
  boost::system::error_code ec;
  c->socket.shutdown(tcp::socket::shutdown_both, ec);
  c->socket.close(ec);
}

void TcpNodeGroup::Impl::send(const ConnPtr& c, const Message& m) {
  if (c->closed) return;
  c->out.push_back(c->session.seal(m));
  if (!c->writing) doWrite(c);
}

void TcpNodeGroup::Impl::doWrite(const ConnPtr& c) {
  c->writing = true;
  asio::async_write(c->socket, asio::buffer(c->out.front()), [this, c](boost::system::error_code ec, std::size_t) {
    c->writing = false;
    if (!ec) c->out.pop_front();
    if (c->closing && (ec || c->out.empty())) {  // a REFUSED written (or not writable): the connection ends here
      dropPending(c);
      closeConn(c);
      return;
    }
    if (ec) return;  // the read side sees the broken connection
    if (!c->out.empty() && !c->closed) {
      doWrite(c);
    } else {
      checkFlushed();
    }
  });
}

void TcpNodeGroup::Impl::checkFlushed() {
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

void TcpNodeGroup::Impl::doRead(const ConnPtr& c) {
  c->socket.async_read_some(asio::buffer(c->buffer), [this, c](boost::system::error_code ec, std::size_t n) {
    if (c->closed || c->closing) return;
    if (ec) {
      onDisconnect(c, ec == asio::error::eof ? "its connection closed" : "its connection broke (" + ec.message() + ")");
      return;
    }
    c->reader.feed(c->buffer.data(), n);
    for (;;) {
      const Checked<std::optional<std::string>> frame = c->reader.next();
      if (!frame.ok()) {
        onBadFrame(c, Attempt::kGarbage, frame.error);
        return;
      }
      if (!frame.value) break;  // the rest has not arrived yet
      if (leader_) {
        leaderFrame(c, *frame.value);
      } else {
        memberFrame(c, *frame.value);
      }
      if (c->closed || c->closing) return;
    }
    doRead(c);
  });
}

void TcpNodeGroup::Impl::heard(const ConnPtr& c) {
  c->last_heard = Clock::now();
  c->last_heard_wall = Wall::now();
}

std::string TcpNodeGroup::Impl::lastHeard(const ConnPtr& c) const {
  return "last heard at " + wallTime(c->last_heard_wall) + " (" + seconds(Clock::now() - c->last_heard) + " before)";
}

void TcpNodeGroup::Impl::onDisconnect(const ConnPtr& c, const std::string& why) {
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
  retryJoin("node 0 closed the connection during the handshake: is the job token the same on every node" +
            (o_.rank_by_arrival ? std::string("?")
                                : ", and is node rank " + std::to_string(o_.node_rank) + " given to one node only?") +
            (elastic() ? " Or the group has formed without this node: it joins at the next formation" : ""));
}

void TcpNodeGroup::Impl::onBadFrame(const ConnPtr& c, Attempt kind, const std::string& detail) {
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

void TcpNodeGroup::Impl::scheduleTick() {
  tick_.expires_after(kTick);
  tick_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    onTick();
    scheduleTick();
  });
}

void TcpNodeGroup::Impl::onTick() {
  const auto now = Clock::now();
  const bool beat = now >= next_beat_;
  if (beat) next_beat_ = now + o_.heartbeat;
  Message heartbeat{MessageType::kHeartbeat, static_cast<std::uint32_t>(o_.node_rank), 0, {}, {}};
  if (beat) heartbeat.text = heartbeatText();
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
    if (!formed_local_ && last_call_at_ && now >= *last_call_at_ && stopReasonLocked().empty()) formNow();
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

void TcpNodeGroup::Impl::setLocalProgress(const std::vector<RankSummary>& ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  local_progress_ = ranks;
  local_progress_at_ = Clock::now();
  for (RankSummary& r : local_progress_) r.node = o_.node_rank;
}

std::vector<RankSummary> TcpNodeGroup::Impl::peersProgress() const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = Clock::now();
  std::vector<RankSummary> out;
  for (const auto& [from, heard] : peer_progress_) {
    const std::vector<RankSummary> aged = agedSince(heard.ranks, heard.at, now);
    out.insert(out.end(), aged.begin(), aged.end());
  }
  return out;
}

std::string TcpNodeGroup::Impl::heartbeatText() const {
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  // Ages as of now, not as of when the summary was made or heard: a silent rank's age keeps growing on the wire.
  std::vector<RankSummary> all = agedSince(local_progress_, local_progress_at_, now);
  if (!leader_) return all.empty() ? std::string() : encodeSummary(all);
  for (const auto& [from, heard] : peer_progress_) {
    const std::vector<RankSummary> aged = agedSince(heard.ranks, heard.at, now);
    all.insert(all.end(), aged.begin(), aged.end());
  }
  if (all.empty()) return "";
  sortMostBehindFirst(all);
  return encodeSummary(all);
}

void TcpNodeGroup::Impl::heardProgress(int from, const std::string& text) {
  if (text.empty()) return;
  Checked<std::vector<RankSummary>> ranks = decodeSummary(text);
  if (!ranks.ok()) {
    bool said = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::swap(said, progress_garbage_logged_);
      progress_garbage_logged_ = true;
    }
    if (!said) {
      log(LogLevel::kWarn, "node group: ignoring the progress in node " + std::to_string(from < 0 ? 0 : from) +
                               "'s heartbeats: " + ranks.error + " (said once)");
    }
    return;
  }
  std::vector<RankSummary> kept;
  for (RankSummary& r : ranks.value) {
    if (from >= 0) r.node = from;  // the leader trusts the connection's identity, not the text's
    if (from < 0 && r.node == o_.node_rank) continue;  // a member knows its own ranks better than the relay
    kept.push_back(std::move(r));
  }
  std::lock_guard<std::mutex> lock(mu_);
  peer_progress_[from] = {std::move(kept), Clock::now()};
}

std::string TcpNodeGroup::Impl::stopReasonLocked() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_reason_;
}

TcpNodeGroup::TcpNodeGroup(GroupOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
TcpNodeGroup::~TcpNodeGroup() = default;
Status TcpNodeGroup::start() { return impl_->start(); }
Status TcpNodeGroup::form(std::chrono::steady_clock::time_point deadline) { return impl_->form(deadline); }
int TcpNodeGroup::stopFd() const { return impl_->stopFd(); }
std::string TcpNodeGroup::stopReason() const { return impl_->stopReason(); }
bool TcpNodeGroup::leaderLost() const { return impl_->leaderLost(); }
bool TcpNodeGroup::memberLost() const { return impl_->memberLost(); }
void TcpNodeGroup::requestStop(const std::string& reason) { impl_->requestStop(reason); }
Status TcpNodeGroup::finish(bool success) { return impl_->finish(success); }
AgreedRanks TcpNodeGroup::agreedRanks() const { return impl_->agreedRanks(); }
int TcpNodeGroup::boundPort() const { return impl_->boundPort(); }
GroupStats TcpNodeGroup::stats() const { return impl_->stats(); }
void TcpNodeGroup::setLocalProgress(const std::vector<RankSummary>& ranks) { impl_->setLocalProgress(ranks); }
std::vector<RankSummary> TcpNodeGroup::peersProgress() const { return impl_->peersProgress(); }

}  // namespace taehv::group
