#include "taehv/process/run.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "spawn.h"

namespace taehv::process {
namespace {

using Clock = std::chrono::steady_clock;

/// After the deadline's SIGKILL, how long output may stay open (held by a process outside the group).
constexpr std::chrono::milliseconds kDrainAfterKill{1000};
/// How often a program whose output is closed is checked for its exit while a deadline runs.
constexpr std::chrono::milliseconds kReapInterval{10};

/// One started program and our ends of its pipes.
struct Running {
  pid_t pid = -1;
  int out_fd = -1;
  int err_fd = -1;
  int in_fd = -1;
  std::size_t written = 0;  ///< bytes of the input written so far
};

void closeFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

bool holdsPipes(const Running& r) { return r.out_fd >= 0 || r.err_fd >= 0 || r.in_fd >= 0; }

/// Ignores SIGPIPE for its lifetime when `active`: a program may exit without reading all of its input.
class IgnoreSigpipe {
 public:
  explicit IgnoreSigpipe(bool active) : active_(active) {
    if (!active_) return;
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    ::sigaction(SIGPIPE, &ignore, &old_);
  }
  ~IgnoreSigpipe() {
    if (active_) ::sigaction(SIGPIPE, &old_, nullptr);
  }
  IgnoreSigpipe(const IgnoreSigpipe&) = delete;
  IgnoreSigpipe& operator=(const IgnoreSigpipe&) = delete;

 private:
  bool active_;
  struct sigaction old_ {};
};

void start(const RunRequest& request, Running& running, RunResult& result) {
  ChildSpec spec;
  spec.argv = request.argv;
  spec.env = request.env;
  spec.label = request.argv.empty() ? std::string() : request.argv.front();
  spec.stdin_pipe = request.input.has_value();
  Checked<SpawnedChild> spawned = spawnChild(spec, request.capture_output);
  if (!spawned.ok()) {
    result.spawn_error = spawned.error;
    return;
  }
  running.pid = spawned.value.pid;
  running.out_fd = spawned.value.stdout_fd;
  running.err_fd = spawned.value.stderr_fd;
  running.in_fd = spawned.value.stdin_fd;
  if (running.in_fd >= 0) {
    ::fcntl(running.in_fd, F_SETFL, ::fcntl(running.in_fd, F_GETFL) | O_NONBLOCK);
    if (request.input->empty()) closeFd(running.in_fd);
  }
}

/// Writes what the pipe takes of the rest of `input`; closes the pipe when all is written or the reader left.
void feed(Running& running, const std::string& input) {
  const ssize_t n = ::write(running.in_fd, input.data() + running.written, input.size() - running.written);
  if (n > 0) running.written += static_cast<std::size_t>(n);
  if (running.written == input.size() || (n < 0 && errno != EINTR && errno != EAGAIN)) closeFd(running.in_fd);
}

/// Appends what is readable to `sink`; closes the pipe at EOF or on an error.
void drain(int& fd, std::string& sink) {
  char buf[16384];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  if (n > 0) {
    sink.append(buf, static_cast<std::size_t>(n));
  } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
    closeFd(fd);
  }
}

/// Records how the program ended, when it has (WNOHANG), or waits for it (blocking).
bool collect(Running& running, RunResult& result, bool block) {
  int status = 0;
  for (;;) {
    const pid_t got = ::waitpid(running.pid, &status, block ? 0 : WNOHANG);
    if (got < 0 && errno == EINTR) continue;
    if (got == 0) return false;
    if (got == running.pid) {
      if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
    }
    running.pid = -1;
    return true;
  }
}

/// One run of runPrograms: at most `max_parallel` programs at once (0: all), each next one started as one ends,
/// every pipe served with poll(), one deadline for the whole run.
class Batch {
 public:
  Batch(const std::vector<RunRequest>& requests, std::size_t max_parallel, std::optional<Clock::time_point> deadline)
      : requests_(requests), max_parallel_(max_parallel), deadline_(deadline), results_(requests.size()),
        running_(requests.size()) {}

  std::vector<RunResult> run() {
    for (;;) {
      collectEnded();              // first: a slot freed here is taken at once
      if (!killed_) startMore();
      if (active_.empty() && (next_ == requests_.size() || killed_)) break;
      const auto now = Clock::now();
      if (deadline_ && now >= *deadline_ && !killed_) {
        killAtDeadline(now);
        continue;  // the stdin pipes are closed: poll again without them
      }
      if (killed_ && now >= drain_until_) {
        // Something outside a group (a grandchild that setsid'd) holds a pipe: give up on it.
        for (std::size_t i : active_) {
          closeFd(running_[i].out_fd);
          closeFd(running_[i].err_fd);
          collect(running_[i], results_[i], true);
        }
        active_.clear();
        break;
      }
      pollOnce(now);
    }
    for (std::size_t i = next_; i < requests_.size(); ++i) {
      results_[i].timed_out = true;  // its turn never came before the deadline
      results_[i].not_started = true;
    }
    return std::move(results_);
  }

