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
  SpawnOutcome spawned = spawnChild(spec, request.capture_output);
  if (!spawned.error.empty()) {
    result.spawn_error = spawned.error;
    return;
  }
  running.pid = spawned.child.pid;
  running.out_fd = spawned.child.stdout_fd;
  running.err_fd = spawned.child.stderr_fd;
  running.in_fd = spawned.child.stdin_fd;
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

/// Serves every open pipe with poll() until all are closed; at the deadline kills the programs still holding
/// one (and marks them timed out).
void servePipes(const std::vector<RunRequest>& requests, std::vector<Running>& running,
                std::vector<RunResult>& results, std::optional<Clock::time_point> deadline) {
  bool killed = false;
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<std::size_t, int*>> owners;  // which program, which of its descriptors
    for (std::size_t i = 0; i < running.size(); ++i) {
      for (int* fd : {&running[i].out_fd, &running[i].err_fd, &running[i].in_fd}) {
        if (*fd < 0) continue;
        fds.push_back({*fd, static_cast<short>(fd == &running[i].in_fd ? POLLOUT : POLLIN), 0});
        owners.emplace_back(i, fd);
      }
    }
    if (fds.empty()) return;
    int wait_ms = -1;
    if (deadline) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now());
      if (left.count() <= 0 && !killed) {
        for (std::size_t i = 0; i < running.size(); ++i) {
          if (running[i].pid > 0 && holdsPipes(running[i])) {
            results[i].timed_out = true;
            ::kill(-running[i].pid, SIGKILL);
            closeFd(running[i].in_fd);
          }
        }
        killed = true;
        continue;  // the stdin pipes are closed: poll again without them
      }
      wait_ms = static_cast<int>(killed ? kDrainAfterKill.count() : std::max<long long>(left.count(), 1));
    }
    const int rc = ::poll(fds.data(), fds.size(), wait_ms);
    if (rc < 0) {
      if (errno == EINTR) continue;
      for (Running& r : running) {
        closeFd(r.out_fd);
        closeFd(r.err_fd);
        closeFd(r.in_fd);
      }
      return;
    }
    if (rc == 0 && killed) {
      // Something outside the group (a grandchild that setsid'd) holds a pipe: give up on it.
      for (Running& r : running) {
        closeFd(r.out_fd);
        closeFd(r.err_fd);
      }
      return;
    }
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      auto [i, fd] = owners[k];
      if (fd == &running[i].in_fd) {
        feed(running[i], *requests[i].input);
      } else {
        drain(*fd, fd == &running[i].out_fd ? results[i].out : results[i].err);
      }
    }
  }
}

/// Waits for the program to exit; past the deadline it is killed (and marked timed out) first.
void reap(Running& running, RunResult& result, std::optional<Clock::time_point> deadline) {
  int status = 0;
  for (;;) {
    const bool may_block = !deadline || result.timed_out;
    const pid_t got = ::waitpid(running.pid, &status, may_block ? 0 : WNOHANG);
    if (got < 0 && errno == EINTR) continue;
    if (got == 0) {
      if (Clock::now() >= *deadline) {
        result.timed_out = true;
        ::kill(-running.pid, SIGKILL);
      } else {
        std::this_thread::sleep_for(kReapInterval);
      }
      continue;
    }
    if (got == running.pid) {
      if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
    }
    return;
  }
}

}  // namespace

std::vector<RunResult> runPrograms(const std::vector<RunRequest>& requests, std::chrono::milliseconds timeout) {
  std::optional<Clock::time_point> deadline;
  if (timeout != kNoTimeout) deadline = Clock::now() + timeout;
  const bool any_input = std::any_of(requests.begin(), requests.end(),
                                     [](const RunRequest& r) { return r.input.has_value(); });
  IgnoreSigpipe ignore_sigpipe(any_input);

  std::vector<RunResult> results(requests.size());
  std::vector<Running> running(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) start(requests[i], running[i], results[i]);
  servePipes(requests, running, results, deadline);
  for (std::size_t i = 0; i < running.size(); ++i) {
    if (running[i].pid > 0) reap(running[i], results[i], deadline);
  }
  return results;
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
