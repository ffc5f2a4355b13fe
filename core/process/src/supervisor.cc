// The supervision loop: one thread, one poll() over every child's stdout/stderr and a self-pipe that the
// signal handlers write to. See taehv/process/supervisor.h for the contract.
#include "taehv/process/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <filesystem>
#include <set>
#include <string_view>

#include "console.h"
#include "error_file.h"
#include "guardian.h"
#include "line_buffer.h"
#include "signal_name.h"
#include "signal_scope.h"
#include "spawn.h"
#include "subreaper.h"
#include "taehv/env.h"
#include "taehv/files/output_file.h"
#include "taehv/process/progress.h"

namespace taehv::process {
namespace {

using Clock = std::chrono::steady_clock;

/// After the last child is reaped and its group killed, how long we still wait for its pipes to reach EOF
/// (they stay open only if a process escaped the group while holding them).
constexpr std::chrono::milliseconds kDrainAfterExit{1000};
/// Upper bound on one poll() wait: a safety net only; SIGCHLD and output wake us up.
constexpr std::chrono::milliseconds kPollCap{500};
/// Bytes read from one stream per wake-up; bounds how long one chatty child can hold the loop.
constexpr std::size_t kReadChunk = 64 * 1024;
/// Longest stderr line kept in a child's tail (bytes); the rest of the line is cut.
constexpr std::size_t kTailLineCap = 4096;
/// At the end of a generation, how long we keep killing what our workers' trees left to us (each SIGKILL of an
/// adopted process can hand us its own children) before giving up with a warning.
constexpr std::chrono::milliseconds kOrphanSweep{2000};

/// pollOnce's entries before the children's streams: the signal self-pipe, the outside stop, the progress watch.
constexpr std::size_t kFixedPollFds = 3;

/// Set while a supervise() runs: one at a time per process (the signal handlers are process-wide).
std::atomic<bool> g_active{false};

// ---- one generation of children --------------------------------------------------------------------------

struct Stream {
  int fd = -1;
  bool is_stderr = false;
  LineBuffer lines;
  int file_fd = -1;  ///< ChildSpec::stdout_file / stderr_file, -1: none
};

struct Child {
  ChildSpec spec;
  pid_t pid = -1;  ///< also its process group id
  bool running = false;
  bool ended = false;
  int exit_code = 0;
  int signal = 0;
  std::time_t started_at = 0;
  int stdin_fd = -1;
  int log_fd = -1;
  Stream out;
  Stream err;
  std::deque<std::string> tail;
  std::string hang;  ///< set when the progress watch found it hung

  bool failed() const { return ended && (signal != 0 || exit_code != 0); }
};

/// How `c` ended, for summaries and on_failure.
ChildExit exitOf(const Child& c) {
  ChildExit e;
  e.rank = c.spec.rank;
  e.label = c.spec.label;
  e.host = c.spec.host;
  e.exit_code = c.exit_code;
  e.signal = c.signal;
  e.stderr_tail.assign(c.tail.begin(), c.tail.end());
  e.hang = c.hang;
  return e;
}

struct GenerationOutcome {
  std::optional<ChildExit> first_failure;
  std::string child_error_file;    ///< TORCHELASTIC_ERROR_FILE of the failing child, if any
  std::time_t failure_started = 0; ///< when the failing child was started
  int interrupt_signal = 0;
  bool spawn_failed = false;       ///< a child could not be started: restarting will not help
  std::string external_stop;       ///< the outside stop's reason, when it ended the generation
};

class Generation {
 public:
  Generation(std::vector<ChildSpec> specs, const SupervisorOptions& options, Guardian& guardian,
             const SignalScope& signals, const SubreaperScope& subreaper)
      : options_(options), guardian_(guardian), signals_(signals), subreaper_(subreaper) {
    adopts_orphans_ = subreaper.adopts();
    children_.resize(specs.size());
    for (std::size_t i = 0; i < specs.size(); ++i) {
      children_[i].spec = std::move(specs[i]);
      children_[i].out.is_stderr = false;
      children_[i].err.is_stderr = true;
    }
  }
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;
  ~Generation() { closeEverything(); }

