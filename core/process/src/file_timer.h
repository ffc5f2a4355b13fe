// torchelastic's file timer, served as torchrun's agent serves it (torch/distributed/elastic/timer/
// file_based_local_timer.py, FileTimerServer): with TORCHELASTIC_ENABLE_FILE_TIMER=1 the workers get
// TORCHELASTIC_TIMER_FILE, a named pipe; torch's FileTimerClient writes one JSON line per request,
// {"version": 1, "pid": P, "scope_id": S, "expiration_time": T, "signal": N} (T in Unix seconds; T < 0 releases
// the scope), and a worker whose timer expired gets its signal (SIGKILL by default). Unlike torchrun's agent, which
// then kills itself, taehv-run sees the worker die and fails fast as for any failed worker.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "taehv/checked.h"

namespace taehv::process {

/// The variables of torchelastic's file timer.
inline constexpr const char* kEnableFileTimerEnv = "TORCHELASTIC_ENABLE_FILE_TIMER";
inline constexpr const char* kTimerFileEnv = "TORCHELASTIC_TIMER_FILE";

class FileTimerServer {
 public:
  /// Makes the named pipe at `path` (an existing one is reused) and opens it for reading.
  static Checked<std::unique_ptr<FileTimerServer>> create(const std::string& path);
  ~FileTimerServer();
  FileTimerServer(const FileTimerServer&) = delete;
  FileTimerServer& operator=(const FileTimerServer&) = delete;

  const std::string& path() const { return path_; }
  /// Readable when requests wait (for poll/epoll).
  int fd() const { return read_fd_; }
  /// Reads the waiting requests (a malformed line: one warning per kGarbageLogInterval, ignored).
  void readRequests();
  /// Signals every worker with an expired timer (one line each, naming the scope), forgets its timers and those of
  /// processes that are gone. `name_of(pid)` says who the pid is ("rank 1 (pid 42)").
  void enforce(const std::function<std::string(int pid)>& name_of);

 private:
  struct Timer {
    double expiration = 0;  ///< Unix seconds
    int signal = 0;
  };
  FileTimerServer(std::string path, int read_fd, int write_fd) : path_(std::move(path)), read_fd_(read_fd), write_fd_(write_fd) {}
  void handleLine(const std::string& line);

  std::string path_;
  int read_fd_ = -1;
  int write_fd_ = -1;  ///< our own writer: the pipe never reads as EOF (no busy wake-ups between clients)
  std::string pending_;
  std::map<std::pair<int, std::string>, Timer> timers_;  ///< (pid, scope) -> timer
  std::chrono::steady_clock::time_point last_garbage_log_{};
  bool garbage_logged_ = false;
};

}  // namespace taehv::process
