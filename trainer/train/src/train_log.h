// What a training run tells its user, on rank 0 only: the terminal (log lines every log.every steps, a progress
// bar between them on a terminal), output.dir/metrics.jsonl, TensorBoard scalars and images, preview PNGs.
// Private to taehv::train.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "evaluation.h"
#include "phase_times.h"
#include "taehv/files/file_descriptor.h"
#include "taehv/train/config.h"
#include "taehv/train/events.h"

namespace taehv::train {

/// h:mm:ss ("?" for a negative or non-finite count).
std::string formatDuration(double seconds);

class TrainLog {
 public:
  /// On rank 0 opens output.dir/metrics.jsonl for appending (a resumed run first drops the rows after its
  /// checkpoint, so no step is there twice) and the TensorBoard file when log.tensorboard is on.
  /// `frames_per_step`: input frames of one step over all ranks (for frames/s).
  TrainLog(const Config& cfg, bool rank0, int64_t start_step, bool resumed, int64_t frames_per_step);

  /// One line on stdout (rank 0; clears the progress bar first).
  void say(const std::string& line) const;

  struct Step {
    int64_t done = 0;  ///< steps done, this one included
    double loss = 0, psnr = 0, lr = 0;
    double step_s = 0, data_wait_s = 0, optimizer_s = 0, update_s = 0, grad_norm = 0;
    int64_t data_skipped = 0;
    double time_left_s = -1;  ///< of train.max_minutes (-1: no budget): the ETA is the sooner end
    PhaseTimes* phases = nullptr;  ///< with log.phase_times: the phases since the last line, cleared once written
  };
  /// Adds a step to the window since the last log line; at log.every, the first step, or `force`, writes the
  /// line and the metrics row with the window's means, else moves the progress bar (on a terminal).
  void step(const Step& s, bool force);
  /// The held-out evaluation's line, metrics row, scalars and preview (eval-step-N.png).
  void eval(int64_t done, const EvalSummary& e, bool held_out, bool ema);
  /// The training preview of step `done` (step-N.png).
  void preview(int64_t done, const RgbImage& image);

  double elapsed() const;

 private:
  void appendMetrics(const std::string& json_line);
  void writePreview(const std::string& file, const std::string& tag, int64_t done, const RgbImage& image);

  const Config& cfg_;
  bool rank0_;
  bool tty_;
  int64_t start_step_;
  int64_t frames_per_step_;
  std::chrono::steady_clock::time_point start_;
  std::unique_ptr<TfEventsWriter> tb_;
  files::FileDescriptor metrics_;  ///< metrics.jsonl, open for appending (rank 0)
  // The window since the last log line, and the ETA's moving average of the step time.
  double step_avg_ = 0, wait_sum_ = 0, step_sum_ = 0, loss_sum_ = 0, psnr_sum_ = 0, optimizer_sum_ = 0, update_sum_ = 0;
  int64_t window_ = 0;
};

}  // namespace taehv::train
