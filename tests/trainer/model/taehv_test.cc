// The C++ TAEHV against the upstream reference vectors (../shared/taehv-reference, produced by upstream taehv.py
// on the CPU in float32): encode, decode and noise decode, in parallel and in streaming mode, to 2e-5.
#include "taehv/model/taehv.h"

#include <ATen/cpu/Utils.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "taehv/model/safetensors.h"
#include "taehv/model/streaming.h"
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
  if (name == "taehv_preview") {
    TAEHVOptions preview = TAEHVOptions::forVariant("taehv");
    preview.decoder_time_upscale = {false, false, false};
    return {name, "taehv.f16.safetensors", preview};
  }
  // Every other file is named after its variant, as the official checkpoints are.
  const std::string weights = name + ".f16.safetensors";
  EXPECT_EQ(variantForCheckpoint(weights), name);
  return {name, weights, TAEHVOptions::forVariant(name)};
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
                         ::testing::Combine(::testing::Values("taehv", "taew2_2", "taehv_preview", "taew2_2_super",
                                                              "taeltx_2", "taeh3"),
                                            ::testing::Values("parallel", "streaming", "channels_last")),
                         [](const auto& p) { return std::get<0>(p.param) + "_" + std::get<1>(p.param); });

// Upstream StreamingTAEHV fed one frame at a time, each latent decoded as soon as it appears (its frames drained
// with decode()), then flush_encoder() (those latents decoded too) and flush_decoder(): stream_latents and
// stream_frames of the reference files.
class StreamingReferenceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { testing::useTestThreads(); }
};

TEST_P(StreamingReferenceTest, MatchesUpstreamStreamingTAEHV) {
  const std::string name = GetParam();
  const std::string dir = referenceDir();
  TAEHV model(TAEHVOptions::forVariant(name));
  loadWeights(*model, dir + "/" + name + ".f16.safetensors");
  model->eval();
  auto io = readSafetensors(dir + "/" + name + ".public.io.safetensors");
  const torch::Tensor& input = io.at("input");
  StreamingTAEHV stream(model);
  std::vector<torch::Tensor> latents, frames;
  std::vector<int64_t> frames_per_latent;
  const auto decode_all = [&](const torch::Tensor& z) {
    latents.push_back(z);
    const std::size_t before = frames.size();
    for (auto x = stream.decode(z); x; x = stream.decode()) {
      frames.push_back(*x);
    }
    frames_per_latent.push_back(static_cast<int64_t>(frames.size() - before));
  };
  for (int64_t t = 0; t < input.size(1); ++t) {
    const auto z = stream.encode(input.slice(1, t, t + 1));
    // A latent appears exactly when timeDownscale() frames have arrived.
    EXPECT_EQ(z.has_value(), (t + 1) % model->timeDownscale() == 0) << t;
    if (z) {
      decode_all(*z);
    }
  }
  for (const auto& z : stream.flushEncoder()) {
    decode_all(z);
  }
  for (auto& x : stream.flushDecoder()) {
    frames.push_back(std::move(x));
  }
  // Each latent yields timeUpscale() frames, the first one framesToTrim() fewer.
  std::vector<int64_t> expected(latents.size(), model->timeUpscale());
  expected[0] -= model->framesToTrim();
  EXPECT_EQ(frames_per_latent, expected);
  const torch::Tensor z = torch::cat(latents, 1);
  ASSERT_EQ(z.sizes(), io.at("stream_latents").sizes());
  EXPECT_LE(maxAbsDiff(z, io.at("stream_latents")), kTolerance) << name << " stream_latents";
  const torch::Tensor x = torch::cat(frames, 1);
  ASSERT_EQ(x.sizes(), io.at("stream_frames").sizes());
  EXPECT_LE(maxAbsDiff(x, io.at("stream_frames")), kTolerance) << name << " stream_frames";
}

