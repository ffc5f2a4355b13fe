// Where a training step's time goes, phase by phase (log.phase_times): wall seconds and the main thread's CPU
// seconds, which a loaded machine inflates less than wall. Private to taehv::train.
#pragma once

#include <array>
#include <cstddef>
#include <ctime>

namespace taehv::train {

/// The phases of one optimizer step, in the order a step runs them.
enum class Phase : size_t {
  kData,      ///< waiting for the loader's next batch
  kForward,   ///< the model's forward and the loss terms (under autocast when bf16)
  kBackward,  ///< autograd's backward, the gradient buckets' all-reduces launched from its hooks
  kStats,     ///< the loss read back and the step's PSNR
  kExchange,  ///< waiting for the gradients' all-reduces to finish
  kClip,      ///< the gradient norm and clipping
  kUpdate,    ///< the optimizer's arithmetic (ZeRO's update and all-gather at stages 1-2)
  kEma,       ///< the EMA weights' update
  kAgree,     ///< the step's small all-reduce (loss, PSNR, stop, skipped items)
  kLog,       ///< the log line, metrics row, evaluation, preview and checkpoint that are due
  kCount,
};

/// The phases' names as metrics.jsonl keys ("phase_<name>_s", "phase_<name>_cpu_s").
inline constexpr std::array<const char*, static_cast<size_t>(Phase::kCount)> kPhaseNames = {
    "data", "forward", "backward", "stats", "exchange", "clip", "update", "ema", "agree", "log"};

/// Seconds per phase. `mark(p)` books the time since the previous mark (or `start`) to phase p. Off (the
/// default), mark does nothing: no clock is read.
class PhaseTimes {
 public:
  static constexpr size_t kCount = static_cast<size_t>(Phase::kCount);

  explicit PhaseTimes(bool on) : on_(on) {}
  bool on() const { return on_; }
  void start() {
    if (on_) last_ = now();
  }
  void mark(Phase p) {
    if (!on_) return;
    const Reading t = now();
    wall_[static_cast<size_t>(p)] += t.wall - last_.wall;
    cpu_[static_cast<size_t>(p)] += t.cpu - last_.cpu;
    last_ = t;
  }
  void add(const PhaseTimes& other) {
    for (size_t i = 0; i < kCount; ++i) {
      wall_[i] += other.wall_[i];
      cpu_[i] += other.cpu_[i];
    }
  }
  void clear() { wall_.fill(0), cpu_.fill(0); }
  double wall(size_t i) const { return wall_[i]; }
  double cpu(size_t i) const { return cpu_[i]; }

 private:
  struct Reading {
    double wall = 0, cpu = 0;  ///< seconds: CLOCK_MONOTONIC, this thread's CLOCK_THREAD_CPUTIME_ID
  };
  static Reading now() {
    timespec w{}, c{};
    clock_gettime(CLOCK_MONOTONIC, &w);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c);
    return {static_cast<double>(w.tv_sec) + 1e-9 * static_cast<double>(w.tv_nsec),
            static_cast<double>(c.tv_sec) + 1e-9 * static_cast<double>(c.tv_nsec)};
  }

  bool on_;
  Reading last_;
  std::array<double, kCount> wall_{}, cpu_{};
};

}  // namespace taehv::train