  GenerationOutcome run() {
    startAll();
    for (;;) {
      handleSignals();
      handleExternalStop();
      handleProgress();
      if (options_.on_tick) options_.on_tick();
      reap();
      const auto now = Clock::now();
      if (stopping_ && !killed_ && now >= kill_deadline_) {
        if (anyRunning()) say("taehv-run: shutdown grace elapsed; sending SIGKILL to the remaining workers\n");
        signalRunning(SIGKILL);
        killed_ = true;
      }
      if (!anyRunning()) {
        if (!groups_killed_) {
          // Processes a finished child left behind in its group would hold its pipes open: no child's
          // leftovers outlive the run.
          for (Child& c : children_) {
            if (c.pid > 0) ::kill(-c.pid, SIGKILL);
          }
          killAdoptedOrphans();
          groups_killed_ = true;
          drain_deadline_ = now + kDrainAfterExit;
        }
        if (!anyStreamOpen() || now >= drain_deadline_) break;
      }
      pollOnce(now);
    }
    closeEverything();
    GenerationOutcome outcome;
    outcome.interrupt_signal = interrupt_signal_;
    outcome.spawn_failed = spawn_failed_;
    outcome.external_stop = external_stop_;
    if (first_failure_ >= 0) {
      const Child& c = children_[static_cast<std::size_t>(first_failure_)];
      outcome.first_failure = exitOf(c);
      if (const std::string* file = findEnv(c.spec.env, "TORCHELASTIC_ERROR_FILE")) outcome.child_error_file = *file;
      outcome.failure_started = c.started_at;
    }
    return outcome;
  }

 private:
  void startAll() {
    for (std::size_t i = 0; i < children_.size(); ++i) {
      Child& c = children_[i];
      openLog(c);
      openStreamFiles(c);
      c.started_at = std::time(nullptr);
      Checked<SpawnedChild> spawned = spawnChild(c.spec);
      if (!spawned.ok()) {
        const std::string message = "taehv-run: cannot start " + who(c.spec) + ": " + spawned.error;
        say(message + "\n");
        c.ended = true;
        c.exit_code = 127;  // the shell's "command not found / not executable"
        c.tail.push_back(message);
        if (c.log_fd >= 0) writeAll(c.log_fd, message + "\n");
        spawn_failed_ = true;
        noteFailure(i);
        return;  // the rest are not started
      }
      c.pid = spawned.value.pid;
      c.running = true;
      c.stdin_fd = spawned.value.stdin_fd;
      if (c.stdin_fd >= 0 && !c.spec.stdin_data.empty()) writeAll(c.stdin_fd, c.spec.stdin_data.substr(0, 4096));
      c.out.fd = spawned.value.stdout_fd;
      c.err.fd = spawned.value.stderr_fd;
      guardian_.add(c.pid);
      if (options_.progress) options_.progress->started(i, c.pid);
      // A signal that arrived while we were starting children reaches the ones started so far; stop early.
      handleSignals();
      if (stopping_) return;
    }
  }

  void openLog(Child& c) {
    if (c.spec.log_file.empty()) return;
    std::error_code ec;
    const std::filesystem::path path(c.spec.log_file);
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
    Checked<files::FileDescriptor> log = files::openForAppend(c.spec.log_file);
    if (!log.ok()) {
      say("taehv-run: warning: log file for " + who(c.spec) + ": " + log.error + "; its output goes to the console "
          "only\n");
      return;
    }
    c.log_fd = log.value.release();
  }

  /// ChildSpec::stdout_file / stderr_file, each created empty (its folder too).
  void openStreamFiles(Child& c) {
    for (auto [path, stream] : {std::pair{&c.spec.stdout_file, &c.out}, std::pair{&c.spec.stderr_file, &c.err}}) {
      if (path->empty()) continue;
      std::error_code ec;
      std::filesystem::create_directories(std::filesystem::path(*path).parent_path(), ec);
      std::filesystem::remove(*path, ec);  // a new file for each attempt, as torchrun's
      Checked<files::FileDescriptor> file = files::openForAppend(*path);
      if (!file.ok()) {
        say("taehv-run: warning: log file for " + who(c.spec) + ": " + file.error +
            "; that output goes to the console only\n");
        if (stream == &c.out) c.spec.echo_stdout = true;
        if (stream == &c.err) c.spec.echo_stderr = true;
        continue;
      }
      stream->file_fd = file.value.release();
    }
  }