INSTANTIATE_TEST_SUITE_P(Variants, StreamingReferenceTest, ::testing::Values("taew2_2_super", "taeltx_2"),
                         [](const auto& p) { return p.param; });

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

  // The 2026 variants (parameter counts from the reference manifest).
  EXPECT_EQ(parameterCount(*TAEHV(TAEHVOptions::forVariant("taew2_2_super"))), 20487996);
  EXPECT_EQ(parameterCount(*TAEHV(TAEHVOptions::forVariant("taeltx_2"))), 11759728);
  EXPECT_EQ(parameterCount(*TAEHV(TAEHVOptions::forVariant("taeh3"))), 11348964);
  TAEHV ltx(TAEHVOptions::forVariant("taeltx2_3"));
  EXPECT_EQ(ltx->named_parameters()["decoder.7.conv.weight"].sizes(), (std::vector<int64_t>{512, 256, 1, 1}));
  EXPECT_EQ(ltx->timeDownscale(), 8);
  EXPECT_EQ(ltx->framesToTrim(), 7);
  TAEHV super15(TAEHVOptions::forVariant("taehv1_5_super"));
  const auto super_names = super15->named_parameters();
  EXPECT_EQ(super_names["decoder.0.weight"].sizes(), (std::vector<int64_t>{512, 32, 1, 1}));
  EXPECT_EQ(super_names["decoder.1.conv.0.weight"].sizes(), (std::vector<int64_t>{1024, 1, 7, 7}));
  EXPECT_EQ(super_names["decoder.4.weight"].sizes(), (std::vector<int64_t>{1024, 512, 3, 3}));  // 256 * 2^2
  EXPECT_EQ(super_names["decoder.21.conv.weight"].sizes(), (std::vector<int64_t>{128, 64, 1, 1}));
  EXPECT_FALSE(super_names.contains("decoder.0.bias"));
  EXPECT_TRUE(super15->isTGrowWeight("decoder.14.conv.weight"));
}

TEST(TAEHVTest, OfficialFileNamesNameTheirVariant) {
  EXPECT_EQ(variantForCheckpoint("taew2_2_super.safetensors"), "taew2_2_super");
  EXPECT_EQ(variantForCheckpoint("/models/taew2_2.safetensors"), "taew2_2");
  EXPECT_EQ(variantForCheckpoint("taehv1_5_super.pth"), "taehv1_5_super");
  EXPECT_EQ(variantForCheckpoint("taehv1_5.safetensors"), "taehv1_5");
  EXPECT_EQ(variantForCheckpoint("taehv.safetensors"), "taehv");
  EXPECT_EQ(variantForCheckpoint("taeltx2_3.safetensors"), "taeltx2_3");
  EXPECT_EQ(variantForCheckpoint("taeltx_2.safetensors"), "taeltx_2");
  EXPECT_EQ(variantForCheckpoint("taeh3.safetensors"), "taeh3");
  EXPECT_EQ(variantForCheckpoint("runs/taeh3/weights.safetensors"), "");  // the folder does not count
  EXPECT_EQ(variantForCheckpoint("taehvx.safetensors"), "");
  EXPECT_EQ(variantForCheckpoint("weights.safetensors"), "");
  EXPECT_NE(unknownVariantMessage("taew22_super").find("did you mean 'taew2_2_super'"), std::string::npos)
      << unknownVariantMessage("taew22_super");
}

