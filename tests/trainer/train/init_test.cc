// The random init for training (trainer/train/src/run_setup.h, private to the trainer): model.init_output_scale.
#include <gtest/gtest.h>

#include "run_setup.h"

namespace taehv::train {
namespace {

// The key scales the final decoder conv's weights and nothing else: the same seed draws the same numbers, the
// output bias stays at 0.5 (mid-grey), and every other tensor is equal to the bit.
TEST(Init, OutputScaleScalesOnlyTheFinalDecoderConv) {
  Config small, full;
  full.model.init_output_scale = 1;
  ASSERT_EQ(small.model.init_output_scale, 0.1);  // the default: the init the defaults have always had
  TAEHV a = makeModel(small, torch::kCPU);
  TAEHV b = makeModel(full, torch::kCPU);
  const auto pa = a->named_parameters(), pb = b->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  std::string last;
  for (const auto& item : pa) {
    if (item.key().starts_with("decoder.") && item.key().ends_with(".weight")) last = item.key();
  }
  ASSERT_FALSE(last.empty());
  int scaled = 0;
  for (const auto& item : pa) {
    const torch::Tensor& x = item.value();
    const torch::Tensor& y = pb[item.key()];
    if (item.key() == last) {
      EXPECT_TRUE(torch::allclose(y, x * 10, 1e-5, 0)) << item.key();
      EXPECT_GT(y.abs().max().item<double>(), 0.05) << "the scaled weights are not all near 0";
      ++scaled;
    } else {
      EXPECT_TRUE(torch::equal(x, y)) << item.key();
    }
  }
  EXPECT_EQ(scaled, 1);
  const std::string last_bias = last.substr(0, last.size() - 7) + ".bias";
  EXPECT_TRUE(torch::equal(pb[last_bias], torch::full({3}, 0.5)));
}

}  // namespace
}  // namespace taehv::train