  bool anyRunning() const {
    for (const Child& c : children_) {
      if (c.running) return true;
    }
    return false;
  }

  bool anyStreamOpen() const {
    for (const Child& c : children_) {
      if (c.out.fd >= 0 || c.err.fd >= 0) return true;
    }
    return false;
  }

  void signalRunning(int sig) {
    for (const Child& c : children_) {
      if (c.running) ::kill(-c.pid, sig);
    }
  }

  void beginStop(std::chrono::milliseconds grace) {
    if (stopping_) return;
    stopping_ = true;
    kill_deadline_ = Clock::now() + grace;
  }
  void beginStop() { beginStop(options_.shutdown_grace); }

  void noteFailure(std::size_t index) {
    if (stopping_) return;  // children ending while we stop them are not the cause
    first_failure_ = static_cast<int>(index);
    const Child& c = children_[index];
    std::size_t others = 0;
    for (const Child& o : children_) others += o.running ? 1 : 0;
    std::string line = "taehv-run: " + who(c.spec) + " " + describeExit(c.exit_code, c.signal);
    if (others > 0) {
      line += "; stopping the other " + std::to_string(others) + " (SIGTERM, SIGKILL after " +
              std::to_string(options_.shutdown_grace.count()) + " ms)";
    }
    say(line + "\n");
    if (options_.on_failure) options_.on_failure(exitOf(c), who(c.spec) + " " + describeExit(c.exit_code, c.signal));
    beginStop();
    signalRunning(SIGTERM);
  }

  /// Reads the workers' progress reports; a rank the watch finds hung (it has captured the stacks and said so)
  /// fails the generation: the others are stopped as after a failed worker.
  void handleProgress() {
    if (options_.progress == nullptr || stopping_) return;
    const std::optional<Hang> hang = options_.progress->check();
    if (!hang || hang->index >= children_.size()) return;
    Child& c = children_[hang->index];
    c.hang = hang->description;
    std::size_t running = 0;
    for (const Child& o : children_) running += o.running ? 1 : 0;
    first_failure_ = static_cast<int>(hang->index);
    say("taehv-run: stopping " + std::to_string(running) + " local worker(s) after the hang (SIGTERM, SIGKILL after " +
        std::to_string(options_.shutdown_grace.count()) + " ms)\n");
    if (options_.on_failure) options_.on_failure(exitOf(c), who(c.spec) + " " + hang->description);
    beginStop();
    signalRunning(SIGTERM);
  }

  /// The outside stop fired: stop every child as after a failure, remember why.
  void handleExternalStop() {
    const int fd = options_.external_stop.fd;
    if (fd < 0 || stopping_) return;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return;
    external_stop_ = options_.external_stop.reason ? options_.external_stop.reason() : "stopped from outside";
    // Diagnosis before teardown: the other node's hang may be waiting for one of ours.
    if (options_.progress != nullptr) options_.progress->diagnoseStop();
    std::size_t running = 0;
    for (const Child& c : children_) running += c.running ? 1 : 0;
    const std::chrono::milliseconds grace =
        options_.external_stop.grace ? std::min(options_.shutdown_grace, options_.external_stop.grace())
                                     : options_.shutdown_grace;
    say("taehv-run: " + external_stop_ + "; stopping " + std::to_string(running) + " local worker(s) (SIGTERM, SIGKILL after " +
        std::to_string(grace.count()) + " ms" +
        (grace < options_.shutdown_grace ? ": a node was lost, no collective can finish" : "") + ")\n");
    beginStop(grace);
    signalRunning(SIGTERM);
  }

  void handleSignals() {
    signals_.drainWake();
    for (int sig : kForwardedSignals) {
      int count = signals_.takePending(sig);
      if (count == 0) continue;
      for (; count > 0; --count) signalRunning(sig);
      if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
        if (interrupt_signal_ == 0) {
          interrupt_signal_ = sig;
          say("taehv-run: got " + signalName(sig) + "; forwarded to the workers, waiting for them to exit\n");
        }
        beginStop();
      }
    }
  }

