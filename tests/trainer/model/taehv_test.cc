// The C++ TAEHV against the upstream reference vectors (../shared/taehv-reference, produced by upstream taehv.py
// on the CPU in float32): encode, decode and noise decode, in parallel and in streaming mode, to 2e-5.
#include "taehv/model/taehv.h"

#include <gtest/gtest.h>

#include "taehv/model/safetensors.h"
#include "test_util.h"

namespace taehv {
namespace {

using testing::maxAbsDiff;
using testing::referenceDir;

constexpr double kTolerance = 2e-5;  // the bound; outputs have std 0.03 .. 1.0

// Every test of this binary runs with one intra-op thread (see useTestThreads).
class OneThreadEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { testing::useTestThreads(); }
};
::testing::Environment* const kOneThread = ::testing::AddGlobalTestEnvironment(new OneThreadEnvironment);

struct ReferenceCase {
  std::string name;     // file prefix in taehv-reference
  std::string weights;  // weights file
  TAEHVOptions options;
};

ReferenceCase referenceCase(const std::string& name) {
  if (name == "taehv") {
    return {name, "taehv.f16.safetensors", TAEHVOptions::forVariant("taehv")};
  }
  if (name == "taew2_2") {
    return {name, "taew2_2.f16.safetensors", TAEHVOptions::forVariant("taew2_2")};
  }
  TAEHVOptions preview = TAEHVOptions::forVariant("taehv");
  preview.decoder_time_upscale = {false, false, false};
  return {name, "taehv.f16.safetensors", preview};
}

class ReferenceTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override { testing::useTestThreads(); }
};

TEST_P(ReferenceTest, MatchesUpstream) {
  const auto& [name, mode] = GetParam();
  const bool streaming = mode == "streaming";
  const ReferenceCase c = referenceCase(name);
  const std::string dir = referenceDir();
  TAEHV model(c.options);
  model->setChannelsLast(mode == "channels_last");
  loadWeights(*model, dir + "/" + c.weights);
  model->eval();
  auto io = readSafetensors(dir + "/" + name + ".public.io.safetensors");
  torch::NoGradGuard no_grad;

  const torch::Tensor latents = model->encodeVideo(io.at("input"), streaming);
  ASSERT_EQ(latents.sizes(), io.at("latents").sizes());
  EXPECT_LE(maxAbsDiff(latents, io.at("latents")), kTolerance) << name << " latents";

  const torch::Tensor frames = model->decodeVideo(io.at("latents"), streaming);
  ASSERT_EQ(frames.sizes(), io.at("frames").sizes());
  EXPECT_LE(maxAbsDiff(frames, io.at("frames")), kTolerance) << name << " frames";

  const torch::Tensor noise_frames = model->decodeVideo(io.at("noise_latents"), streaming);
  ASSERT_EQ(noise_frames.sizes(), io.at("noise_frames").sizes());
  EXPECT_LE(maxAbsDiff(noise_frames, io.at("noise_frames")), kTolerance) << name << " noise_frames";
}

INSTANTIATE_TEST_SUITE_P(Variants, ReferenceTest,
                         ::testing::Combine(::testing::Values("taehv", "taew2_2", "taehv_preview"),
                                            ::testing::Values("parallel", "streaming", "channels_last")),
                         [](const auto& p) { return std::get<0>(p.param) + "_" + std::get<1>(p.param); });

int64_t parameterCount(TAEHVImpl& model) {
  int64_t n = 0;
  for (const auto& p : model.parameters()) {
    n += p.numel();
  }
  return n;
}

TEST(TAEHVTest, ParameterCountsAndNamesMatchUpstream) {
  TAEHV model(TAEHVOptions::forVariant("taehv"));
  EXPECT_EQ(parameterCount(*model), 11315539);
  EXPECT_EQ(model->parameters().size(), 128u);
  const auto names = model->named_parameters();
  for (const char* key : {"encoder.0.weight", "encoder.0.bias", "encoder.2.conv.weight", "encoder.3.weight",
                          "encoder.4.conv.0.weight", "encoder.4.conv.2.bias", "encoder.16.conv.4.weight",
                          "encoder.17.bias", "decoder.1.weight", "decoder.3.conv.0.weight", "decoder.7.conv.weight",
                          "decoder.13.conv.weight", "decoder.19.conv.weight", "decoder.20.weight",
                          "decoder.22.bias"}) {
    EXPECT_TRUE(names.contains(key)) << key;
  }
  EXPECT_FALSE(names.contains("decoder.20.bias"));  // conv(64, 64) before the last ReLU has no bias
  EXPECT_EQ(names["decoder.19.conv.weight"].sizes(), (std::vector<int64_t>{128, 64, 1, 1}));
  EXPECT_EQ(names["decoder.4.conv.0.weight"].sizes(), (std::vector<int64_t>{256, 512, 3, 3}));
  EXPECT_EQ(model->timeDownscale(), 4);
  EXPECT_EQ(model->timeUpscale(), 4);
  EXPECT_EQ(model->framesToTrim(), 3);
  EXPECT_TRUE(model->isTGrowWeight("decoder.13.conv.weight"));
  EXPECT_FALSE(model->isTGrowWeight("encoder.2.conv.weight"));

  EXPECT_EQ(parameterCount(*TAEHV(TAEHVOptions::forVariant("taew2_2"))), 11418108);
  TAEHVOptions preview;
  preview.decoder_time_upscale = {false, false, false};
  TAEHV preview_model(preview);
  EXPECT_EQ(parameterCount(*preview_model), 11295059);
  EXPECT_EQ(preview_model->framesToTrim(), 0);
  // taehv1_5: patch 2, 32 latent channels.
  TAEHV hv15(TAEHVOptions::forVariant("taehv1_5"));
  EXPECT_EQ(hv15->named_parameters()["encoder.0.weight"].sizes(), (std::vector<int64_t>{64, 12, 3, 3}));
  EXPECT_EQ(hv15->named_parameters()["encoder.17.weight"].size(0), 32);
  EXPECT_THROW(TAEHVOptions::forVariant("taehv2"), std::invalid_argument);
}

