// The global sample order (sample_order.cc): disjoint shards per epoch, reshuffled epochs, ranks x batch.
#include "taehv/train/sample_order.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace taehv::train {
namespace {

TEST(SampleOrder, ShardsAreDisjointPerEpochAndReshuffled) {
  const int64_t n = 24, W = 3, B = 2, A = 2;
  SampleOrder order(n, 5);
  // One epoch = n / (W * B * A) = 2 optimizer steps.
  std::set<int64_t> seen;
  std::vector<std::set<int64_t>> per_rank(W);
  for (int64_t s = 0; s < 2; ++s) {
    for (int64_t a = 0; a < A; ++a) {
      for (int64_t r = 0; r < W; ++r) {
        for (int64_t j = 0; j < B; ++j) {
          const int64_t item = order.itemAt(SampleOrder::position(0, s, a, r, j, A, W, B));
          EXPECT_TRUE(seen.insert(item).second) << "item " << item << " read twice in one epoch";
          per_rank[static_cast<size_t>(r)].insert(item);
        }
      }
    }
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), n);
  std::vector<int64_t> e0, e1;
  for (int64_t p = 0; p < n; ++p) {
    e0.push_back(order.itemAt(p));
    e1.push_back(order.itemAt(n + p));
  }
  EXPECT_NE(e0, e1) << "epoch 1 must be reshuffled";
  // W ranks with batch B read what one rank with batch W * B reads, in the same order.
  for (int64_t r = 0; r < W; ++r) {
    for (int64_t j = 0; j < B; ++j) {
      EXPECT_EQ(SampleOrder::position(0, 1, 0, r, j, 1, W, B), SampleOrder::position(0, 1, 0, 0, r * B + j, 1, 1, W * B));
    }
  }
}

}  // namespace
}  // namespace taehv::train