 private:
  void startMore() {
    while (next_ < requests_.size() && (max_parallel_ == 0 || active_.size() < max_parallel_)) {
      if (deadline_ && Clock::now() >= *deadline_) return;
      start(requests_[next_], running_[next_], results_[next_]);
      if (running_[next_].pid > 0) active_.push_back(next_);
      ++next_;
    }
  }

  /// Programs whose pipes are all closed are reaped when they have exited; the slot is free then.
  void collectEnded() {
    active_.erase(std::remove_if(active_.begin(), active_.end(),
                                 [&](std::size_t i) {
                                   return !holdsPipes(running_[i]) && collect(running_[i], results_[i], killed_);
                                 }),
                  active_.end());
  }

  void killAtDeadline(Clock::time_point now) {
    for (std::size_t i : active_) {
      results_[i].timed_out = true;
      ::kill(-running_[i].pid, SIGKILL);
      closeFd(running_[i].in_fd);
    }
    killed_ = true;
    drain_until_ = now + kDrainAfterKill;
  }

  void pollOnce(Clock::time_point now) {
    std::vector<pollfd> fds;
    std::vector<std::pair<std::size_t, int*>> owners;  // which program, which of its descriptors
    bool waiting_for_exit = false;  // a program closed its pipes but has not exited yet
    for (std::size_t i : active_) {
      Running& r = running_[i];
      if (!holdsPipes(r)) waiting_for_exit = true;
      for (int* fd : {&r.out_fd, &r.err_fd, &r.in_fd}) {
        if (*fd < 0) continue;
        fds.push_back({*fd, static_cast<short>(fd == &r.in_fd ? POLLOUT : POLLIN), 0});
        owners.emplace_back(i, fd);
      }
    }
    long long wait_ms = -1;
    const auto until = [&](Clock::time_point t) {
      const long long left = std::max<long long>(
          1, std::chrono::duration_cast<std::chrono::milliseconds>(t - now).count());
      wait_ms = wait_ms < 0 ? left : std::min(wait_ms, left);
    };
    if (killed_) until(drain_until_);
    else if (deadline_) until(*deadline_);
    if (waiting_for_exit) until(now + kReapInterval);
    const int rc = ::poll(fds.data(), fds.size(), static_cast<int>(wait_ms));
    if (rc < 0 && errno != EINTR) {
      for (std::size_t i : active_) {
        closeFd(running_[i].out_fd);
        closeFd(running_[i].err_fd);
        closeFd(running_[i].in_fd);
      }
      return;
    }
    for (std::size_t k = 0; rc > 0 && k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      auto [i, fd] = owners[k];
      if (fd == &running_[i].in_fd) {
        feed(running_[i], *requests_[i].input);
      } else {
        drain(*fd, fd == &running_[i].out_fd ? results_[i].out : results_[i].err);
      }
    }
  }

  const std::vector<RunRequest>& requests_;
  const std::size_t max_parallel_;
  const std::optional<Clock::time_point> deadline_;
  std::vector<RunResult> results_;
  std::vector<Running> running_;
  std::size_t next_ = 0;            ///< requests before this one have been started (or failed to start)
  std::vector<std::size_t> active_;  ///< started and not reaped yet, in start order
  bool killed_ = false;
  Clock::time_point drain_until_{};
};

}  // namespace

std::vector<RunResult> runPrograms(const std::vector<RunRequest>& requests, std::chrono::milliseconds timeout,
                                   std::size_t max_parallel) {
  std::optional<Clock::time_point> deadline;
  if (timeout != kNoTimeout) deadline = Clock::now() + timeout;
  const bool any_input = std::any_of(requests.begin(), requests.end(),
                                     [](const RunRequest& r) { return r.input.has_value(); });
  IgnoreSigpipe ignore_sigpipe(any_input);
  return Batch(requests, max_parallel, deadline).run();
}

RunResult runProgram(const RunRequest& request, std::chrono::milliseconds timeout) {
  return runPrograms({request}, timeout).front();
}

std::string replaceProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  if (argv.empty() || argv.front().empty()) return "empty command: nothing to execute";
  std::vector<std::string> argv_storage = argv;
  std::vector<std::string> env_storage;
  env_storage.reserve(env.size());
  for (const auto& [k, v] : env) env_storage.push_back(k + "=" + v);
  std::vector<char*> c_argv;
  for (std::string& a : argv_storage) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  std::vector<char*> c_env;
  for (std::string& e : env_storage) c_env.push_back(e.data());
  c_env.push_back(nullptr);
  ::execvpe(c_argv[0], c_argv.data(), c_env.data());
  return "cannot execute '" + argv.front() + "': " + std::strerror(errno);
}

}  // namespace taehv::process
