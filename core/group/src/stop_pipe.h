// The group's stop signal for the launcher's poll loop: a pipe whose read end becomes readable, and stays so, once
// raise() was called (nothing ever reads it). Shared by both group implementations (node_group.h, stopFd()).
#pragma once

#include <fcntl.h>
#include <unistd.h>

namespace taehv::group {

class StopPipe {
 public:
  StopPipe() {
    if (::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0) fds_[0] = fds_[1] = -1;
  }
  ~StopPipe() {
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  StopPipe(const StopPipe&) = delete;
  StopPipe& operator=(const StopPipe&) = delete;

  /// false when the pipe could not be made (start() fails with that).
  bool ok() const { return fds_[0] >= 0; }
  /// The end the launcher polls.
  int readFd() const { return fds_[0]; }
  /// Makes readFd() readable; again is a no-op (the pipe is non-blocking and already holds a byte, or is full).
  void raise() const {
    const char byte = 1;
    if (fds_[1] >= 0 && ::write(fds_[1], &byte, 1) < 0) {
      // Non-blocking and full: already readable.
    }
  }

 private:
  int fds_[2] = {-1, -1};
};

}  // namespace taehv::group
