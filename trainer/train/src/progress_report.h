// This rank's progress, reported to its node's taehv-run over the channel named in TAEHV_PROGRESS_SOCKET
// (taehv/process/progress.h): the optimizer step it is in and the section of that step. Without the variable,
// nothing is sent. Also the test-only hooks that make a rank hang or a section slow (see fromEnvironment).
#pragma once

#include <sys/un.h>

#include <cstdint>
#include <string>
#include <vector>

#include "taehv/env.h"
#include "taehv/process/progress.h"

namespace taehv::train {

class ProgressReporter {
 public:
  /// Reads TAEHV_PROGRESS_SOCKET and, for tests only (documented as such in docs/trainer.md), these hooks, which act
  /// in the first attempt only (TORCHELASTIC_RESTART_COUNT unset or 0) so that a restart can finish:
  ///  - TAEHV_TEST_HANG_AT_STEP=N with TAEHV_TEST_HANG_RANK=R: rank R blocks its main thread for good (in
  ///    taehvTestHangForever) when it begins step N (0-based: after N steps), while its process lives.
  ///  - TAEHV_TEST_SLOW_SECTION=<section>:<step>:<seconds>[,...]: on rank 0 (TAEHV_TEST_SLOW_RANK=R: rank R),
  ///    entering that section of that step (`*`: of every step) sleeps that long first (a slow first step,
  ///    checkpoint save or evaluation pass; a straggler).
  /// Throws std::runtime_error naming a malformed hook variable.
  ProgressReporter(const Env& env, int rank);
  ~ProgressReporter();
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  /// Reports `section` of step `step` (0-based); one non-blocking datagram, a failure to send is ignored.
  void report(int64_t step, process::Section section);

 private:
  /// SlowSection::step for `*`.
  static constexpr int64_t kEveryStep = -1;
  struct SlowSection {
    process::Section section;
    int64_t step;
    double seconds;
  };
  int fd_ = -1;          ///< the datagram socket, -1 without TAEHV_PROGRESS_SOCKET (or a path too long for it)
  sockaddr_un addr_{};   ///< TAEHV_PROGRESS_SOCKET's address, built once
  int rank_ = 0;
  int64_t hang_at_step_ = -1;
  std::vector<SlowSection> slow_;
};

/// The test hook's blocking frame (TAEHV_TEST_HANG_AT_STEP): never returns; a hang test finds this name in the stacks.
[[noreturn]] void taehvTestHangForever();

}  // namespace taehv::train