  void reap() {
    for (std::size_t i = 0; i < children_.size(); ++i) {
      Child& c = children_[i];
      if (!c.running) continue;
      int status = 0;
      const pid_t r = ::waitpid(c.pid, &status, WNOHANG);
      if (r == 0 || (r < 0 && errno == EINTR)) continue;
      c.running = false;
      c.ended = true;
      if (r < 0) {  // ECHILD: reaped behind our back; its status is lost
        c.exit_code = 255;
        c.tail.push_back("taehv-run: exit status of the worker was lost (reaped elsewhere)");
      } else if (WIFSIGNALED(status)) {
        c.signal = WTERMSIG(status);
      } else {
        c.exit_code = WEXITSTATUS(status);
      }
      if (!c.failed() || interrupt_signal_ != 0) continue;
      if (c.signal == 0 && c.exit_code == options_.consequence_exit_code && !stopping_ && anyRunning()) {
        if (deferred_.empty()) deferred_until_ = Clock::now() + options_.consequence_window;
        deferred_.push_back(i);  // stopped because of another child: wait for that one to be named
        continue;
      }
      noteFailure(i);
    }
    if (!deferred_.empty() && !stopping_ && (!anyRunning() || Clock::now() >= deferred_until_)) {
      noteFailure(deferred_.front());
    }
    if (adopts_orphans_) reapOrphans();
  }

  /// As PID 1 of a container (or a child subreaper) we inherit the orphans of our workers' process trees;
  /// reap those that ended, so they do not pile up as zombies. Only children that are neither workers nor the
  /// guardian are reaped; one of ours that is ready stops the scan (reap() takes it next round).
  void reapOrphans() {
    for (;;) {
      siginfo_t info{};
      if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return;
      const pid_t pid = info.si_pid;
      if (pid == guardian_.pid()) return;
      for (const Child& c : children_) {
        if (c.pid == pid) return;
      }
      ::waitpid(pid, nullptr, WNOHANG);
    }
  }

  /// Every worker has been reaped, so whatever their trees left behind (in another process group or session
  /// too) has been re-parented to us: SIGKILL it and its group, reap it, and repeat for what that hands us in
  /// turn, until none is left or kOrphanSweep has passed. Not the guardian, not children we had before.
  void killAdoptedOrphans() {
    if (!adopts_orphans_) return;
    const auto deadline = Clock::now() + kOrphanSweep;
    for (;;) {
      std::set<pid_t> orphans = childrenOf(::getpid());
      orphans.erase(guardian_.pid());
      for (pid_t earlier : subreaper_.earlierChildren()) orphans.erase(earlier);
      if (orphans.empty()) return;
      if (Clock::now() >= deadline) {
        say("taehv-run: warning: " + std::to_string(orphans.size()) +
            " process(es) the workers left behind did not end after SIGKILL within " +
            std::to_string(kOrphanSweep.count()) + " ms (first: pid " + std::to_string(*orphans.begin()) + ")\n");
        return;
      }
      for (pid_t pid : orphans) {
        ::kill(-pid, SIGKILL);  // its group, when it leads one (a setsid() daemon does)
        ::kill(pid, SIGKILL);
      }
      for (pid_t pid : orphans) {
        while (Clock::now() < deadline) {
          const pid_t r = ::waitpid(pid, nullptr, WNOHANG);
          if (r == pid || (r < 0 && errno != EINTR)) break;
          ::usleep(1000);
        }
      }
    }
  }

