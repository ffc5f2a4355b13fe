// The training loss (trainer/train/src/objective.h, private to the trainer): train.frame_diff_weight and
// train.edge_weight, train.ssim_weight.
#include "objective.h"

#include <gtest/gtest.h>

#include "taehv/model/autocast.h"

namespace taehv::train {
namespace {

double value(const torch::Tensor& t) { return t.item<double>(); }

// A reconstruction off by the same amount in every frame changes nothing over time: the frame-difference term is
// 0 and the loss is the plain MSE. A reconstruction that stands still while the input moves pays the term, weight
// times the MSE of the changes; at weight 0 (the default) it is left out.
TEST(Objective, FrameDifferenceTermWeighsWhatChangesBetweenFrames) {
  torch::manual_seed(0);
  const auto target = torch::rand({2, 5, 3, 8, 8});
  const auto offset = target + 0.1;
  const auto still = target.narrow(1, 0, 1).expand_as(target).contiguous();
  TrainConfig plain, diff;
  diff.frame_diff_weight = 2;
  EXPECT_NEAR(value(reconstructionLoss(plain, offset, target)), 0.01, 1e-6);
  EXPECT_NEAR(value(reconstructionLoss(diff, offset, target)), 0.01, 1e-6);
  const double mse = value(torch::mse_loss(still, target));
  const auto changes = target.narrow(1, 1, 4) - target.narrow(1, 0, 4);  // the still clip's changes are 0
  const double change_mse = value(changes.pow(2).mean());
  EXPECT_NEAR(value(reconstructionLoss(plain, still, target)), mse, 1e-6);
  EXPECT_NEAR(value(reconstructionLoss(diff, still, target)), mse + 2 * change_mse, 1e-5);
  EXPECT_GT(change_mse, 0.05);  // so the term is not negligible here
  TrainConfig l1 = diff;
  l1.loss = LossKind::kL1;
  EXPECT_NEAR(value(reconstructionLoss(l1, still, target)), value(torch::l1_loss(still, target)) + 2 * change_mse,
              1e-5);
}

// A reconstruction off by the same amount everywhere keeps every edge: the edge term is 0. A flat one (each
// frame's mean colour) loses them and pays weight x the mean of the input's squared neighbour differences, across
// and down averaged.
TEST(Objective, EdgeTermWeighsDifferencesBetweenNeighbouringPixels) {
  torch::manual_seed(0);
  const auto target = torch::rand({2, 3, 3, 8, 8});
  TrainConfig edges;
  edges.edge_weight = 3;
  EXPECT_NEAR(value(reconstructionLoss(edges, target + 0.1, target)), 0.01, 1e-6);
  const auto flat = target.mean({-2, -1}, true).expand_as(target).contiguous();
  const double across = value((target.narrow(-1, 1, 7) - target.narrow(-1, 0, 7)).pow(2).mean());
  const double down = value((target.narrow(-2, 1, 7) - target.narrow(-2, 0, 7)).pow(2).mean());
  EXPECT_GT(across, 0.05);  // so the term is not negligible here
  EXPECT_NEAR(value(reconstructionLoss(edges, flat, target)),
              value(torch::mse_loss(flat, target)) + 3 * 0.5 * (across + down), 1e-5);
}

// Frames [1, 2, 3, 24, 24] of a vertical edge of the given contrast around mid-grey; blurred: the edge ramps over
// 7 pixels instead of jumping between two.
torch::Tensor edgeClip(double contrast, bool blurred) {
  auto x = torch::arange(24, torch::kFloat) - 11.5;
  auto ramp = blurred ? (x / 7).clamp(-0.5, 0.5) : (x > 0).to(torch::kFloat) - 0.5;
  return (0.5 + contrast * ramp).expand({1, 2, 3, 24, 24}).contiguous();
}

// The SSIM term is 0 for a perfect reconstruction and weight x (1 - SSIM) otherwise. Unlike the edge term (an MSE:
// a sixteenth at a quarter of the contrast), it charges a blurred faint edge about half what it charges a strong one.
TEST(Objective, SsimTermWeighsAFaintEdgeFarMoreThanTheEdgeTermDoes) {
  TrainConfig ssim, edges;
  ssim.ssim_weight = 2;
  edges.edge_weight = 2;
  auto charge = [](const TrainConfig& t, double contrast) {  // what the term adds to the MSE for a blurred edge
    const auto target = edgeClip(contrast, false), blurred = edgeClip(contrast, true);
    return value(reconstructionLoss(t, blurred, target)) - value(torch::mse_loss(blurred, target));
  };
  const auto sharp = edgeClip(0.6, false);
  EXPECT_NEAR(value(reconstructionLoss(ssim, sharp, sharp)), 0, 1e-6);
  const double ssim_strong = charge(ssim, 0.6), ssim_faint = charge(ssim, 0.15);
  EXPECT_GT(ssim_strong, 0.05);
  EXPECT_GT(ssim_faint / ssim_strong, 0.3);  // measured 0.47
  EXPECT_NEAR(charge(edges, 0.15) / charge(edges, 0.6), 1.0 / 16, 1e-3);
}

// Under bf16 autocast (train.cpu_precision bf16, train.bf16) the SSIM term is still computed in fp32: its variances
// are differences of near-equal numbers.
TEST(Objective, SsimTermStaysFp32UnderAutocast) {
  torch::manual_seed(0);
  const auto target = torch::rand({1, 2, 3, 16, 16});
  const auto pred = (target + 0.05 * torch::randn_like(target)).clamp(0, 1);
  TrainConfig ssim;
  ssim.ssim_weight = 1;
  const double fp32 = value(reconstructionLoss(ssim, pred, target));
  double under_autocast = 0;
  {
    Bf16Autocast on(c10::DeviceType::CPU, true);
    under_autocast = value(reconstructionLoss(ssim, pred, target));
  }
  EXPECT_GT(fp32 - value(torch::mse_loss(pred, target)), 0.005);  // the term is there (0.013)
  EXPECT_NEAR(under_autocast, fp32, 1e-6);
}

// train.ssim_from_step: the steps before it train without the SSIM term, the others with it; nothing else changes.
TEST(Objective, SsimTermCountsFromItsStep) {
  TrainConfig t;
  t.ssim_weight = 0.1;
  t.edge_weight = 16;
  t.ssim_from_step = 800;
  EXPECT_EQ(lossTermsAt(t, 0).ssim_weight, 0);
  EXPECT_EQ(lossTermsAt(t, 799).ssim_weight, 0);
  EXPECT_EQ(lossTermsAt(t, 800).ssim_weight, 0.1);
  EXPECT_EQ(lossTermsAt(t, 799).edge_weight, 16);
  t.ssim_from_step = 0;
  EXPECT_EQ(lossTermsAt(t, 0).ssim_weight, 0.1);
}

}  // namespace
}  // namespace taehv::train
