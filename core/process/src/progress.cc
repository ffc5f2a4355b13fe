// The progress channel and the hang watch. See taehv/process/progress.h for the contract.
#include "taehv/process/progress.h"

#include <stdlib.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <limits>
#include <map>

#include "console.h"
#include "file_timer.h"
#include "stacks.h"
#include <nlohmann/json.hpp>
#include "taehv/env.h"
#include "taehv/files/output_file.h"

namespace taehv::process {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::array<std::pair<Section, std::string_view>, 7> kSectionNames = {{
    {Section::kStartup, "startup"},
    {Section::kData, "data"},
    {Section::kForwardBackward, "forward_backward"},
    {Section::kExchange, "exchange"},
    {Section::kOptimizer, "optimizer"},
    {Section::kEval, "eval"},
    {Section::kCheckpoint, "checkpoint"},
}};
/// Where a rank is in the job, to find the one the others wait for: its step, its section's place in the step
/// (kSectionNames' order is a step's: data, forward/backward, exchange, optimizer, then an evaluation and a
/// checkpoint after it), then how long it has been silent.
struct Position {
  std::int64_t step = 0;
  int section = 0;
  double silent_s = 0;
};

/// `a` is further behind than `b`: an earlier step, an earlier section of the same step, or as far and silent longer.
/// In synchronous training every rank meets the others in each step's collectives, so the rank furthest behind is
/// the one they wait for: one that reached the exchange waits for one still in data, however long each has been
/// silent (the hung one is silent longer only by the time the others took to reach the exchange, under a second
/// when a step is short). Silence decides only between ranks at the same place (a rank wedged in a collective).
bool furtherBehind(const Position& a, const Position& b) {
  if (a.step != b.step) return a.step < b.step;
  if (a.section != b.section) return a.section < b.section;
  return a.silent_s > b.silent_s;
}

/// A section word's place in kSectionNames ("" or an unknown word: start-up's, 0).
int sectionPlace(std::string_view name) {
  for (std::size_t i = 0; i < kSectionNames.size(); ++i) {
    if (kSectionNames[i].second == name) return static_cast<int>(i);
  }
  return 0;
}

/// Largest step a report may carry (2^62): far above any run, far below overflow in step arithmetic.
constexpr std::int64_t kMaxStep = std::int64_t{1} << 62;
/// The epoll tag of the file timer's pipe (the sockets' tags are child indexes).
constexpr std::uint64_t kFileTimerTag = ~std::uint64_t{0};
/// A datagram longer than this is garbage (a report is under 60 bytes).
constexpr std::size_t kMaxDatagram = 256;

double secondsOf(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string quoted(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, 60)) out += (c >= 32 && c < 127) ? c : '?';
  return "'" + out + (text.size() > 60 ? "...'" : "'");
}

std::string fixed1(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", s);
  return buf;
}

/// What the watch knows of one child.
struct Rank {
  int rank = -1;
  int pid = -1;
  int fd = -1;
  std::string socket_path;
  std::map<std::string, std::string> env;  ///< its environment (PATH, to find the stack tools)
  Clock::time_point started{};
  bool reported = false;
  std::int64_t step = 0;
  Section section = Section::kStartup;
  Clock::time_point last_report{};
  Clock::time_point section_since{};
  Clock::time_point step_since{};
  bool step_clean = true;          ///< no evaluation or checkpoint inside the current step
  bool step_open = false;          ///< the current step began in the loop (not in start-up)
  bool warm = false;               ///< the loop's first step (warm-up) has ended in this generation
  std::deque<double> step_times;   ///< the last kStepWindow clean step times, seconds
  double exchange_s = 0;           ///< time in the exchange section so far in the current step
  std::deque<double> busy_times;   ///< the last kBusyWindow clean steps' times outside the exchange, seconds
  double last_step_s = 0;
  double longest_eval_s = 0;
  double longest_checkpoint_s = 0;
  Clock::time_point last_garbage_log{};
  bool garbage_logged = false;
};

}  // namespace

std::string_view sectionName(Section section) {
  for (const auto& [s, name] : kSectionNames) {
    if (s == section) return name;
  }
  return "?";
}

