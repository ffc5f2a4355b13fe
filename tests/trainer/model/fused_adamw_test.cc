// FusedAdamW applies the same update as torch::optim::AdamW (same hyper-parameters), step after step.
#include "taehv/model/fused_adamw.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace taehv {
namespace {

TEST(FusedAdamWTest, MatchesTorchAdamWOverSeveralSteps) {
  testing::useTestThreads();
  torch::manual_seed(7);
  std::vector<torch::Tensor> a;
  std::vector<torch::Tensor> b;
  std::vector<torch::Tensor> initial;
  for (const auto& shape : std::vector<std::vector<int64_t>>{{64, 32, 3, 3}, {100003}, {7}}) {
    const torch::Tensor init = torch::randn(shape);
    initial.push_back(init);
    a.push_back(init.clone().requires_grad_(true));
    b.push_back(init.clone().requires_grad_(true));
  }
  torch::optim::AdamW reference(a, torch::optim::AdamWOptions(3e-4).betas({0.9, 0.95}).weight_decay(1e-2));
  FusedAdamW fused(b, FusedAdamWOptions{});
  for (int step = 0; step < 5; ++step) {
    reference.zero_grad();
    fused.zeroGrad();
    for (std::size_t i = 0; i < a.size(); ++i) {
      const torch::Tensor target = torch::randn(a[i].sizes());
      (a[i] * target).sum().backward();
      (b[i] * target).sum().backward();
    }
    reference.step();
    fused.step();
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    // Parameters move by ~5 x 3e-4 in 5 steps; the two must agree to float rounding.
    EXPECT_LE(testing::maxAbsDiff(a[i], b[i]), 1e-6) << i;
    EXPECT_GT(testing::maxAbsDiff(b[i], initial[i]), 1e-4) << i;  // the update did move them
  }
  // zeroGrad releases gradients rather than filling them.
  fused.zeroGrad();
  EXPECT_FALSE(b[0].grad().defined());
}

}  // namespace
}  // namespace taehv
