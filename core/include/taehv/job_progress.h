// The job's progress across nodes (issue 33): from supervise()'s loop, this node's ranks' progress goes to the node
// group, which carries it with its heartbeats (PROTOCOL.md, "Progress"); the node that speaks for the job (node 0
// of the TCP group, the etcd formation's first node, or the only node) names stragglers as they change and, when the
// job stops, where every rank of every node was.
//
// Contract: used from one thread (supervise()'s: its on_tick and after it returns). The group outlives it.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "taehv/group/node_group.h"
#include "taehv/group/progress_summary.h"
#include "taehv/process/progress.h"

namespace taehv {

/// This node's ranks as the group carries them (`node`: this node's --node-rank).
std::vector<group::RankSummary> summarise(const std::vector<process::RankProgress>& ranks, int node);

/// Every rank known: `local` and the group's others (a rank in both: the local one).
std::vector<group::RankSummary> jobRanks(const std::vector<group::RankSummary>& local,
                                         const std::vector<group::RankSummary>& peers);

/// How often the views are handed over (this node's to the group, the others' to the watch). Each hand-over adds
/// up to this to the age of the view a heartbeat carries (the heartbeat period adds its own): at the heartbeat period,
/// a view was up to 4 s old when a hang was judged (progress.h, kPeerViewWait).
inline constexpr std::chrono::milliseconds kViewPeriod{100};

class JobProgress {
 public:
  /// `group`: null without a node group. `node`: this node's --node-rank. `speaks`: this node logs the job's
  /// stragglers and, after a stop, the spread.
  JobProgress(group::NodeGroup* group, int node, bool speaks) : group_(group), node_(node), speaks_(speaks) {}

  /// Called on every pass of the supervision loop. At most once per kViewPeriod it hands this node's ranks to the
  /// group and the other nodes' ranks to `watch` (setPeers); at most once per group::kHeartbeatPeriod (if it speaks)
  /// it logs a change in the stragglers.
  void tick(process::ProgressWatch& watch);

  /// "" unless it speaks for a group; else one line on where every rank was, from `local` (this node's ranks now)
  /// and the other nodes' last summaries: for the log when the job stopped.
  std::string spreadAtStop(const std::vector<process::RankProgress>& local) const;

  /// The nodes (by --node-rank) that were stragglers at the last tick, each with its figures; empty unless it speaks.
  std::map<int, std::string> stragglerNodes() const;

 private:
  group::NodeGroup* group_;
  int node_;
  bool speaks_;
  std::chrono::steady_clock::time_point next_{};       ///< the next straggler judgement
  std::chrono::steady_clock::time_point next_view_{};  ///< the next hand-over
  group::PersistentStragglers persistent_ranks_, persistent_nodes_;
  group::StragglerLog stragglers_;
  std::vector<group::Straggler> straggler_nodes_;
};

}  // namespace taehv
