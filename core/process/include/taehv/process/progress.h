// Progress of the workers and hang detection (issue 33). Each worker gets a Unix datagram socket of its own,
// named in its environment (kProgressSocketEnv); it reports the optimizer step it is in and the section of that
// step, one short text line per datagram (see parseProgressReport). The watch learns each rank's step time and
// names a rank that stopped reporting for longer than its bound, after capturing every local rank's stacks.
//
// Contract:
//  - Called from supervise()'s thread only (not thread safe). The sockets live in a private folder under the
//    temp directory, made by create() and removed by the destructor.
//  - A worker that never reports is never judged: detection starts with a rank's first report, so programs that do
//    not know the channel run as before.
//  - Garbage on the channel (a line that does not parse) is ignored with one log line per rank per
//    kGarbageLogInterval; the job is not disturbed.
//  - check() returns at most one hang per generation; before returning it has written the stack files and printed
//    the summary line. The caller stops the workers (supervise() does, as for a failed worker).
//  - Which rank is named: once one passes its bound, the rank furthest behind (the lowest step, then the earliest
//    section of it, then the longest silent): in synchronous training the others wait for it in the next collective.
//  - Across nodes (setPeers, fed from the node group's heartbeats): when a local rank passes its bound while a rank
//    of another node is further behind than every local one, check() names that rank; its node captures its
//    stacks when the group's stop reaches it (diagnoseStop, before teardown). Only a view of the peer made after the
//    local rank furthest behind last reported counts at once: an older one may show the peer where it was before a
//    collective both have since passed (CI: rank 0 hung at step 5, rank 1 named from a 4 s old view of its step 4
//    exchange). While only an older view puts a peer behind, check() waits for a newer one, at most kPeerViewWait
//    past the bound.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "taehv/checked.h"
#include "taehv/process/supervisor.h"

