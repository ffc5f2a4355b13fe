#include "signal_scope.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace taehv::process {
namespace {

int g_wake_write = -1;
std::atomic<int> g_pending[NSIG];

extern "C" void onSignal(int sig) {
  const int saved = errno;
  if (sig > 0 && sig < NSIG) g_pending[sig].fetch_add(1, std::memory_order_relaxed);
  if (g_wake_write >= 0) {
    const char byte = 0;
    ssize_t ignored = ::write(g_wake_write, &byte, 1);  // full pipe: a wake-up is already pending
    (void)ignored;
  }
  errno = saved;
}

}  // namespace

Status SignalScope::install() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return {std::string("cannot create pipe: ") + std::strerror(errno)};
  wake_read_ = fds[0];
  g_wake_write = fds[1];
  for (auto& p : g_pending) p.store(0);
  struct sigaction act {};
  act.sa_handler = onSignal;
  sigemptyset(&act.sa_mask);
  act.sa_flags = SA_RESTART;
  for (int sig : kForwardedSignals) save(sig, act);
  act.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  save(SIGCHLD, act);
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  save(SIGPIPE, ign);  // a closed stdout of ours must give EPIPE, not kill the supervisor
  sigset_t ours;
  sigemptyset(&ours);
  for (int sig : kForwardedSignals) sigaddset(&ours, sig);
  sigaddset(&ours, SIGCHLD);
  ::pthread_sigmask(SIG_UNBLOCK, &ours, &old_mask_);
  return {};
}

SignalScope::~SignalScope() {
  for (int i = static_cast<int>(saved_count_) - 1; i >= 0; --i) ::sigaction(saved_[i].sig, &saved_[i].old, nullptr);
  if (saved_count_ > 0) ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  const int w = g_wake_write;
  g_wake_write = -1;
  if (w >= 0) ::close(w);
  if (wake_read_ >= 0) ::close(wake_read_);
}

void SignalScope::drainWake() const {
  char buf[256];
  while (::read(wake_read_, buf, sizeof buf) > 0) {
  }
}

int SignalScope::takePending(int sig) const { return g_pending[sig].exchange(0); }

void SignalScope::save(int sig, const struct sigaction& act) {
  Saved& s = saved_[saved_count_];
  s.sig = sig;
  if (::sigaction(sig, &act, &s.old) == 0) ++saved_count_;
}

}  // namespace taehv::process
