// Test helper: a FIFO (named pipe) handed to code that must refuse it without opening it. Opening a FIFO blocks
// until the other end is opened; should the code under test open it anyway, the guard opens the other end after a
// deadline (a reader then sees an empty file, a writer's bytes are drained), so the test fails on fired() instead of
// hanging the suite. For code in this process; a program run by a test is bounded by the runner's timeout.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace taehv::test {

class FifoGuard {
 public:
  /// Makes the FIFO at `path` (mkfifo, mode 0600) and starts the watchdog.
  explicit FifoGuard(std::string path, std::chrono::milliseconds deadline = std::chrono::seconds(10))
      : path_(std::move(path)) {
    if (::mkfifo(path_.c_str(), 0600) != 0) throw std::runtime_error("mkfifo " + path_ + " failed");
    watchdog_ = std::thread([this, deadline] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (stop_cv_.wait_for(lock, deadline, [this] { return stopping_; })) return;
      // A reader stuck in open() is let go by a non-blocking open for writing, which succeeds only while one waits;
      // a writer stuck in open() by a read end, kept open (and drained) so that its writes do not raise SIGPIPE.
      const int read_end = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
      char drain[4096];
      while (!stopping_) {
        const int fd = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd >= 0) {
          fired_ = true;
          ::close(fd);
        }
        if (read_end >= 0 && ::read(read_end, drain, sizeof drain) > 0) fired_ = true;
        stop_cv_.wait_for(lock, std::chrono::milliseconds(50), [this] { return stopping_; });
      }
      if (read_end >= 0) ::close(read_end);
    });
  }
  ~FifoGuard() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    stop_cv_.notify_all();
    watchdog_.join();
    ::unlink(path_.c_str());
  }
  FifoGuard(const FifoGuard&) = delete;
  FifoGuard& operator=(const FifoGuard&) = delete;

  const std::string& path() const { return path_; }
  /// True when, after the deadline, a reader was found waiting in the FIFO's open or a writer wrote to it: the code
  /// under test opened it.
  bool fired() const { return fired_; }

 private:
  std::string path_;
  std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::atomic<bool> fired_{false};
  std::thread watchdog_;
};

}  // namespace taehv::test