Checked<ProgressReport> parseProgressReport(std::string_view text) {
  const std::string_view original = text;
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  auto fail = [&] {
    return Checked<ProgressReport>{"not a progress report (want 'step=<N> section=<name>'): " + quoted(original)};
  };
  constexpr std::string_view kStep = "step=", kSection = " section=";
  if (text.substr(0, kStep.size()) != kStep) return fail();
  text.remove_prefix(kStep.size());
  std::int64_t step = 0;
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') {
    step = step * 10 + (text[digits] - '0');
    if (++digits > 19 || step > kMaxStep) return fail();
  }
  if (digits == 0) return fail();
  text.remove_prefix(digits);
  if (text.substr(0, kSection.size()) != kSection) return fail();
  text.remove_prefix(kSection.size());
  for (const auto& [s, name] : kSectionNames) {
    if (text == name) return {"", ProgressReport{step, s}};
  }
  return fail();
}

std::string formatProgressReport(const ProgressReport& report) {
  return "step=" + std::to_string(report.step) + " section=" + std::string(sectionName(report.section)) + "\n";
}

std::string statusFilePath(const std::string& log_dir) {
  return log_dir.empty() ? std::string() : (std::filesystem::path(log_dir) / "status.json").string();
}

std::string stackFilePath(const std::string& dir, int rank) {
  return (std::filesystem::path(dir) / ("hang_rank" + std::to_string(rank) + ".stacks.txt")).string();
}

struct ProgressWatch::Impl {
  std::chrono::milliseconds floor{0};
  std::string stacks_dir;
  std::string status_file;
  Clock::time_point status_written{};
  std::string hang;  ///< the last hang found in this run (for the status file)
  std::string socket_dir;
  int epoll_fd = -1;
  int generation = 0;
  bool hang_reported = false;
  Clock::time_point peers_released{};  ///< when a rank last left a long section (isLong)
  std::vector<Rank> ranks;
  std::unique_ptr<FileTimerServer> file_timer;  ///< torchelastic's file timer, with TORCHELASTIC_ENABLE_FILE_TIMER=1
  std::string buffer = std::string(kMaxDatagram + 1, '\0');

  void closeSockets() {
    for (Rank& r : ranks) {
      if (r.fd >= 0) ::close(r.fd);
      if (!r.socket_path.empty()) ::unlink(r.socket_path.c_str());
    }
    ranks.clear();
  }

