// The node group: every node's taehv-run of one job, watching each other (PROTOCOL.md). The launcher sees only
// this interface; TcpNodeGroup (tcp_node_group.h) implements it today, an etcd-backed one could tomorrow.
//
// Contract:
//  - Order of use, from one thread (the launcher's main thread): start(), form() (then agreedRanks(): this node's
//    first rank and the world size from every node's process count), then while the workers run the
//    supervisor polls stopFd(); requestStop() when a local worker failed; finish() once the workers ended.
//  - Detection runs on the implementation's own thread from start() until finish() returns or the object dies.
//  - stopFd() becomes readable (and stays so) the moment the group decides to stop: a node lost, a node's STOP, or
//    requestStop() here. stopReason() then says why, naming the node (rank, host, address, when last heard).
//  - Destruction stops the thread and closes every socket; it does not send LEAVE (that is finish()'s job).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "taehv/group/progress_summary.h"
#include "taehv/plugin_api.h"

namespace taehv::group {

/// Default --node-timeout: nothing heard from a node for this long and it is lost. The same bound as torchrun's
/// rendezvous keep-alive (3 beats x 5 s) but at kHeartbeatPeriod that is 15 missed beats, not 3 (PROTOCOL.md).
inline constexpr std::chrono::seconds kDefaultNodeTimeout{15};
/// Heartbeats both ways, this often.
inline constexpr std::chrono::milliseconds kHeartbeatPeriod{1000};
/// A connection that has not sent a valid JOIN this long after connecting is closed.
inline constexpr std::chrono::seconds kHandshakeTimeout{5};
/// How long nodes wait for the group to form when the plan does not say (its master wait).
inline constexpr std::chrono::seconds kDefaultJoinTimeout{300};
/// A member retries its connection to the leader this often while joining.
inline constexpr std::chrono::milliseconds kJoinRetry{500};
/// At least this many connections without a JOIN are held at once (2 per member when there are more members:
/// every member may be mid-handshake at once when a large job starts); the oldest is dropped for a new one.
inline constexpr std::size_t kMaxPendingConnections = 1024;
/// How long finish() waits for a STOP or LEAVE to be written before closing.
inline constexpr std::chrono::seconds kFlushTimeout{2};
/// A node stopped by another node's STOP waits at most this long in finish() for that node to end first (the leader
/// for the origin's connection to close, a member for the leader's), so an outer launcher that watches every node
/// (the SSH fan-out) sees the failing node's exit first and names it.
inline constexpr std::chrono::seconds kOriginLinger{10};
/// Elastic (min_nnodes < nnodes): once MIN nodes are in, the leader waits this long for more before it forms with
/// those it has (at once when MAX are in). torchrun's last call is 30 s; a re-formation after a loss needs no
/// more than the survivors' reconnect (kJoinRetry), so a few seconds keep the restart quick.
inline constexpr std::chrono::seconds kLastCall{5};
/// SIGTERM -> SIGKILL for the workers when a node of the formation was lost (memberLost()): a worker waiting in a
/// collective with the lost ranks never leaves it (taehv-train's own stop limit is 20 s), and none can save.
inline constexpr std::chrono::seconds kLostMemberGrace{3};
/// Smallest --node-timeout accepted: below a few heartbeats a busy node would be declared lost.
inline constexpr std::chrono::seconds kMinNodeTimeout{3};

/// How this node takes part.
struct GroupOptions {
  int node_rank = 0;  ///< this node's identity: its --node-rank (0 = the leader); unique among the job's nodes
  /// No --node-rank (torchrun's c10d rendezvous): node_rank is ignored; the node where leader_addr is a local address
  /// and that binds the group port first leads (node 0), every other node joins without a rank and node 0 numbers
  /// the nodes 1, 2, ... in order of arrival at each formation (PROTOCOL.md, "Node ranks by arrival"). Every node of
  /// the job must run this way. The TCP group only (the etcd group orders nodes without a rank by arrival anyway).
  bool rank_by_arrival = false;
  int nnodes = 1;     ///< the most nodes (MAX of --nnodes MIN:MAX)
  int min_nnodes = 0;  ///< elastic: the fewest nodes the group forms with (0 = nnodes: a fixed size)
  int round = 0;       ///< leader: this formation's number (0 first, +1 each re-formation); FORMED carries it
  bool reforming = false;  ///< member: a re-formation (node 0 unreachable for node_timeout ends the wait)
  std::string leader_addr;  ///< node 0's address (MASTER_ADDR)
  int port = 0;             ///< the group port on node 0
  std::string bind_addr = "0.0.0.0";  ///< the leader listens here
  std::string host;         ///< this node's host name (reported to the others)
  std::string job_key;      ///< from jobKey()
  int nproc = 1;            ///< this node's process count (JOIN carries it; the leader adds up everyone's)
  std::chrono::milliseconds node_timeout{kDefaultNodeTimeout};
  std::chrono::milliseconds heartbeat{kHeartbeatPeriod};
  std::function<void(LogLevel, const std::string&)> log;
  /// Leader, elastic (--leave-out-stragglers): node identities refused at this formation, each with why (a straggler
  /// in the last one), so long as the others can still make min_nnodes. The TCP group only.
  std::map<int, std::string> leave_out;
};

/// The ranks the group agreed on when it formed (PROTOCOL.md, "Formation"): node k's ranks start at the sum of the
/// counts of nodes 0..k-1.
struct AgreedRanks {
  int first_rank = 0;  ///< this node's first global rank
  int world_size = 0;  ///< processes over all nodes
  int node_rank = 0;   ///< this node's rank in the formation (nodes numbered 0.. in --node-rank order)
  int nnodes = 0;      ///< nodes in the formation
  int round = 0;       ///< the formation's number (restarts made)
  std::string counts;  ///< every node's count, compressed ("2(x3),1"); the leader only, "" on a member
  std::string master_addr;  ///< the formation's master, whose address the workers get as MASTER_ADDR ("": the
                            ///< launcher's own --master-addr; the TCP group fills in its leader_addr)
  /// Node-local checkpoints (the etcd group with --node-local-checkpoints): the step the workers resume from, the
  /// newest every member holds (0: none anywhere, start from scratch); -1 when the formation agreed none.
  std::int64_t resume_step = -1;
};

class NodeGroup {
 public:
  virtual ~NodeGroup() = default;

