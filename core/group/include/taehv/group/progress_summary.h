// Each node's progress summary, carried by the node group with its heartbeats (PROTOCOL.md, "Progress"), and the
// two judgements made on the job-wide view: which ranks are behind when a job stops, and which ranks or nodes are
// persistently slower than the rest (stragglers). Pure functions and one small stateful log; no sockets, no clock.
//
// Contract:
//  - The summary is text (the heartbeat's text field, an etcd record's "progress" field), at most kMaxSummaryBytes:
//    entries that do not fit are left out whole (a receiver sees fewer ranks, never a cut one).
//  - decodeSummary() refuses anything that is not exactly what encodeSummary() writes; a receiver ignores it.
//  - A straggler is judged on busy time (a step's time outside its gradient exchange): in synchronous data
//    parallel training every rank's step takes as long as the slowest one's, so step time cannot tell them apart;
//    the time a rank spends before it waits for the others can.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "taehv/checked.h"

namespace taehv::group {

/// Longest summary text a node sends (under wire.h's kMaxTextBytes, so a heartbeat frame stays under 2.2 KiB):
/// about 32 ranks; a node with more sends its first 32, a leader relaying every node's sends the most behind.
inline constexpr std::size_t kMaxSummaryBytes = 1536;

/// One rank's progress as its node summarises it for the others.
struct RankSummary {
  int rank = 0;             ///< global rank
  int node = 0;             ///< its node's --node-rank (the receiver sets it from the sender it trusts)
  std::int64_t step = 0;    ///< the optimizer step it is in (0-based)
  std::string section;      ///< its section's protocol word (progress.h); "" before its first report
  double last_step_s = 0;   ///< its last step's time, seconds (0: none yet)
  double age_s = 0;         ///< seconds since its last report, when the summary was made
  double busy_s = 0;        ///< median of its last busy times (progress.h, kBusyWindow), seconds (0: none yet)
  int busy_steps = 0;       ///< how many steps that median covers
  /// Seconds since its node read it from its workers' reports: how old this view of it is. A rank's place can have
  /// moved on since (a heartbeat carries a view up to a tick and a period old, a relay one more period); its silence
  /// (age_s) is exact only if it has not.
  double view_age_s = 0;
};

/// `ranks` with their ages (age_s and view_age_s) grown by the time from `at` (when the view was made or heard) to
/// `now`: what it says now.
std::vector<RankSummary> agedSince(std::vector<RankSummary> ranks, std::chrono::steady_clock::time_point at,
                                   std::chrono::steady_clock::time_point now);

/// "P2 " then one "rank,node,step,section,last_ms,age_ms,busy_ms,busy_steps,view_ms;" per rank, in the order given,
/// up to `max_bytes`.
std::string encodeSummary(const std::vector<RankSummary>& ranks, std::size_t max_bytes = kMaxSummaryBytes);

/// Parses encodeSummary()'s text ("" is an empty summary); fails on anything else.
Checked<std::vector<RankSummary>> decodeSummary(std::string_view text);

/// The ranks ordered most behind first (lowest step, then longest silent): what a bounded relay keeps.
void sortMostBehindFirst(std::vector<RankSummary>& ranks);

/// One line on where every rank is: "step 5: rank 3 (node 1) in data, 12.0 s silent; step 6: ranks 0-2, 4-7 ...;
/// behind: rank 3 (node 1) at step 5, 1 step behind the most advanced". "" when `ranks` is empty.
std::string describeSpread(std::vector<RankSummary> ranks);

// Stragglers. The constants are named here once.
/// A rank (node) is a straggler when its busy time is more than this many times the median of the others'.
/// 1.5x: ordinary jitter between identical GPUs or CPUs is a few percent; a throttled GPU, a noisy neighbour, a
/// slow disk on one node or a competing process shows as a sustained 1.5x or more.
inline constexpr double kStragglerFactor = 1.5;
/// Busy times are medians over a rank's last steps (progress.h's kBusyWindow: 20; the first step and steps with an
/// evaluation or a checkpoint are not counted), so persistently slower means slower in most of them, not in one.
/// A rank is judged only once its window holds at least this many steps, and only against at least one other
/// rank that has as many. 10: the median of 5 was fooled in CI by the CPU-hog test (issue 33: no false straggler),
/// where a burst of 3 slow steps of one rank (out of 5) right after the hog started read 1.65x; the median of 10 needs
/// 6 slow steps of 10, as the median of the full window (20) needs 11.
inline constexpr int kStragglerMinSteps = 10;
/// And a verdict is said only once it has held at every judgement while the straggler's own step advanced this many
/// steps (PersistentStragglers). 5: the CPU-hog test failed CI twice with a burst that the median of the window took
/// for a straggler (1.65x over 5 steps, then 1.85x over 10 steps, rank 1 after a run of 15-18 s steps of the whole
/// job); both verdicts were gone one step later. A rank slowed in every step is named 5 steps later than it is judged.
inline constexpr int kStragglerConfirmSteps = 5;

/// One figure to compare: a rank's (or a node's) busy time.
struct BusyFigure {
  int id = 0;           ///< the rank (or node)
  double busy_s = 0;    ///< seconds
  int steps = 0;        ///< how many steps the figure covers
  std::int64_t step = 0;  ///< the step the rank is in (a node: its ranks' lowest), for PersistentStragglers
};

/// A figure more than `factor` times the median of the others'.
struct Straggler {
  int id = 0;
  double busy_s = 0;
  double others_median_s = 0;
  double ratio = 0;  ///< busy_s / others_median_s
  int steps = 0;     ///< the steps its figure covers
  std::int64_t step = 0;  ///< the step it is in (BusyFigure::step)
};

/// The stragglers among `figures` (those with at least `min_steps`), slowest first. Each is compared with the
/// median of the *other* judged figures (the upper one of an even count; with two ranks, the other one): so one
/// slow rank among two is seen, and one fast rank among three makes nobody slow.
std::vector<Straggler> findStragglers(const std::vector<BusyFigure>& figures, double factor = kStragglerFactor,
                                      int min_steps = kStragglerMinSteps);

/// Per node: the median of its ranks' busy times (their steps: the fewest among them), for findStragglers().
std::vector<BusyFigure> nodeFigures(const std::vector<RankSummary>& ranks);

/// Holds each verdict of findStragglers() back until it persists: a rank (or node) is confirmed once it has been a
/// straggler at every judgement while its step advanced kStragglerConfirmSteps; one judgement without it, or a step
/// lower than where it started (a restart from a checkpoint), starts it over.
class PersistentStragglers {
 public:
  /// Of `judged` (findStragglers() now), those that have persisted, in the same order.
  std::vector<Straggler> confirm(const std::vector<Straggler>& judged, int steps = kStragglerConfirmSteps);

 private:
  std::map<int, std::int64_t> since_;  ///< id -> its step when its current run of verdicts began
};

/// Says each change in the set of stragglers once: a new set is one line with every straggler's figures; the same
/// set again is silent; an empty set after a non-empty one says they caught up.
class StragglerLog {
 public:
  /// The line to log for the stragglers among ranks and among nodes now ("" when the sets did not change).
  std::string update(const std::vector<Straggler>& ranks, const std::vector<Straggler>& nodes);

 private:
  std::vector<int> ranks_;
  std::vector<int> nodes_;
};

}  // namespace taehv::group
