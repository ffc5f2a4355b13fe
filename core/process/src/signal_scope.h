// The supervisor's signal handling: handlers that count signals and wake the poll() loop through a self-pipe.
#pragma once

#include <signal.h>

#include <cstddef>
#include <string>

#include "taehv/checked.h"

namespace taehv::process {

/// Signals forwarded to every child's process group.
constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};

/// Installs the handlers (forwarded signals, SIGCHLD) and ignores SIGPIPE for the duration of one supervise();
/// restores the previous dispositions and mask when destroyed. The handlers are process-wide: one SignalScope
/// at a time.
class SignalScope {
 public:
  SignalScope() = default;
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;
  ~SignalScope();

  /// Creates the self-pipe and installs the handlers; fails with why the pipe could not be created.
  Status install();
  /// The read end of the self-pipe: readable after any handled signal.
  int wakeFd() const { return wake_read_; }
  /// Empties the self-pipe.
  void drainWake() const;
  /// How many times `sig` arrived since the last call (or install()); resets the count.
  int takePending(int sig) const;

 private:
  struct Saved {
    int sig;
    struct sigaction old;
  };
  void save(int sig, const struct sigaction& act);

  Saved saved_[8]{};
  std::size_t saved_count_ = 0;
  sigset_t old_mask_{};
  int wake_read_ = -1;
};

}  // namespace taehv::process
