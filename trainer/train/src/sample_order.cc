#include "taehv/train/sample_order.h"

#include <utility>

#include "random.h"
#include "taehv/train/clip_source.h"

namespace taehv::train {

SampleOrder::SampleOrder(int64_t dataset_size, uint64_t seed) : n_(dataset_size), seed_(seed) {
  if (n_ < 1) throw DataError("the dataset is empty");
}

const std::vector<int64_t>& SampleOrder::permutation(int64_t epoch) const {
  if (epoch != cached_epoch_) {
    cached_.resize(static_cast<size_t>(n_));
    for (int64_t i = 0; i < n_; ++i) cached_[static_cast<size_t>(i)] = i;
    Rng rng(seed_ * 0x100000001b3ull + static_cast<uint64_t>(epoch) + 0x51ed);
    for (int64_t i = n_ - 1; i > 0; --i) std::swap(cached_[static_cast<size_t>(i)], cached_[rng.next() % (i + 1)]);
    cached_epoch_ = epoch;
  }
  return cached_;
}

int64_t SampleOrder::itemAt(int64_t position) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return permutation(position / n_)[static_cast<size_t>(position % n_)];
}

uint64_t SampleOrder::sampleSeed(int64_t position) const {
  return splitmix(seed_ ^ splitmix(static_cast<uint64_t>(position) ^ 0xa5a5a5a5ull));
}

}  // namespace taehv::train
