// A watchdog process that kills the children's process groups when the supervisor dies, however it dies.
#pragma once

#include <sys/types.h>

namespace taehv::process {

/// PR_SET_PDEATHSIG kills each child when the supervisor dies, but not the processes a child started
/// (grandchildren): they are re-parented and live on after `kill -9` of the supervisor. The guardian is a
/// small forked process that reads the children's process group ids from a pipe; when the pipe reaches
/// end-of-file (the supervisor exited or was killed, since only it holds the write end) it sends SIGKILL to
/// every group still registered and exits. It ignores terminal signals (Ctrl-C reaches the whole foreground
/// group, the guardian included) and closes every inherited descriptor, so it holds no terminal or pipe open.
/// Processes that leave their group (setsid, setpgid) are out of its reach.
class Guardian {
 public:
  Guardian() = default;
  Guardian(const Guardian&) = delete;
  Guardian& operator=(const Guardian&) = delete;
  ~Guardian() { stop(); }

  /// Forks the watchdog. Returns false (and supervision goes on without it) if it could not be started.
  bool start();
  /// Registers a process group to kill if the supervisor dies.
  void add(pid_t pgid);
  /// Forgets a group that has been emptied, so that a later reuse of its id is never signalled.
  void remove(pid_t pgid);
  /// Lets the watchdog exit (killing whatever is still registered) and reaps it.
  void stop();
  /// The watchdog's pid, or -1 when it is not running.
  pid_t pid() const { return pid_; }

 private:
  void send(int value);

  pid_t pid_ = -1;
  int write_fd_ = -1;
};

}  // namespace taehv::process