  /// A bound socket for child `index`, registered with epoll; -1 (and a warning) when that fails.
  int openSocket(Rank& r, std::size_t index) {
    r.socket_path = socket_dir + "/g" + std::to_string(generation) + "r" + std::to_string(r.rank) + ".sock";
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (r.socket_path.size() >= sizeof addr.sun_path) {
      say("taehv-run: warning: progress socket path too long (" + r.socket_path + "); rank " +
          std::to_string(r.rank) + " cannot report progress\n");
      r.socket_path.clear();
      return -1;
    }
    r.socket_path.copy(addr.sun_path, r.socket_path.size());
    const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = index;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
      say("taehv-run: warning: progress socket " + r.socket_path + ": " + std::strerror(errno) + "; rank " +
          std::to_string(r.rank) + " cannot report progress\n");
      if (fd >= 0) ::close(fd);
      r.socket_path.clear();
      return -1;
    }
    return fd;
  }

  void readReports(Rank& r, Clock::time_point now) {
    for (;;) {
      const ssize_t n = ::recv(r.fd, buffer.data(), buffer.size(), 0);
      if (n < 0) return;  // EAGAIN: drained
      const std::string_view text(buffer.data(), static_cast<std::size_t>(n));
      Checked<ProgressReport> report = n > static_cast<ssize_t>(kMaxDatagram)
                                           ? Checked<ProgressReport>{"a datagram over " +
                                                                     std::to_string(kMaxDatagram) + " bytes"}
                                           : parseProgressReport(text);
      if (!report.ok()) {
        if (!r.garbage_logged || now - r.last_garbage_log >= kGarbageLogInterval) {
          say("taehv-run: warning: rank " + std::to_string(r.rank) + " sent garbage on its progress channel (" +
              std::string(kProgressSocketEnv) + "): " + report.error + "; ignored (at most one such line per " +
              std::to_string(kGarbageLogInterval.count()) + " s)\n");
          r.garbage_logged = true;
          r.last_garbage_log = now;
        }
        continue;
      }
      apply(r, report.value, now);
    }
  }

  void apply(Rank& r, const ProgressReport& p, Clock::time_point now) {
    const bool in_loop = p.section != Section::kStartup;
    // The exchange time of the current step (an exchange may go on into the next step: counted from its start).
    if (r.reported && r.section == Section::kExchange && (p.section != r.section || p.step != r.step)) {
      r.exchange_s += secondsOf(now - std::max(r.section_since, r.step_since));
    }
    if (!r.reported) {
      r.reported = true;
      r.step = p.step;
      r.step_since = r.section_since = now;
      r.section = p.section;
      r.step_open = in_loop;
    } else if (p.step != r.step) {  // a step ended (the first one of the loop is warm-up: measured, not learned)
      if (r.step_open && r.step_clean && p.step == r.step + 1) {
        r.last_step_s = secondsOf(now - r.step_since);
        if (r.warm) r.step_times.push_back(r.last_step_s);
        while (r.step_times.size() > kStepWindow) r.step_times.pop_front();
        if (r.warm) r.busy_times.push_back(std::max(0.0, r.last_step_s - r.exchange_s));
        while (r.busy_times.size() > kBusyWindow) r.busy_times.pop_front();
        r.warm = true;
      }
      r.step = p.step;
      r.step_since = now;
      r.step_clean = true;
      r.step_open = in_loop;
      r.exchange_s = 0;
    } else if (!r.step_open && in_loop) {  // the loop's first step begins after start-up
      r.step_open = true;
      r.step_since = now;
      r.step_clean = true;
      r.exchange_s = 0;
    }
    if (p.section != r.section) {  // the section that ended: evaluation and checkpoint passes are learned
      const double took = secondsOf(now - r.section_since);
      if (r.section == Section::kEval) r.longest_eval_s = std::max(r.longest_eval_s, took);
      if (r.section == Section::kCheckpoint) r.longest_checkpoint_s = std::max(r.longest_checkpoint_s, took);
      if (isLong(r.section)) peers_released = now;
      r.section_since = now;
    }
    if (p.section == Section::kEval || p.section == Section::kCheckpoint) r.step_clean = false;
    r.section = p.section;
    r.last_report = now;
  }

  /// Start-up, a checkpoint, an evaluation: sections the other ranks may wait for in their next collective.
  static bool isLong(Section s) { return s == Section::kStartup || s == Section::kEval || s == Section::kCheckpoint; }

  /// Seconds `r` has been silent: since its last report, or since a peer left a long section if that is later (a
  /// rank that waited for that peer in a collective gets its own bound again from then).
  double silenceOf(const Rank& r, Clock::time_point now) const {
    return secondsOf(now - std::max(r.reported ? r.last_report : r.started, peers_released));
  }

  /// The longest bound of a rank in start-up, a checkpoint or an evaluation: what the others may be waiting for.
  double waitBound() const {
    double out = 0;
    for (const Rank& r : ranks) {
      if (r.reported && isLong(r.section)) out = std::max(out, ownBound(r));
    }
    return out;
  }

  double boundOf(const Rank& r) const {
    const double own = ownBound(r);
    return own > 0 ? std::max(own, waitBound()) : 0;
  }

  /// The bound on `r`'s silence now from its own history, seconds; 0 when it is not judged.
  double ownBound(const Rank& r) const {
    if (floor.count() <= 0 || !r.reported) return 0;
    const double floor_s = std::chrono::duration<double>(floor).count();
    const double minimum = std::max(floor_s, std::chrono::duration<double>(kSectionMinimum).count());
    if (r.section == Section::kEval) return std::max(minimum, kSectionFactor * r.longest_eval_s);
    if (r.section == Section::kCheckpoint) return std::max(minimum, kSectionFactor * r.longest_checkpoint_s);
    if (r.section == Section::kStartup || r.step_times.empty()) return minimum;
    std::vector<double> sorted(r.step_times.begin(), r.step_times.end());
    std::sort(sorted.begin(), sorted.end());
    const auto at = static_cast<std::size_t>(std::ceil(kStepPercentile * static_cast<double>(sorted.size()))) - 1;
    return std::max(floor_s, kStepFactor * sorted[std::min(at, sorted.size() - 1)]);
  }

  /// With TORCHELASTIC_ENABLE_FILE_TIMER=1 in the workers' environment, serves torchelastic's timer pipe (made once,
  /// at TORCHELASTIC_TIMER_FILE, else in the sockets' folder) and names it in every worker's environment.
  void serveFileTimer(std::vector<ChildSpec>& specs) {
    if (specs.empty()) return;
    const std::string* enabled = findEnv(specs[0].env, kEnableFileTimerEnv);
    if (enabled == nullptr || *enabled != "1") return;
    if (!file_timer) {
      const std::string* given = findEnv(specs[0].env, kTimerFileEnv);
      Checked<std::unique_ptr<FileTimerServer>> server =
          FileTimerServer::create(given != nullptr ? *given : socket_dir + "/watchdog_timer");
      if (!server.ok()) {
        say("taehv-run: warning: torchelastic file timer not served: " + server.error + "\n");
        return;
      }
      file_timer = std::move(server.value);
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = kFileTimerTag;
      ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, file_timer->fd(), &ev);
    }
    for (ChildSpec& spec : specs) spec.env[kTimerFileEnv] = file_timer->path();
  }

  /// Who `pid` is, for the timer's line.
  std::string nameOf(int pid) const {
    for (const Rank& r : ranks) {
      if (r.pid == pid) return "rank " + std::to_string(r.rank) + " (pid " + std::to_string(pid) + ")";
    }
    return "pid " + std::to_string(pid);
  }

  /// Replaces the status file with what every rank is at now (a failure to write is one warning, once).
  void writeStatus(Clock::time_point now) {
    status_written = now;
    nlohmann::ordered_json doc;
    doc["format"] = kStatusFormat;
    doc["updated_unix_s"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    doc["generation"] = generation;
    doc["hang_timeout_s"] = std::chrono::duration<double>(floor).count();
    doc["last_hang"] = hang.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(hang);
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const Rank& r : ranks) {
      const RankProgress p = progressOf(r, now);
      list.push_back({{"rank", p.rank},
                      {"pid", r.pid},
                      {"reported", p.reported},
                      {"step", p.step},
                      {"section", std::string(sectionName(p.section))},
                      {"last_step_s", p.last_step_s},
                      {"silent_s", p.silent_s},
                      {"bound_s", p.bound_s},
                      {"busy_s", p.busy_s},
                      {"busy_steps", p.busy_steps}});
    }
    doc["ranks"] = std::move(list);
    if (Status written = files::writeFileAtomically(status_file, doc.dump(2) + "\n"); !written.ok() && !status_warned) {
      say("taehv-run: warning: status file: " + written.error + "\n");
      status_warned = true;
    }
  }
  bool status_warned = false;

  RankProgress progressOf(const Rank& r, Clock::time_point now) const {
    RankProgress p;
    p.rank = r.rank;
    p.reported = r.reported;
    p.step = r.step;
    p.section = r.section;
    p.last_step_s = r.last_step_s;
    p.silent_s = silenceOf(r, now);
    p.bound_s = boundOf(r);
    if (!r.busy_times.empty()) {
      std::vector<double> sorted(r.busy_times.begin(), r.busy_times.end());
      std::sort(sorted.begin(), sorted.end());
      const std::size_t n = sorted.size();
      p.busy_s = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0;
      p.busy_steps = static_cast<int>(n);
    }
    return p;
  }

  /// What capturing every local rank's stacks gave.
  struct Captured {
    std::string dir;                      ///< where the stack files are
    std::string top = "(none captured)";  ///< the top frames of the rank asked for
    double took_s = 0;
  };

  /// Every local rank's stacks into its stack file; the top frames of rank `rank`.
  Captured captureAll(int rank) {
    const auto t0 = Clock::now();
    Captured out;
    if (stacks_dir.empty()) {
      std::string pattern = (std::filesystem::temp_directory_path() / "taehv-run-hang-XXXXXX").string();
      if (::mkdtemp(pattern.data()) != nullptr) stacks_dir = pattern;
    }
    out.dir = stacks_dir;
    std::error_code ec;
    std::filesystem::create_directories(out.dir, ec);
    std::vector<StackTarget> targets;
    for (const Rank& r : ranks) {
      if (r.pid > 0) targets.push_back({r.rank, r.pid, r.env});
    }
    for (const RankStacks& s : captureStacks(targets, kStackCaptureTimeout)) {
      if (Status written = files::writeFileAtomically(stackFilePath(out.dir, s.rank), s.text); !written.ok()) {
        say("taehv-run: warning: stack file: " + written.error + "\n");
      }
      if (s.rank == rank && !s.top_frames.empty()) out.top = s.top_frames;
    }
    out.took_s = secondsOf(Clock::now() - t0);
    return out;
  }

  /// "rank 1 at step 5 in exchange (3.2 s silent), ..." for the local ranks other than `except` that reported.
  std::string othersLine(const Rank* except, Clock::time_point now) const {
    std::string others;
    for (const Rank& r : ranks) {
      if (&r == except || !r.reported) continue;
      others += std::string(others.empty() ? "" : ", ") + "rank " + std::to_string(r.rank) + " at step " +
                std::to_string(r.step) + " in " + std::string(sectionName(r.section)) + " (" +
                fixed1(silenceOf(r, now)) + " s silent)";
    }
    return others;
  }

  /// Stack files for every local rank, then the one summary line; returns the summary.
  /// `tripped`: the rank whose silence passed its bound (`hung` itself, or a rank waiting for it).
  std::string diagnose(const Rank& hung, const Rank& tripped, Clock::time_point now) {
    const Captured captured = captureAll(hung.rank);
    const RankProgress p = progressOf(hung, now);
    std::string line = "rank " + std::to_string(hung.rank) + " hung in section " +
                       std::string(sectionName(hung.section)) + " of step " + std::to_string(hung.step) +
                       ": no progress for " + fixed1(p.silent_s) + " s (bound " + fixed1(p.bound_s) + " s)";
    if (&tripped != &hung) {
      const RankProgress t = progressOf(tripped, now);
      line += ", rank " + std::to_string(tripped.rank) + " waiting for it in " +
              std::string(sectionName(tripped.section)) + " passed its bound of " + fixed1(t.bound_s) + " s";
    }
    const std::string others = othersLine(&hung, now);
    say("taehv-run: hang: " + line + "; top frames: " + captured.top + (others.empty() ? "" : "; others: " + others) +
        "; stacks of every local rank in " + stackFilePath(captured.dir, hung.rank) + " and its neighbours (captured in " +
        fixed1(captured.took_s) + " s)\n");
    return line;
  }

  /// The hang is on another node: `peer` has been silent longer than every local rank while `tripped` (waiting for
  /// it) passed its bound. The local stacks are captured (the waiting side); the peer's node captures its own when
  /// the group stops the job (diagnoseStop).
  std::string diagnosePeer(const PeerRank& peer, const Rank& tripped, Clock::time_point now) {
    const Captured captured = captureAll(tripped.rank);
    const RankProgress t = progressOf(tripped, now);
    const std::string node = "node " + std::to_string(peer.node);
    const std::string line = "rank " + std::to_string(peer.rank) + " (" + node + ") hung in section " +
                             (peer.section.empty() ? std::string("startup") : peer.section) + " of step " +
                             std::to_string(peer.step) + ": no progress for " + fixed1(peer.silent_s) + " s (as " +
                             node + " saw it " + fixed1(peer.view_age_s) + " s ago, aged to now), rank " +
                             std::to_string(tripped.rank) + " waiting for it in " +
                             std::string(sectionName(tripped.section)) + " passed its bound of " + fixed1(t.bound_s) +
                             " s";
    const std::string others = othersLine(&tripped, now);
    say("taehv-run: hang: " + line + "; rank " + std::to_string(tripped.rank) + "'s top frames: " + captured.top +
        (others.empty() ? "" : "; others here: " + others) + "; stacks of this node's ranks in " +
        stackFilePath(captured.dir, tripped.rank) + " and its neighbours (captured in " + fixed1(captured.took_s) +
        " s), rank " + std::to_string(peer.rank) + "'s in " + node + "'s log folder\n");
    return line;
  }

  /// A local rank's place (furtherBehind), its silence counted from its last report.
  Position positionOf(const Rank& r, Clock::time_point now) const {
    return {r.step, sectionPlace(sectionName(r.section)), secondsOf(now - r.last_report)};
  }

  /// The peer rank further behind than `local` (the local rank furthest behind), its ages grown to `now`, the
  /// furthest behind of those whose view is at most `max_view_age_s` old; nullopt when none is.
  std::optional<PeerRank> peerFurtherBehind(const Position& local, Clock::time_point now,
                                            double max_view_age_s) const {
    std::optional<PeerRank> out;
    Position furthest = local;
    const double since = secondsOf(now - peers_at);
    for (PeerRank p : peers) {
      // A rank that has not reported yet is not judged, here as on its node: its "startup, step 0" is no place in
      // the job (CI saw a peer record written before its worker's first report named over a rank hung at step 6).
      if (p.section.empty()) continue;
      p.silent_s += since;
      p.view_age_s += since;
      if (p.view_age_s > max_view_age_s) continue;
      const Position at{p.step, sectionPlace(p.section), p.silent_s};
      if (furtherBehind(at, furthest)) {
        out = p;
        furthest = at;
      }
    }
    return out;
  }
  std::vector<PeerRank> peers;  ///< the other nodes' ranks as last heard (setPeers)
  Clock::time_point peers_at{};  ///< when they were set (their silences are as of then)
};