namespace taehv::process {

/// The variable naming a worker's progress socket: the path of a SOCK_DGRAM Unix socket to send reports to.
inline constexpr const char* kProgressSocketEnv = "TAEHV_PROGRESS_SOCKET";

/// Where a worker is inside its step. The names (sectionName) are the protocol's words.
enum class Section { kStartup, kData, kForwardBackward, kExchange, kOptimizer, kEval, kCheckpoint };

/// The protocol word for `section`: startup, data, forward_backward, exchange, optimizer, eval, checkpoint.
std::string_view sectionName(Section section);

/// One report: the worker is in optimizer step `step` (0-based; the steps done so far), in `section`.
struct ProgressReport {
  std::int64_t step = 0;
  Section section = Section::kStartup;
};

/// The datagram for `report`: "step=<N> section=<name>\n".
std::string formatProgressReport(const ProgressReport& report);

/// Parses one datagram: "step=<N> section=<name>" with an optional trailing newline, N in 0..2^62. Anything else
/// fails with a message quoting (at most 60 bytes of) the input.
Checked<ProgressReport> parseProgressReport(std::string_view text);

// The bounds a rank's silence is measured against. The floor is --hang-timeout; the rest are named here once.
/// --hang-timeout's default: no rank is called hung before 30 s of silence, whatever its steps take. Long enough
/// for a garbage-collection pause or a slow file system (and the CPU-hog test's stalls), short enough that a hang is
/// named within half a minute plus the time to capture stacks (under the 1 to 4 h collective timeouts a hung rank
/// would otherwise cost; issue 33's target is under 60 s, which a 60 s floor missed by 0.2 s in bench/resilience).
inline constexpr std::chrono::seconds kDefaultHangFloor{30};
/// During steps: kStepFactor times the kStepPercentile of the rank's last kStepWindow step times (a step that
/// included an evaluation or a checkpoint is not counted). 10x the 99th percentile: a step 10x slower than nearly
/// all before it is far beyond jitter (a data loader refilling, a log flush) while still bounded by the learned pace.
inline constexpr double kStepFactor = 10.0;
inline constexpr double kStepPercentile = 0.99;
inline constexpr std::size_t kStepWindow = 200;
/// A rank waiting in a collective for a peer that is in start-up, a checkpoint or an evaluation (rank 0 writes the
/// checkpoint while the others go on to the next step's gradient exchange) is judged by that peer's bound too.
/// Before the first step has ended (model build, rendezvous, data, the first step's allocations and warm-up), during
/// a checkpoint save and during an evaluation: kSectionFactor times the longest such pass seen on this rank, never
/// below kSectionMinimum nor the floor. 10 min: a multi-GB checkpoint on a shared file system, or a first step that
/// compiles kernels, takes minutes, and none has been seen yet the first time.
inline constexpr double kSectionFactor = 5.0;
inline constexpr std::chrono::seconds kSectionMinimum{600};
/// A rank's busy time per step (the step's time outside the exchange section: what it spends before waiting for
/// the others) is the median of its last this many clean steps; the straggler judgement (group/progress_summary.h)
/// compares these. 20 steps: a few seconds to minutes of training, long enough that one slow step does not count.
inline constexpr std::size_t kBusyWindow = 20;
/// One "garbage on the progress channel" log line per rank at most this often.
inline constexpr std::chrono::seconds kGarbageLogInterval{10};
/// Capturing the stacks of every local rank (eu-stack, gdb, py-spy) ends after this long, whatever it got.
inline constexpr std::chrono::seconds kStackCaptureTimeout{30};

/// A rank found hung.
struct Hang {
  std::size_t index = 0;     ///< the child's index in its generation
  std::string description;   ///< "rank 1 hung in section data of step 3: no progress for 5.1 s (bound 5.0 s)"
};

/// One rank's progress as the watch sees it (for the status file and tests).
struct RankProgress {
  int rank = -1;
  bool reported = false;          ///< any report yet in this generation
  std::int64_t step = 0;
  Section section = Section::kStartup;
  double last_step_s = 0;         ///< the last step time measured, 0 before one ended
  double silent_s = 0;            ///< seconds since its last report (or since its start, before one)
  double bound_s = 0;             ///< its current bound (0: not judged)
  double busy_s = 0;              ///< median of its last kBusyWindow busy times, seconds (0: none yet)
  int busy_steps = 0;             ///< how many steps that median covers
};

/// A rank of another node as the node group last carried it (its heartbeat's summary), for judging a hang across
/// nodes: a local rank waiting in a collective may be waiting for it.
struct PeerRank {
  int rank = -1;
  int node = -1;           ///< its node's --node-rank
  std::int64_t step = 0;
  std::string section;     ///< its section's protocol word; "" before its first report
  double silent_s = 0;     ///< seconds since its last report, as of its node's last summary (so at most this old)
  double view_age_s = 0;   ///< how old that summary's view of it is: its place may have moved on since
};

/// How long past its bound a local rank's hang waits for a view of the other nodes' ranks made after its own last
/// report, when only an older one says a peer is further behind (a view is up to a hand-over on each side, a
/// heartbeat period and, for a relay, one more old: about 3 s; it was 4 s when the hand-over was once a second).
/// Then the older view is judged as it is.
inline constexpr std::chrono::seconds kPeerViewWait{6};

/// The path of rank `rank`'s stack file in `dir`: <dir>/hang_rank<R>.stacks.txt (one place, so the log layout
/// can move).
std::string stackFilePath(const std::string& dir, int rank);

/// The job status file kept in `log_dir` (<log_dir>/status.json), or "" when there is no log folder.
std::string statusFilePath(const std::string& log_dir);
/// The status file is replaced at most this often (and when a hang is found).
inline constexpr std::chrono::seconds kStatusInterval{1};
/// The status file's "format" value; a reader refuses another.
inline constexpr int kStatusFormat = 1;

/// Where the watch's files go.
struct ProgressFiles {
  std::string stacks_dir;   ///< stack files; "" = a new folder under the temp directory, named in the summary
  std::string status_file;  ///< the job status file (JSON, replaced atomically); "" = none
};

class ProgressWatch {
 public:
  /// `floor`: --hang-timeout (0: reports are read, nobody is judged).
  static Checked<std::unique_ptr<ProgressWatch>> create(std::chrono::milliseconds floor, ProgressFiles files);
  ~ProgressWatch();
  ProgressWatch(const ProgressWatch&) = delete;
  ProgressWatch& operator=(const ProgressWatch&) = delete;

  /// A new generation: a fresh socket per child, its path added to the child's environment.
  void beginGeneration(std::vector<ChildSpec>& specs);
  /// Child `index` of this generation runs as process (group) `pid`.
  void started(std::size_t index, int pid);
  /// A descriptor that is readable when reports are waiting (for poll()).
  int fd() const;
  /// Reads every waiting report, then judges the ranks; a hang is returned once, after its diagnosis. Replaces the
  /// status file when kStatusInterval has passed since the last time, or on a hang.
  std::optional<Hang> check();
  /// Every rank of this generation, in child order.
  std::vector<RankProgress> ranks() const;
  /// The other nodes' ranks as last heard (replaces the previous set). When a local rank passes its bound and a
  /// peer rank is further behind than every local one, check() names the peer as the hung rank (the local
  /// ranks wait for it in a collective); this node still captures its own ranks' stacks and stops the job.
  void setPeers(std::vector<PeerRank> peers);
  /// The job is being stopped from outside (the node group, for a failure or a hang on another node): before
  /// teardown, if a local rank has been silent longer than the floor, captures every local rank's stacks and
  /// prints one line naming the most silent one (it may be the rank the other node's hang waits for). Returns that
  /// line, or "" when no rank was silent that long (or detection is off).
  std::string diagnoseStop();

 private:
  struct Impl;
  explicit ProgressWatch(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace taehv::process