TEST(TAEHVTest, ShapesPaddingTrimAndSpaceSwitches) {
  testing::useTestThreads();
  torch::manual_seed(1);
  TAEHVOptions o;
  o.decoder_space_upscale = {true, false, true};
  TAEHV model(o);
  model->eval();
  torch::NoGradGuard no_grad;
  // T = 5 pads to 8 with the last frame: same latents as an explicitly padded clip.
  const torch::Tensor x = torch::rand({1, 5, 3, 16, 24});
  const torch::Tensor padded = torch::cat({x, x.slice(1, 4, 5).expand({1, 3, 3, 16, 24})}, 1);
  const torch::Tensor z = model->encodeVideo(x);
  EXPECT_EQ(z.sizes(), (std::vector<int64_t>{1, 2, 16, 2, 3}));
  EXPECT_EQ(maxAbsDiff(z, model->encodeVideo(padded)), 0.0);
  const torch::Tensor y = model->decodeVideo(z);
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{1, 5, 3, 8, 12}));  // 4L - 3 frames, x4 space instead of x8
  EXPECT_GE(y.min().item<double>(), 0.0);
  EXPECT_LE(y.max().item<double>(), 1.0);
}

TEST(TAEHVTest, StreamingDecoderMatchesDecodeVideoFrameByFrame) {
  testing::useTestThreads();
  torch::manual_seed(2);
  TAEHV model(TAEHVOptions::forVariant("taehv1_5"));
  model->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor z = torch::randn({2, 3, 32, 2, 3});
  const torch::Tensor whole = model->decodeVideo(z);
  StreamingDecoder stream(model);
  std::vector<torch::Tensor> frames;
  std::vector<std::size_t> per_push;
  for (int64_t t = 0; t < z.size(1); ++t) {
    auto out = stream.push(z.select(1, t));
    per_push.push_back(out.size());
    frames.insert(frames.end(), out.begin(), out.end());
  }
  // The first latent yields 4 frames of which 3 are trimmed; each later one yields 4.
  EXPECT_EQ(per_push, (std::vector<std::size_t>{1, 4, 4}));
  const torch::Tensor streamed = torch::stack(frames, 1);
  ASSERT_EQ(streamed.sizes(), whole.sizes());
  EXPECT_LE(maxAbsDiff(streamed, whole), 1e-5);
}

TEST(TAEHVTest, ChannelsLastTrainingMatchesContiguous) {
  testing::useTestThreads();
  torch::manual_seed(6);
  TAEHV model(TAEHVOptions::forVariant("taehv1_5"));  // patch 2: pixel_unshuffle/shuffle around it
  model->train();
  const torch::Tensor x = torch::rand({2, 5, 3, 16, 16});
  std::vector<torch::Tensor> grads[2];
  torch::Tensor outputs[2];
  for (int cl = 0; cl < 2; ++cl) {
    model->setChannelsLast(cl == 1);
    model->zero_grad();
    outputs[cl] = model->decodeVideo(model->encodeVideo(x));
    torch::mse_loss(outputs[cl], x.slice(1, 0, outputs[cl].size(1))).backward();
    for (const auto& p : model->parameters()) {
      grads[cl].push_back(p.grad().clone());
    }
  }
  EXPECT_TRUE(outputs[1].is_contiguous());
  EXPECT_LE(maxAbsDiff(outputs[0], outputs[1]), 1e-5);
  for (std::size_t i = 0; i < grads[0].size(); ++i) {
    const double scale = grads[0][i].abs().max().item<double>() + 1e-12;
    EXPECT_LE(maxAbsDiff(grads[0][i], grads[1][i]) / scale, 1e-3) << i;
  }
}

TEST(TAEHVTest, TrainingGradientsFlowToEveryParameter) {
  testing::useTestThreads();
  torch::manual_seed(3);
  TAEHV model;
  model->train();
  const torch::Tensor x = torch::rand({1, 4, 3, 16, 16});
  const torch::Tensor y = model->decodeVideo(model->encodeVideo(x));
  ASSERT_EQ(y.size(1), 1);
  torch::mse_loss(y, x.slice(1, 0, 1)).backward();
  for (const auto& item : model->named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    EXPECT_TRUE(torch::isfinite(item.value().grad()).all().item<bool>()) << item.key();
  }
}

}  // namespace
}  // namespace taehv