ProgressWatch::ProgressWatch(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ProgressWatch::~ProgressWatch() {
  impl_->closeSockets();
  impl_->file_timer.reset();
  if (impl_->epoll_fd >= 0) ::close(impl_->epoll_fd);
  std::error_code ec;
  std::filesystem::remove_all(impl_->socket_dir, ec);
}

Checked<std::unique_ptr<ProgressWatch>> ProgressWatch::create(std::chrono::milliseconds floor, ProgressFiles files) {
  auto impl = std::make_unique<Impl>();
  impl->floor = floor;
  impl->stacks_dir = std::move(files.stacks_dir);
  impl->status_file = std::move(files.status_file);
  std::string pattern = (std::filesystem::temp_directory_path() / "taehv-progress-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    return {"cannot make a folder for the progress sockets (" + pattern + "): " + std::strerror(errno)};
  }
  impl->socket_dir = pattern;
  impl->epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (impl->epoll_fd < 0) {
    std::error_code ec;
    std::filesystem::remove_all(impl->socket_dir, ec);
    return {std::string("epoll_create1: ") + std::strerror(errno)};
  }
  return {"", std::unique_ptr<ProgressWatch>(new ProgressWatch(std::move(impl)))};
}

void ProgressWatch::beginGeneration(std::vector<ChildSpec>& specs) {
  Impl& m = *impl_;
  m.closeSockets();
  ++m.generation;
  m.hang_reported = false;
  m.peers.clear();
  m.peers_released = Clock::time_point{};
  m.ranks.resize(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    Rank& r = m.ranks[i];
    r.rank = specs[i].rank;
    r.env = specs[i].env;
    r.started = Clock::now();
    r.fd = m.openSocket(r, i);
    if (r.fd >= 0) specs[i].env[kProgressSocketEnv] = r.socket_path;
  }
  m.serveFileTimer(specs);
}

void ProgressWatch::started(std::size_t index, int pid) {
  if (index < impl_->ranks.size()) {
    impl_->ranks[index].pid = pid;
    impl_->ranks[index].started = Clock::now();
  }
}

int ProgressWatch::fd() const { return impl_->epoll_fd; }

std::optional<Hang> ProgressWatch::check() {
  Impl& m = *impl_;
  const auto now = Clock::now();
  std::array<epoll_event, 16> events{};
  for (;;) {
    const int n = ::epoll_wait(m.epoll_fd, events.data(), static_cast<int>(events.size()), 0);
    if (n <= 0) break;
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u64 == kFileTimerTag && m.file_timer) m.file_timer->readRequests();
      if (events[i].data.u64 < m.ranks.size()) m.readReports(m.ranks[events[i].data.u64], now);
    }
    if (n < static_cast<int>(events.size())) break;
  }
  if (m.file_timer) m.file_timer->enforce([&m](int pid) { return m.nameOf(pid); });
  if (!m.status_file.empty() && now - m.status_written >= kStatusInterval) m.writeStatus(now);
  if (m.hang_reported || m.floor.count() <= 0) return std::nullopt;
  // Once any rank is past its bound, the rank furthest behind (furtherBehind), here or on another node, is named:
  // the others wait for it in a collective (their own bounds may be shorter too).
  const Rank* tripped = nullptr;
  const Rank* hung = nullptr;
  for (const Rank& r : m.ranks) {
    if (!r.reported || r.pid <= 0 || ::kill(r.pid, 0) != 0) continue;  // not judged, or already ended
    const double bound = m.boundOf(r);
    if (tripped == nullptr && bound > 0 && m.silenceOf(r, now) > bound) tripped = &r;
    if (hung == nullptr || furtherBehind(m.positionOf(r, now), m.positionOf(*hung, now))) hung = &r;
  }
  if (tripped == nullptr) return std::nullopt;
  if (hung == nullptr) return std::nullopt;
  // A peer is judged at once on a view made since the local rank furthest behind last reported; on an older view
  // only after kPeerViewWait, while a newer one does not come (progress.h).
  const Position local = m.positionOf(*hung, now);
  std::optional<PeerRank> peer = m.peerFurtherBehind(local, now, local.silent_s);
  if (!peer) {
    peer = m.peerFurtherBehind(local, now, std::numeric_limits<double>::infinity());
    if (peer && m.silenceOf(*tripped, now) <= m.boundOf(*tripped) + secondsOf(kPeerViewWait)) return std::nullopt;
  }
  m.hang_reported = true;
  Hang out;
  if (peer) {
    out.index = static_cast<std::size_t>(tripped - m.ranks.data());  // the local rank that stops the job
    out.description = m.diagnosePeer(*peer, *tripped, now);
  } else {
    out.index = static_cast<std::size_t>(hung - m.ranks.data());
    out.description = m.diagnose(*hung, *tripped, now);
  }
  m.hang = out.description;
  if (!m.status_file.empty()) m.writeStatus(now);
  return out;
}

