// The job's progress across nodes. See taehv/job_progress.h.
#include "taehv/job_progress.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "taehv/log.h"

namespace taehv {

std::vector<group::RankSummary> summarise(const std::vector<process::RankProgress>& ranks, int node) {
  std::vector<group::RankSummary> out;
  for (const process::RankProgress& p : ranks) {
    group::RankSummary s;
    s.rank = p.rank;
    s.node = node;
    s.step = p.step;
    s.section = p.reported ? std::string(process::sectionName(p.section)) : std::string();
    s.last_step_s = p.last_step_s;
    s.age_s = p.silent_s;
    s.busy_s = p.busy_s;
    s.busy_steps = p.busy_steps;
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<group::RankSummary> jobRanks(const std::vector<group::RankSummary>& local,
                                         const std::vector<group::RankSummary>& peers) {
  std::vector<group::RankSummary> out = local;
  std::set<int> seen;
  for (const group::RankSummary& r : local) seen.insert(r.rank);
  for (const group::RankSummary& r : peers) {
    if (seen.insert(r.rank).second) out.push_back(r);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  return out;
}

void JobProgress::tick(process::ProgressWatch& watch) {
  const auto now = std::chrono::steady_clock::now();
  const bool hand_over = group_ != nullptr && now >= next_view_;
  const bool judge = now >= next_;
  if (!hand_over && !judge) return;
  // Read once for both: this node's ranks now, the other nodes' as the group last heard of them.
  const std::vector<group::RankSummary> mine = summarise(watch.ranks(), node_);
  const std::vector<group::RankSummary> others =
      group_ != nullptr ? group_->peersProgress() : std::vector<group::RankSummary>{};
  if (hand_over) {
    next_view_ = now + kViewPeriod;
    group_->setLocalProgress(mine);
    std::vector<process::PeerRank> peers;
    for (const group::RankSummary& r : others) {
      if (r.node != node_) peers.push_back({r.rank, r.node, r.step, r.section, r.age_s, r.view_age_s});
    }
    watch.setPeers(std::move(peers));
  }
  if (!judge) return;
  next_ = now + group::kHeartbeatPeriod;
  if (!speaks_) return;
  const std::vector<group::RankSummary> all = jobRanks(mine, others);
  std::vector<group::BusyFigure> figures;
  std::set<int> nodes;
  for (const group::RankSummary& r : all) {
    figures.push_back({r.rank, r.busy_s, r.busy_steps, r.step});
    nodes.insert(r.node);
  }
  const std::vector<group::Straggler> by_node = persistent_nodes_.confirm(
      nodes.size() > 1 ? group::findStragglers(group::nodeFigures(all)) : std::vector<group::Straggler>{});
  straggler_nodes_ = by_node;
  const std::string line = stragglers_.update(persistent_ranks_.confirm(group::findStragglers(figures)), by_node);
  if (!line.empty()) log::warn(line);
}

std::string JobProgress::spreadAtStop(const std::vector<process::RankProgress>& local) const {
  if (group_ == nullptr || !speaks_) return "";
  return group::describeSpread(jobRanks(summarise(local, node_), group_->peersProgress()));
}

std::map<int, std::string> JobProgress::stragglerNodes() const {
  std::map<int, std::string> out;
  for (const group::Straggler& s : straggler_nodes_) {
    char figures[96];
    std::snprintf(figures, sizeof figures, "busy %.3f s per step, %.2fx the other nodes' median %.3f s", s.busy_s,
                  s.ratio, s.others_median_s);
    out[s.id] = "a straggler in the last formation (" + std::string(figures) + ")";
  }
  return out;
}

}  // namespace taehv
