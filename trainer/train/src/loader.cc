#include "taehv/train/loader.h"

#include <algorithm>
#include <utility>

#include "taehv/log.h"

namespace taehv::train {

Loader::Loader(std::shared_ptr<const ClipSource> source, const DataConfig& data, uint64_t seed, Layout layout,
               int64_t prefetch)
    : source_(std::move(source)),
      data_(data),
      order_(source_->size(), seed),
      layout_(layout),
      prefetch_(static_cast<size_t>(std::max<int64_t>(1, prefetch))) {
  thread_ = std::thread([this] { run(); });
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Clip Loader::loadWithSkip(int64_t position) {
  const int64_t n = source_->size();
  const int64_t first = order_.itemAt(position);
  ClipRequest req{data_.frames, data_.size, data_.stride_max, data_.crop_min, order_.sampleSeed(position),
                  data_.synthetic_scene_size};
  for (int64_t k = 0; k < n; ++k) {
    const int64_t item = (first + k) % n;
    if (bad_.count(item)) continue;
    try {
      return source_->load(item, req);
    } catch (const DataError& e) {
      bad_.insert(item);
      ++skipped_count_;
      log::warn("skipping unreadable item " + source_->name(item) + ": " + e.what());
    }
  }
  throw DataError("no readable item in data.source '" + data_.source.text() + "' (" + std::to_string(n) +
                  " items, all unreadable)");
}

void Loader::run() {
  try {
    for (int64_t s = 0;; ++s) {
      for (int64_t a = 0; a < layout_.accum; ++a) {
        {
          std::unique_lock<std::mutex> lock(mutex_);
          cv_.wait(lock, [&] { return stop_ || queue_.size() < prefetch_; });
          if (stop_) return;
        }
        std::vector<torch::Tensor> frames, latents;
        for (int64_t j = 0; j < layout_.batch; ++j) {
          const int64_t pos = SampleOrder::position(layout_.base, s, a, layout_.rank, j, layout_.accum,
                                                    layout_.world, layout_.batch);
          Clip clip = loadWithSkip(pos);
          frames.push_back(clip.frames);
          if (clip.latents.defined()) latents.push_back(clip.latents);
        }
        Batch b;
        b.frames = torch::stack(frames);
        if (!latents.empty() && latents.size() == frames.size()) b.latents = torch::stack(latents);
        b.step = layout_.first_step + s;
        b.micro = a;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          queue_.push_back(std::move(b));
        }
        cv_.notify_all();
      }
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
    cv_.notify_all();
  }
}

Batch Loader::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return !queue_.empty() || error_; });
  if (queue_.empty() && error_) std::rethrow_exception(error_);
  Batch b = std::move(queue_.front());
  queue_.pop_front();
  cv_.notify_all();
  return b;
}

}  // namespace taehv::train