  void pollOnce(Clock::time_point now) {
    pollfds_.clear();
    owners_.clear();
    pollfds_.push_back({signals_.wakeFd(), POLLIN, 0});
    owners_.push_back(nullptr);
    const bool watch_external = options_.external_stop.fd >= 0 && !stopping_;
    pollfds_.push_back({watch_external ? options_.external_stop.fd : -1, POLLIN, 0});  // fd -1: ignored by poll
    owners_.push_back(nullptr);
    pollfds_.push_back({options_.progress && !stopping_ ? options_.progress->fd() : -1, POLLIN, 0});
    owners_.push_back(nullptr);
    for (Child& c : children_) {
      for (Stream* s : {&c.out, &c.err}) {
        if (s->fd < 0) continue;
        pollfds_.push_back({s->fd, POLLIN, 0});
        owners_.push_back(&c);
      }
    }
    auto wait = kPollCap;
    auto until = [&](Clock::time_point t) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t - now) + std::chrono::milliseconds(1);
      if (left < wait) wait = std::max(left, std::chrono::milliseconds(0));
    };
    if (stopping_ && !killed_) until(kill_deadline_);
    if (!deferred_.empty() && !stopping_) until(deferred_until_);
    if (groups_killed_) until(drain_deadline_);
    const int ready = ::poll(pollfds_.data(), pollfds_.size(), static_cast<int>(wait.count()));
    if (ready <= 0) return;
    for (std::size_t i = kFixedPollFds; i < pollfds_.size(); ++i) {
      if (pollfds_[i].revents == 0) continue;
      Child& c = *owners_[i];
      pump(c, pollfds_[i].fd == c.out.fd ? c.out : c.err);
    }
  }

  /// Reads what one stream has (one chunk), relays whole lines, closes the stream at EOF.
  void pump(Child& c, Stream& s) {
    buffer_.resize(kReadChunk);
    const ssize_t n = ::read(s.fd, buffer_.data(), buffer_.size());
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n > 0) {
      relay(c, s, std::string_view(buffer_.data(), static_cast<std::size_t>(n)), false);
    } else {
      relay(c, s, {}, true);
      ::close(s.fd);
      s.fd = -1;
    }
  }

  /// Cuts data into lines, then writes all of them with one write() per destination, so lines of different
  /// children never interleave and a prefix always starts a line.
  void relay(Child& c, Stream& s, std::string_view data, bool at_eof) {
    console_.clear();
    log_.clear();
    file_.clear();
    auto onLine = [&](std::string_view line) {
      if (c.spec.echo && (s.is_stderr ? c.spec.echo_stderr : c.spec.echo_stdout)) {
        if (options_.prefix_output) console_.append("[").append(c.spec.label).append("] ");
        console_.append(line).push_back('\n');
      }
      if (c.log_fd >= 0) log_.append(line).push_back('\n');
      if (s.file_fd >= 0) file_.append(line).push_back('\n');
      if (s.is_stderr && options_.stderr_tail_lines > 0) {
        c.tail.emplace_back(line.substr(0, kTailLineCap));
        while (c.tail.size() > options_.stderr_tail_lines) c.tail.pop_front();
      }
    };
    s.lines.feed(data, onLine);
    if (at_eof) s.lines.flush(onLine);  // the unterminated last line, completed with '\n'
    if (!console_.empty()) writeAll(s.is_stderr ? STDERR_FILENO : STDOUT_FILENO, console_);
    if (!log_.empty()) writeAll(c.log_fd, log_);
    if (!file_.empty()) writeAll(s.file_fd, file_);
  }

  void closeEverything() {
    for (Child& c : children_) {
      for (Stream* s : {&c.out, &c.err}) {
        if (s->fd < 0) continue;
        relay(c, *s, {}, true);
        ::close(s->fd);
        s->fd = -1;
      }
      if (c.stdin_fd >= 0) ::close(c.stdin_fd);
      c.stdin_fd = -1;
      if (c.log_fd >= 0) ::close(c.log_fd);
      c.log_fd = -1;
      for (Stream* s : {&c.out, &c.err}) {
        if (s->file_fd >= 0) ::close(s->file_fd);
        s->file_fd = -1;
      }
      if (c.pid > 0) {
        if (c.running) {  // only on an exception path: never leave a child behind
          ::kill(-c.pid, SIGKILL);
          while (::waitpid(c.pid, nullptr, 0) < 0 && errno == EINTR) {
          }
          c.running = false;
        }
        guardian_.remove(c.pid);
        c.pid = -1;
      }
    }
  }

  const SupervisorOptions& options_;
  Guardian& guardian_;
  const SignalScope& signals_;
  const SubreaperScope& subreaper_;
  std::vector<Child> children_;
  int first_failure_ = -1;
  int interrupt_signal_ = 0;
  std::string external_stop_;
  std::vector<std::size_t> deferred_;  ///< children that ended with consequence_exit_code, oldest first
  Clock::time_point deferred_until_{};
  bool spawn_failed_ = false;
  bool adopts_orphans_ = false;  ///< PID 1 or a child subreaper: orphaned descendants become our children
  bool stopping_ = false;
  bool killed_ = false;
  bool groups_killed_ = false;
  Clock::time_point kill_deadline_{};
  Clock::time_point drain_deadline_{};
  std::vector<pollfd> pollfds_;
  std::vector<Child*> owners_;
  std::string buffer_;
  std::string console_;
  std::string log_;
  std::string file_;
};