  /// Leader: binds the group port; members: nothing yet. Starts the detection thread. Fails with why not.
  virtual Status start() = 0;

  /// Blocks until the group has formed (every node joined) or `deadline`, or it stopped. Fails with why not
  /// (naming the nodes missing, or the stop reason).
  virtual Status form(std::chrono::steady_clock::time_point deadline) = 0;

  /// What the group agreed on; valid once form() succeeded.
  virtual AgreedRanks agreedRanks() const = 0;

  /// Readable once the group decided to stop. Owned by the group.
  virtual int stopFd() const = 0;

  /// Why the group stopped; "" while it has not.
  virtual std::string stopReason() const = 0;

  /// True when the stop was this member losing node 0 (or not reaching it to re-form): the job cannot re-form
  /// without the leader, which also hosts the workers' store (PROTOCOL.md, "Elastic re-formation").
  virtual bool leaderLost() const = 0;

  /// True when the stop is a node of the formation lost (silent for --node-timeout, its etcd lease expired), not a
  /// failure or stop it reported: its ranks are gone, so no collective of the local workers can finish and a save
  /// that needs one never comes. The launcher then stops its workers within kLostMemberGrace, not --shutdown-grace.
  /// The default: never.
  virtual bool memberLost() const { return false; }

  /// A local failure (e.g. "worker rank 3 exited with code 1"): every node stops. The first reason wins.
  virtual void requestStop(const std::string& reason) = 0;

  /// The local workers have ended (`success`: all exited 0). A member leaves (LEAVE) or flushes its STOP; the
  /// leader, on success, waits until every member has left or been lost. Stopped by another node's STOP, it first
  /// waits (at most kOriginLinger) for that node to end. Fails with stopReason() when the group stopped the job.
  virtual Status finish(bool success) = 0;

  /// This node's ranks' progress (their `node` is set by the group), carried to the other nodes with the next
  /// heartbeat (PROTOCOL.md, "Progress"): so at most once per heartbeat period, whatever the call rate. Thread
  /// safe. The default carries nothing (a group without progress).
  virtual void setLocalProgress(const std::vector<RankSummary>& ranks) { (void)ranks; }

  /// The other nodes' ranks' progress as last heard, ages grown by the time since (the TCP leader and every etcd
  /// node: each node's own summary; a TCP member: node 0's relay, the most behind first, within kMaxSummaryBytes).
  /// Thread safe. The default: none.
  virtual std::vector<RankSummary> peersProgress() const { return {}; }
};

}  // namespace taehv::group