void ProgressWatch::setPeers(std::vector<PeerRank> peers) {
  impl_->peers = std::move(peers);
  impl_->peers_at = Clock::now();
}

std::string ProgressWatch::diagnoseStop() {
  Impl& m = *impl_;
  if (m.floor.count() <= 0 || m.hang_reported) return "";
  const auto now = Clock::now();
  const double floor_s = std::chrono::duration<double>(m.floor).count();
  const Rank* silent = nullptr;
  for (const Rank& r : m.ranks) {
    if (!r.reported || r.pid <= 0 || ::kill(r.pid, 0) != 0 || m.silenceOf(r, now) <= floor_s) continue;
    if (silent == nullptr || r.last_report < silent->last_report) silent = &r;
  }
  if (silent == nullptr) return "";
  m.hang_reported = true;
  const Impl::Captured captured = m.captureAll(silent->rank);
  const std::string line = "rank " + std::to_string(silent->rank) + " silent in section " +
                           std::string(sectionName(silent->section)) + " of step " + std::to_string(silent->step) +
                           " for " + fixed1(m.silenceOf(*silent, now)) + " s (past the " + fixed1(floor_s) +
                           " s floor) when the job was stopped from outside";
  const std::string others = m.othersLine(silent, now);
  say("taehv-run: hang: " + line + "; top frames: " + captured.top + (others.empty() ? "" : "; others: " + others) +
      "; stacks of every local rank in " + stackFilePath(captured.dir, silent->rank) +
      " and its neighbours (captured in " + fixed1(captured.took_s) + " s)\n");
  m.hang = line;
  if (!m.status_file.empty()) m.writeStatus(now);
  return line;
}

std::vector<RankProgress> ProgressWatch::ranks() const {
  std::vector<RankProgress> out;
  const auto now = Clock::now();
  for (const Rank& r : impl_->ranks) out.push_back(impl_->progressOf(r, now));
  return out;
}

}  // namespace taehv::process
