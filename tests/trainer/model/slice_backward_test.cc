// SliceBackward: the batch's gradients computed as slices on their own threads equal those of one backward
// pass over the whole batch (float rounding apart), are bitwise repeatable, and a slice's error reaches the caller.
#include "taehv/model/slice_backward.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "taehv/model/taehv.h"
#include "test_util.h"

namespace taehv {
namespace {

TEST(SliceBackwardTest, PlanSplitsThreadsBetweenSlices) {
  EXPECT_EQ(SliceBackward::plan(0, 2, 2).slices, 2);  // auto: min(threads, batch)
  EXPECT_EQ(SliceBackward::plan(0, 2, 2).intra_threads, 1);
  EXPECT_EQ(SliceBackward::plan(0, 4, 2).slices, 2);
  EXPECT_EQ(SliceBackward::plan(0, 4, 2).intra_threads, 2);
  EXPECT_EQ(SliceBackward::plan(0, 2, 1).slices, 1);  // one sample: nothing to slice
  EXPECT_EQ(SliceBackward::plan(0, 2, 1).intra_threads, 2);
  EXPECT_EQ(SliceBackward::plan(1, 8, 8).slices, 1);  // 1 = one pass
  EXPECT_EQ(SliceBackward::plan(3, 2, 8).slices, 3);  // explicit wins, at least one intra-op thread each
  EXPECT_EQ(SliceBackward::plan(3, 2, 8).intra_threads, 1);
}

// decode(encode(x)) MSE of a batch of 3 (slices of 2 and 1 samples) against one backward over all 3.
TEST(SliceBackwardTest, GradientsEqualOnePassAndRepeatBitwise) {
  testing::useTestThreads();
  torch::manual_seed(11);
  TAEHV model;
  model->train();
  const torch::Tensor x = torch::rand({3, 4, 3, 16, 16});
  const std::vector<torch::Tensor> params = model->parameters();
  const auto lossOf = [&](const torch::Tensor& frames) {
    torch::Tensor y = model->decodeVideo(model->encodeVideo(frames));
    return torch::mse_loss(y, frames.slice(1, 0, y.size(1)));
  };

  for (auto& p : params) p.mutable_grad().reset();
  const torch::Tensor whole = lossOf(x);
  whole.backward();
  std::vector<torch::Tensor> expected;
  for (const auto& p : params) expected.push_back(p.grad().clone());

  SliceBackward slicer(SliceBackward::plan(2, 2, 3));
  ASSERT_EQ(slicer.slices(), 2);
  std::vector<std::vector<torch::Tensor>> runs;
  std::vector<torch::Tensor> losses;
  for (int r = 0; r < 2; ++r) {
    runs.push_back(slicer.run(
        3, params,
        [&](int, int64_t begin, int64_t end) { return lossOf(x.slice(0, begin, end)) * ((end - begin) / 3.0); },
        &losses));
  }
  ASSERT_EQ(losses.size(), 2u);
  EXPECT_NEAR((losses[0] + losses[1]).item<double>(), whole.item<double>(), 1e-6);
  double largest = 0;
  for (size_t k = 0; k < params.size(); ++k) {
    ASSERT_TRUE(runs[0][k].defined()) << k;
    const double scale = expected[k].abs().max().item<double>();
    largest = std::max(largest, scale);
    EXPECT_LE(testing::maxAbsDiff(runs[0][k], expected[k]), 1e-5 * std::max(1.0, scale)) << "parameter " << k;
    EXPECT_TRUE(torch::equal(runs[0][k], runs[1][k])) << "parameter " << k << " differs between two runs";
  }
  EXPECT_GT(largest, 1e-4) << "the gradients are all but zero; the comparison would be meaningless";
}

TEST(SliceBackwardTest, ErrorInASliceIsRethrownAndTheSlicerStaysUsable) {
  testing::useTestThreads();
  const torch::Tensor w = torch::ones({4}).requires_grad_(true);
  SliceBackward slicer(SliceBackward::plan(2, 2, 4));
  const auto sum = [&](int, int64_t begin, int64_t end) { return (w.slice(0, begin, end) * 2).sum(); };
  EXPECT_THROW(slicer.run(4, {w},
                          [&](int slice, int64_t begin, int64_t end) {
                            if (slice == 1) throw std::runtime_error("slice failed");
                            return sum(slice, begin, end);
                          }),
               std::runtime_error);
  const auto grads = slicer.run(4, {w}, sum);
  ASSERT_EQ(grads.size(), 1u);
  EXPECT_TRUE(torch::equal(grads[0], torch::full({4}, 2.0f)));
}

}  // namespace
}  // namespace taehv
