#include "guardian.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <initializer_list>

namespace taehv::process {
namespace {

/// Most process groups one guardian tracks at once (workers of one node, or ssh clients of one fan-out).
constexpr int kMaxGroups = 4096;
/// How long stop() waits for the watchdog to exit before killing it.
constexpr std::chrono::milliseconds kStopWait{2000};

// Runs in the forked watchdog: async-signal-safe calls only, no allocation.
[[noreturn]] void watch(int read_fd) {
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU}) {
    ::sigaction(sig, &ign, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (read_fd > 0) ::close_range(0, static_cast<unsigned>(read_fd - 1), 0);
  ::close_range(static_cast<unsigned>(read_fd + 1), ~0U, 0);

  pid_t groups[kMaxGroups];
  int count = 0;
  int value = 0;
  for (;;) {
    const ssize_t n = ::read(read_fd, &value, sizeof value);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof value)) break;  // EOF: the supervisor is gone (4-byte writes are atomic)
    if (value > 0) {
      if (count < kMaxGroups) groups[count++] = value;
    } else {
      for (int i = 0; i < count; ++i) {
        if (groups[i] == -value) {
          groups[i] = groups[--count];
          break;
        }
      }
    }
  }
  for (int i = 0; i < count; ++i) ::kill(-groups[i], SIGKILL);
  ::_exit(0);
}

}  // namespace

bool Guardian::start() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[1]);
    watch(fds[0]);
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::close(fds[0]);
  if (pid < 0) {
    ::close(fds[1]);
    return false;
  }
  pid_ = pid;
  write_fd_ = fds[1];
  return true;
}

void Guardian::send(int value) {
  if (write_fd_ < 0) return;
  ssize_t n;
  do {
    n = ::write(write_fd_, &value, sizeof value);
  } while (n < 0 && errno == EINTR);
}

void Guardian::add(pid_t pgid) {
  if (pgid > 0) send(static_cast<int>(pgid));
}

void Guardian::remove(pid_t pgid) {
  if (pgid > 0) send(-static_cast<int>(pgid));
}

void Guardian::stop() {
  if (write_fd_ >= 0) {
    ::close(write_fd_);
    write_fd_ = -1;
  }
  if (pid_ > 0) {
    // It exits as soon as it sees EOF. Should another fork of this process (not ours) still hold the write
    // end, do not hang: give it kStopWait, then kill it.
    const auto deadline = std::chrono::steady_clock::now() + kStopWait;
    for (;;) {
      const pid_t r = ::waitpid(pid_, nullptr, WNOHANG);
      if (r == pid_ || (r < 0 && errno != EINTR)) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(pid_, SIGKILL);
        while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
        }
        break;
      }
      ::usleep(200);
    }
    pid_ = -1;
  }
}

}  // namespace taehv::process