TEST(TAEHVTest, FrameCountsOfEveryTimeLayout) {
  testing::useTestThreads();
  torch::manual_seed(4);
  torch::NoGradGuard no_grad;
  // taeh3 (H3 chunks), taecvx (no trim for even latent counts), taeltx_2 (x8 in time): encodedLatents and
  // decodedFrames agree with what encodeVideo and decodeVideo make.
  for (const char* name : {"taeh3", "taecvx", "taeltx_2"}) {
    TAEHV model(TAEHVOptions::forVariant(name));
    model->eval();
    const int64_t p = model->options().patch_size;
    for (const int64_t t : {1, 4, 8, 17, 20, 35}) {
      const torch::Tensor z = model->encodeVideo(torch::rand({1, t, 3, 8 * p, 8 * p}));
      EXPECT_EQ(z.size(1), model->encodedLatents(t)) << name << " T=" << t;
    }
    for (const int64_t l : {1, 2, 3, 6, 7}) {
      const torch::Tensor x = model->decodeVideo(torch::randn({1, l, model->options().latent_channels, 1, 1}));
      EXPECT_EQ(x.size(1), model->decodedFrames(l)) << name << " L=" << l;
    }
  }
  TAEHV h3(TAEHVOptions::forVariant("taeh3"));
  EXPECT_EQ(h3->encodedLatents(20), 7);  // ARCHITECTURE.md's example: 20 -> 34 -> 2 chunks -> 10 -> 7
  EXPECT_EQ(h3->decodedFrames(7), 22);   // 7 -> 28 -> 40 -> 2 x 17 = 34 -> 22
  TAEHV cvx(TAEHVOptions::forVariant("taecvx"));
  EXPECT_EQ(cvx->decodedFrames(4), 16);
  EXPECT_EQ(cvx->decodedFrames(3), 9);
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

TEST(TAEHVTest, StreamingDecodeMatchesDecodeVideoFrameByFrame) {
  testing::useTestThreads();
  torch::manual_seed(2);
  TAEHV model(TAEHVOptions::forVariant("taehv1_5"));
  model->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor z = torch::randn({2, 3, 32, 2, 3});
  const torch::Tensor whole = model->decodeVideo(z);
  StreamingTAEHV stream(model);
  for (int round = 0; round < 2; ++round) {  // the second round after reset() starts a new stream
    std::vector<torch::Tensor> frames;
    std::vector<std::size_t> per_latent;
    for (int64_t t = 0; t < z.size(1); ++t) {
      const std::size_t before = frames.size();
      for (auto x = stream.decode(z.slice(1, t, t + 1)); x; x = stream.decode()) {
        frames.push_back(*x);
      }
      per_latent.push_back(frames.size() - before);
    }
    EXPECT_TRUE(stream.flushDecoder().empty());
    // The first latent yields 4 frames of which 3 are trimmed; each later one yields 4.
    EXPECT_EQ(per_latent, (std::vector<std::size_t>{1, 4, 4}));
    const torch::Tensor streamed = torch::cat(frames, 1);
    ASSERT_EQ(streamed.sizes(), whole.sizes());
    EXPECT_LE(maxAbsDiff(streamed, whole), 1e-5);
    stream.reset();
  }
}

TEST(TAEHVTest, StreamingEncodeAndFlushMatchEncodeVideo) {
  testing::useTestThreads();
  torch::manual_seed(5);
  TAEHV model(TAEHVOptions::forVariant("taew2_2"));
  model->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor x = torch::rand({1, 6, 3, 16, 16});  // 6 frames: flushEncoder pads 2
  StreamingTAEHV stream(model);
  std::vector<torch::Tensor> latents;
  if (auto z = stream.encode(x.slice(1, 0, 5))) {  // several frames at once: one latent per call at most
    latents.push_back(*z);
  }
  EXPECT_EQ(latents.size(), 1u);
  EXPECT_FALSE(stream.encode().has_value());
  EXPECT_FALSE(stream.encode(x.slice(1, 5, 6)).has_value());
  for (auto& z : stream.flushEncoder()) {
    latents.push_back(z);
  }
  ASSERT_EQ(latents.size(), 2u);  // 8 frames: the 6 given and flushEncoder's 2 copies of the last
  EXPECT_LE(maxAbsDiff(torch::cat(latents, 1), model->encodeVideo(x)), 1e-5);
  // flush(): encoder padding and decoder drained in one call gives the rest of decodeVideo's frames.
  stream.reset();
  std::vector<torch::Tensor> frames;
  for (int64_t t = 0; t < x.size(1); ++t) {
    if (auto z = stream.encode(x.slice(1, t, t + 1))) {
      for (auto f = stream.decode(*z); f; f = stream.decode()) {
        frames.push_back(*f);
      }
    }
  }
  for (auto& f : stream.flush()) {
    frames.push_back(f);
  }
  EXPECT_LE(maxAbsDiff(torch::cat(frames, 1), model->decodeVideo(model->encodeVideo(x))), 1e-5);
  // A frame of another size in the same stream is refused, not silently mixed into the memories.
  EXPECT_THROW(stream.encode(torch::rand({1, 1, 3, 32, 16})), c10::Error);
}

TEST(TAEHVTest, StreamingTaecvxKeepsEveryFrameAndTaeh3HasNoStream) {
  testing::useTestThreads();
  torch::manual_seed(7);
  TAEHV cvx(TAEHVOptions::forVariant("taecvx"));
  cvx->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor z = torch::randn({1, 2, 16, 2, 2});
  StreamingTAEHV stream(cvx);
  std::vector<torch::Tensor> frames;
  for (auto f = stream.decode(z); f; f = stream.decode()) {
    frames.push_back(*f);
  }
  // Upstream streaming never trims taecvx; its decode_video keeps every frame of an even latent count.
  ASSERT_EQ(frames.size(), 8u);
  EXPECT_LE(maxAbsDiff(torch::cat(frames, 1), cvx->decodeVideo(z)), 1e-5);
  EXPECT_EQ(cvx->decodeVideo(z.slice(1, 0, 1)).size(1), 1);  // odd: trimmed as the others
  EXPECT_THROW(StreamingTAEHV(TAEHV(TAEHVOptions::forVariant("taeh3"))), std::invalid_argument);
}

// Every variant trains: a few AdamW steps on one small clip lower the reconstruction loss, and every parameter
// gets a finite gradient.
TEST(TAEHVTest, EveryVariantTrains) {
  testing::useTestThreads();
  for (const auto& spec : variantSpecs()) {
    torch::manual_seed(8);
    TAEHV model(TAEHVOptions::forVariant(spec.name));
    model->train();
    torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
    const torch::Tensor x = torch::rand({1, spec.clipFrameMultiple(), 3, spec.sizeMultiple(), spec.sizeMultiple()});
    std::vector<double> losses;
    for (int step = 0; step < 3; ++step) {
      optimizer.zero_grad();
      const torch::Tensor y = model->decodeVideo(model->encodeVideo(x));
      ASSERT_GE(y.size(1), 1) << spec.name;
      ASSERT_LE(y.size(1), x.size(1)) << spec.name;
      const torch::Tensor loss = torch::mse_loss(y, x.slice(1, 0, y.size(1)));
      loss.backward();
      if (step == 0) {
        for (const auto& item : model->named_parameters()) {
          ASSERT_TRUE(item.value().grad().defined()) << spec.name << " " << item.key();
          EXPECT_TRUE(torch::isfinite(item.value().grad()).all().item<bool>()) << spec.name << " " << item.key();
        }
      }
      optimizer.step();
      losses.push_back(loss.item<double>());
    }
    EXPECT_LT(losses.back(), losses.front()) << spec.name;
  }
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

// The parallel mode's own backward of moving frames in time (each MemBlock's past frames, the decoder's trimmed
// first frames: autograd functions in layers.cc) against autograd through the streaming mode, which runs the same
// layers one frame at a time with none of them: in double, 2 clips of 6 frames, both memory formats.
TEST(TAEHVTest, ParallelGradientsMatchTheStreamingModesGradients) {
  testing::useTestThreads();
  torch::manual_seed(9);
  const ReferenceCase c = referenceCase("taehv");
  TAEHV model(c.options);
  loadWeights(*model, referenceDir() + "/" + c.weights);  // trained weights: outputs inside the final clamp's [0, 1]
  model->to(torch::kFloat64);
  model->train();
  const torch::Tensor x = torch::rand({2, 6, 3, 16, 16}, torch::kFloat64);
  auto grads = [&](bool streaming, bool channels_last) {
    model->setChannelsLast(channels_last);
    model->zero_grad();
    const torch::Tensor y = model->decodeVideo(model->encodeVideo(x, streaming), streaming);
    (y * torch::linspace(0, 1, y.numel(), torch::kFloat64).view(y.sizes())).sum().backward();
    std::vector<torch::Tensor> out;
    for (const auto& p : model->parameters()) out.push_back(p.grad().clone());
    return out;
  };
  const std::vector<torch::Tensor> reference = grads(true, false);
  double largest = 0;
  for (const auto& g : reference) largest = std::max(largest, g.abs().max().item<double>());
  ASSERT_GT(largest, 1e-3) << "the loss reaches the parameters";
  for (const bool channels_last : {false, true}) {
    const std::vector<torch::Tensor> parallel = grads(false, channels_last);
    ASSERT_EQ(parallel.size(), reference.size());
    for (std::size_t i = 0; i < parallel.size(); ++i) {
      const double scale = reference[i].abs().max().item<double>() + 1e-30;
      EXPECT_LE(maxAbsDiff(parallel[i], reference[i]) / scale, 1e-9) << "parameter " << i << " channels_last "
                                                                        << channels_last;
    }
  }
}

// setCpuWinograd: the 3x3 convolutions of >= 16 channels on frames of >= 16x16 run as Winograd transforms (NNPACK),
// forward and input gradient, and their weight gradients as F(3x3, 4x4) transforms; the output, the input's gradient
// and every parameter's gradient match oneDNN's direct convolutions within fp32 rounding (a wrong kernel flip or
// channel swap in the input gradient is off by O(1)), and differ from them at all (so the transforms ran). On 8x8
// frames only the weight gradients are Winograd's: the output and the input's gradient bitwise the direct ones.
TEST(TAEHVTest, WinogradConvolutionsMatchTheDirectOnes) {
  if (!cpuWinogradAvailable()) GTEST_SKIP() << "NNPACK cannot run here (libtorch without it, or no AVX2/FMA)";
  testing::useTestThreads();
  torch::manual_seed(5);
  const ReferenceCase c = referenceCase("taehv");
  TAEHV model(c.options);
  loadWeights(*model, referenceDir() + "/" + c.weights);
  model->train();
  struct Run {
    torch::Tensor y, x_grad;
    std::vector<torch::Tensor> grads;
  };
  auto run = [&](const torch::Tensor& x0, bool winograd) {
    setCpuWinograd(winograd);
    model->zero_grad();
    Run r;
    const torch::Tensor x = x0.clone().requires_grad_(true);
    r.y = model->decodeVideo(model->encodeVideo(x));
    (r.y * torch::linspace(0, 1, r.y.numel()).view(r.y.sizes())).sum().backward();
    r.x_grad = x.grad();
    for (const auto& p : model->parameters()) r.grads.push_back(p.grad().clone());
    setCpuWinograd(false);
    return r;
  };
  const torch::Tensor x = torch::rand({2, 4, 3, 32, 32});
  const Run direct = run(x, false);
  const Run winograd = run(x, true);
  EXPECT_FALSE(torch::equal(direct.y, winograd.y)) << "no convolution ran as Winograd transforms";
  EXPECT_LE(maxAbsDiff(winograd.y, direct.y) / direct.y.abs().max().item<double>(), 1e-4);
  EXPECT_LE(maxAbsDiff(winograd.x_grad, direct.x_grad) / direct.x_grad.abs().max().item<double>(), 1e-3);
  ASSERT_EQ(winograd.grads.size(), direct.grads.size());
  for (std::size_t i = 0; i < direct.grads.size(); ++i) {
    const double scale = direct.grads[i].abs().max().item<double>() + 1e-30;
    EXPECT_LE(maxAbsDiff(winograd.grads[i], direct.grads[i]) / scale, 1e-3) << "parameter " << i;
  }
  const torch::Tensor small = torch::rand({1, 4, 3, 8, 8});
  const Run small_direct = run(small, false);
  const Run small_winograd = run(small, true);
  EXPECT_TRUE(torch::equal(small_direct.y, small_winograd.y));
  EXPECT_TRUE(torch::equal(small_direct.x_grad, small_winograd.x_grad));
  int64_t weight_grads_differing = 0;
  for (std::size_t i = 0; i < small_direct.grads.size(); ++i) {
    const double scale = small_direct.grads[i].abs().max().item<double>() + 1e-30;
    EXPECT_LE(maxAbsDiff(small_winograd.grads[i], small_direct.grads[i]) / scale, 1e-3) << "parameter " << i;
    weight_grads_differing += torch::equal(small_winograd.grads[i], small_direct.grads[i]) ? 0 : 1;
  }
  EXPECT_GT(weight_grads_differing, 0) << "no weight gradient ran as Winograd transforms on 8x8 frames";
}

// cpuWinogradAuto: Winograd where NNPACK runs and the CPU has no AVX-512, as /proc/cpuinfo's flags say (libtorch's
// capability map, which the choice reads, names the flag avx512_f).
TEST(TAEHVTest, WinogradAutoIsOnWhereTheCpuHasNoAvx512) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  if (!cpuinfo) GTEST_SKIP() << "no /proc/cpuinfo";
  std::string line;
  bool avx512 = false;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) == 0) {
      avx512 = (line + " ").find(" avx512f ") != std::string::npos;
      break;
    }
  }
  EXPECT_EQ(at::cpu::get_cpu_capabilities().count("avx512_f"), 1u);
  EXPECT_EQ(cpuWinogradAuto(), cpuWinogradAvailable() && !avx512) << "avx512f in /proc/cpuinfo: " << avx512;
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
