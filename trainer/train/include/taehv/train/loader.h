// The background prefetching loader: this rank's batches in the global sample order, unreadable items skipped.
// loader.cc.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "taehv/train/clip_source.h"
#include "taehv/train/config.h"
#include "taehv/train/sample_order.h"

namespace taehv::train {

/// One micro-step's data for this rank.
struct Batch {
  torch::Tensor frames;   ///< [B, T, 3, S, S]
  torch::Tensor latents;  ///< [B, L, C, h, w] or undefined
  int64_t step = 0;
  int64_t micro = 0;
};

/// Decodes this rank's batches in order on a background thread, `prefetch` batches ahead.
/// An unreadable item is skipped with a warning (once per item) and replaced by the next readable item in the
/// dataset, deterministically; skipped() counts the distinct items skipped.
class Loader {
 public:
  struct Layout {
    int64_t base = 0;        ///< global position of the first sample of `first_step`
    int64_t first_step = 0;  ///< steps are counted from here
    int64_t accum = 1, world = 1, rank = 0, batch = 1;
  };
  Loader(std::shared_ptr<const ClipSource> source, const DataConfig& data, uint64_t seed, Layout layout,
         int64_t prefetch);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  /// The next micro-batch (step-major, micro-minor). Rethrows a fatal data error (no readable item at all).
  Batch next();
  int64_t skipped() const { return skipped_count_.load(); }

 private:
  void run();
  Clip loadWithSkip(int64_t position);

  std::shared_ptr<const ClipSource> source_;
  DataConfig data_;
  SampleOrder order_;
  Layout layout_;
  size_t prefetch_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::set<int64_t> bad_;
  std::atomic<int64_t> skipped_count_{0};
  std::thread thread_;
};

}  // namespace taehv::train
