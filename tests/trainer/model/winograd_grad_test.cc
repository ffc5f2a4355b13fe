// The Winograd weight gradient (trainer/model/src/winograd_grad.h, private to taehv::model) against libtorch's own
// convolution_backward (oneDNN's direct kernels), at the shapes of TAEHV's 3x3 convolutions and at odd ones: 3
// channels, one tile, non-square frames, a batch of 1. A wrong transform entry, a tile read one pixel off or the zero
// border left out each put the gradient O(1) relative off.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <tuple>
#include <vector>

#include "winograd_grad.h"

namespace taehv::detail {
namespace {

torch::Tensor directWeightGrad(const torch::Tensor& x, const torch::Tensor& gy) {
  const torch::Tensor w = torch::zeros({gy.size(1), x.size(1), 3, 3});
  return std::get<1>(at::convolution_backward(gy, x, w, std::nullopt, {1, 1}, {1, 1}, {1, 1}, false, {0, 0}, 1,
                                              {false, true, false}));
}

TEST(WinogradWeightGrad, MatchesTheDirectWeightGradient) {
  torch::manual_seed(3);
  // (N, Ci, H, W, Co); 48 x 8 x 8 tiles of 32x32 frames fill 6 chunks of 512, 40 x 4 x 5 of 16x20 one and a part
  const std::vector<std::vector<int64_t>> shapes = {{24, 64, 16, 16, 64}, {12, 256, 4, 4, 256}, {12, 128, 8, 8, 64},
                                                    {48, 3, 32, 32, 64},  {48, 64, 32, 32, 3},   {1, 5, 4, 12, 7},
                                                    {40, 16, 16, 20, 24}, {2, 17, 8, 20, 9}};
  for (const auto& s : shapes) {
    const torch::Tensor x = torch::randn({s[0], s[1], s[2], s[3]});
    const torch::Tensor gy = torch::randn({s[0], s[4], s[2], s[3]});
    ASSERT_TRUE(winogradWeightGradFits(x, gy));
    const torch::Tensor reference = directWeightGrad(x.to(torch::kDouble), gy.to(torch::kDouble));
    const torch::Tensor got = winogradWeightGrad(x, gy);
    ASSERT_EQ(got.sizes(), reference.sizes());
    const double error = (got.to(torch::kDouble) - reference).abs().max().item<double>() /
                         reference.abs().max().item<double>();
    const double direct_error = (directWeightGrad(x, gy).to(torch::kDouble) - reference).abs().max().item<double>() /
                                reference.abs().max().item<double>();
    EXPECT_LE(error, 1e-4) << "N, Ci, H, W, Co = " << s << "; the direct fp32 one: " << direct_error;
  }
}

TEST(WinogradWeightGrad, TakesOnlyFp32FramesInWholeTiles) {
  const torch::Tensor gy = torch::randn({2, 4, 8, 8});
  EXPECT_TRUE(winogradWeightGradFits(torch::randn({2, 3, 8, 8}), gy));
  EXPECT_FALSE(winogradWeightGradFits(torch::randn({2, 3, 8, 8}).to(torch::kBFloat16), gy));
  EXPECT_FALSE(winogradWeightGradFits(torch::randn({2, 3, 6, 8}), torch::randn({2, 4, 6, 8})));
  EXPECT_FALSE(winogradWeightGradFits(torch::randn({2, 3, 8, 10}), torch::randn({2, 4, 8, 10})));
  EXPECT_THROW(winogradWeightGrad(torch::randn({2, 3, 6, 8}), torch::randn({2, 4, 6, 8})), c10::Error);
}

}  // namespace
}  // namespace taehv::detail
