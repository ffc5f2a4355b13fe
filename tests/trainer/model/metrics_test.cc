// trainer/model's image metrics: edgeShare (how much of the original's edges a reconstruction keeps).
#include "taehv/model/metrics.h"

#include <gtest/gtest.h>

namespace taehv {
namespace {

// [1, 3, 16, 16] images of a vertical edge from 0.2 to 0.8 at column 8: as a one-pixel step, or ramped in
// `ramp` equal steps ending there.
torch::Tensor edge(int ramp) {
  auto row = torch::full({16}, 0.2);
  for (int64_t c = 8; c < 16; ++c) row[c] = 0.8;
  for (int k = 1; k < ramp; ++k) row[8 - ramp + k] = 0.2 + 0.6 * k / ramp;
  return row.expand({1, 3, 16, 16}).contiguous();
}

// The share is 1 for the original itself and ~1/n for an edge ramped over n pixels (the same 0.6 step spread over
// n neighbour differences); a flat image keeps none of the edge; an image without edges has nothing to lose.
TEST(Metrics, EdgeShareIsTheOriginalsEdgesTheReconstructionKeeps) {
  const auto sharp = edge(1);
  EXPECT_NEAR(edgeShare(sharp, sharp), 1.0, 1e-6);
  EXPECT_NEAR(edgeShare(edge(2), sharp), 0.5, 1e-6);
  EXPECT_NEAR(edgeShare(edge(3), sharp), 1.0 / 3, 1e-6);
  EXPECT_NEAR(edgeShare(torch::full_like(sharp, 0.5), sharp), 0.0, 1e-6);
  EXPECT_NEAR(edgeShare(sharp, torch::full_like(sharp, 0.5)), 1.0, 1e-6);
  // down instead of across: the same
  EXPECT_NEAR(edgeShare(edge(3).transpose(2, 3), sharp.transpose(2, 3)), 1.0 / 3, 1e-6);
}

}  // namespace
}  // namespace taehv
