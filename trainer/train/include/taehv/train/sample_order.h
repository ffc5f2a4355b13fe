// The deterministic global sample order that gives each rank a disjoint shard per epoch. sample_order.cc.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace taehv::train {

/// The global sample order. Epoch e is a permutation of [0, dataset_size) drawn from (seed, e); global
/// position p reads item order(p / N)[p % N]. The position of sample j of rank r in micro-step a of
/// optimizer step s is base + ((s * A + a) * W + r) * B + j, so within an epoch the ranks read disjoint
/// shards, and W ranks with batch B see exactly what 1 rank with batch W * B sees.
class SampleOrder {
 public:
  SampleOrder(int64_t dataset_size, uint64_t seed);
  int64_t itemAt(int64_t position) const;
  static int64_t position(int64_t base, int64_t step, int64_t micro, int64_t rank, int64_t j, int64_t accum,
                          int64_t world, int64_t batch) {
    return base + ((step * accum + micro) * world + rank) * batch + j;
  }
  /// Seed of the augmentation (stride, crop, synthetic content) of the sample at `position`.
  uint64_t sampleSeed(int64_t position) const;

 private:
  const std::vector<int64_t>& permutation(int64_t epoch) const;
  int64_t n_;
  uint64_t seed_;
  mutable std::mutex mutex_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_;
};

}  // namespace taehv::train