/// Clears the "active" flag when supervise() returns, whichever way.
struct ActiveFlag {
  ~ActiveFlag() { g_active.store(false); }
};

}  // namespace

SupervisorResult supervise(const std::function<std::vector<ChildSpec>(int restart_count)>& make_children,
                           const SupervisorOptions& options) {
  SupervisorResult result;
  if (g_active.exchange(true)) {
    say("taehv-run: internal error: supervise() called while another supervise() runs in this process\n");
    result.exit_code = 1;
    return result;
  }
  ActiveFlag active;
  SubreaperScope subreaper;  // before the guardian, which is ours and is never swept
  Guardian guardian;  // started before our handlers are installed, so it inherits none of them
  if (!guardian.start()) {
    say("taehv-run: warning: cannot start the orphan guardian; processes started by workers may outlive a "
        "kill -9 of taehv-run\n");
  }
  SignalScope signals;
  if (Status installed = signals.install(); !installed.ok()) {
    say("taehv-run: cannot install signal handlers: " + installed.error + "\n");
    result.exit_code = 1;
    return result;
  }

  GenerationOutcome last;
  for (int restart = 0;; ++restart) {
    std::vector<ChildSpec> specs = make_children(restart);
    if (options.progress) options.progress->beginGeneration(specs);
    Generation generation(std::move(specs), options, guardian, signals, subreaper);
    last = generation.run();
    result.restarts = restart;
    if (last.first_failure) printSummary(*last.first_failure, restart, options.max_restarts, options.stderr_tail_lines);
    const bool failed = last.first_failure.has_value();
    if (!failed || last.interrupt_signal != 0 || last.spawn_failed || !last.external_stop.empty() ||
        options.external_stop.fd >= 0 || restart >= options.max_restarts) {
      break;  // with an outside stop (the node group) restarts are the whole job's business, not one node's
    }
    say("taehv-run: restarting all workers (restart " + std::to_string(restart + 1) + " of " +
        std::to_string(options.max_restarts) + ")\n");
  }

  result.first_failure = last.first_failure;
  if (!last.external_stop.empty() && !last.first_failure && last.interrupt_signal == 0) {
    result.external_stop = last.external_stop;
    result.exit_code = kExternalStopExit;
    say("taehv-run: the job was stopped by the node group: " + last.external_stop + "\n");
  } else if (last.interrupt_signal != 0) {
    result.interrupt_signal = last.interrupt_signal;
    result.exit_code = 128 + last.interrupt_signal;
  } else if (last.first_failure) {
    const ChildExit& f = *last.first_failure;
    result.exit_code = f.signal != 0 ? 128 + f.signal : f.exit_code;
  }

  if (!options.error_file.empty() && result.exit_code != 0) {
    std::string json;
    if (result.interrupt_signal == 0 && last.first_failure) {
      json = childErrorFileJson(last.child_error_file, last.failure_started, result.exit_code);
    }
    if (json.empty()) json = errorFileJson(result, std::time(nullptr));
    if (Status written = files::writeFileAtomically(options.error_file, json); !written.ok()) {
      say("taehv-run: error file (TORCHELASTIC_ERROR_FILE): " + written.error + "\n");
    }
  }
  return result;
}

}  // namespace taehv::process
