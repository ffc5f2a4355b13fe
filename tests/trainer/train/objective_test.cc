// The training loss (trainer/train/src/objective.h, private to the trainer): train.frame_diff_weight and
// train.edge_weight.
#include "objective.h"

#include <gtest/gtest.h>

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
  l1.loss = "l1";
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

}  // namespace
}  // namespace taehv::train
