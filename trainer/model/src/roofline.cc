#include "taehv/model/roofline.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <stdexcept>
#include <tuple>
#include <variant>

namespace taehv {
namespace {

/// The activations between two layers of a block list: rows (clips x frames) of height x width.
struct Frames {
  int64_t rows = 0, height = 0, width = 0;
};

/// Records `conv` applied to `in`; returns its output's frames.
Frames addConv(const torch::nn::Conv2dImpl& conv, const Frames& in, std::vector<ConvShape>& convs) {
  const auto& o = conv.options;
  const auto* padding = std::get_if<torch::ExpandingArray<2>>(&o.padding());
  TORCH_CHECK(padding != nullptr, "countStepFlops: a convolution with 'valid'/'same' padding");
  ConvShape s;
  s.rows = in.rows;
  s.in_channels = o.in_channels();
  s.out_channels = o.out_channels();
  s.height = in.height;
  s.width = in.width;
  s.kernel = (*o.kernel_size())[0];
  s.stride = (*o.stride())[0];
  s.padding = (**padding)[0];
  s.groups = o.groups();
  convs.push_back(s);
  return {in.rows, s.outHeight(), s.outWidth()};
}

/// The convolutions of a block's Sequential, in order, on frames of an unchanged size (MemBlock, SuperMemBlock).
void addBlockConvs(const torch::nn::Sequential& block, const Frames& in, std::vector<ConvShape>& convs) {
  Frames f = in;
  for (const auto& child : block->children()) {
    if (const auto* conv = child->as<torch::nn::Conv2d>()) f = addConv(*conv, f, convs);
  }
}

/// Walks `layers` as the reference runs them over all frames at once; returns the output frames.
Frames walkLayers(const std::vector<TAEHVLayer>& layers, Frames f, std::vector<ConvShape>& convs) {
  using Kind = TAEHVLayer::Kind;
  for (const TAEHVLayer& layer : layers) {
    switch (layer.kind) {
      case Kind::kConv:
        f = addConv(*layer.conv, f, convs);
        break;
      case Kind::kMemBlock:
        addBlockConvs(layer.memblock->conv, f, convs);
        break;
      case Kind::kSuperMemBlock:
        addBlockConvs(layer.supermemblock->conv, f, convs);
        break;
      case Kind::kTPool:
        f.rows /= layer.tpool->stride();
        addConv(*layer.tpool->conv, f, convs);
        break;
      case Kind::kTGrow:
        addConv(*layer.tgrow->conv, f, convs);
        f.rows *= layer.tgrow->stride();
        break;
      case Kind::kUpsample:
        f.height *= layer.upsample->scale();
        f.width *= layer.upsample->scale();
        break;
      case Kind::kPixelShuffle:
        f.height *= layer.pixelshuffle->options.upscale_factor();
        f.width *= layer.pixelshuffle->options.upscale_factor();
        break;
      case Kind::kReLU:
      case Kind::kClamp:
        break;
    }
  }
  return f;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

StepFlops countStepFlops(const TAEHVImpl& model, int64_t batch, int64_t frames, int64_t size) {
  if (model.options().time_layout == TimeLayout::kH3) {
    throw std::invalid_argument("countStepFlops: taeh3's chunked time layout is not counted");
  }
  const int64_t p = model.options().patch_size;
  const int64_t padded = model.encodedLatents(frames) * model.timeDownscale();
  StepFlops step;
  walkLayers(model.encoderLayers(), {batch * padded, size / p, size / p}, step.convs);
  const std::size_t encoder_convs = step.convs.size();
  const int64_t latent_size = step.convs.empty() ? 0 : step.convs.back().outHeight();
  walkLayers(model.decoderLayers(), {batch * model.encodedLatents(frames), latent_size, latent_size}, step.convs);
  TORCH_CHECK(encoder_convs > 0, "countStepFlops: an encoder without convolutions");
  for (const ConvShape& c : step.convs) step.forward += c.forwardFlops();
  step.backward = 2 * step.forward - step.convs.front().forwardFlops();  // no input gradient for the data
  return step;
}

std::vector<ConvShape> heaviestConv3x3Shapes(const StepFlops& step, std::size_t count) {
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>, std::pair<int64_t, ConvShape>> by_shape;
  for (const ConvShape& c : step.convs) {
    if (c.kernel != 3 || c.stride != 1 || c.groups != 1) continue;
    auto& entry = by_shape[{c.rows, c.in_channels, c.out_channels, c.height, c.width}];
    entry.first += c.forwardFlops();
    entry.second = c;
  }
  std::vector<std::pair<int64_t, ConvShape>> ranked;
  for (const auto& [key, entry] : by_shape) ranked.push_back(entry);
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<ConvShape> out;
  for (std::size_t i = 0; i < ranked.size() && i < count; ++i) out.push_back(ranked[i].second);
  return out;
}

ConvPeak measureConvPeak(const std::vector<ConvShape>& shapes, torch::ScalarType dtype, torch::Device device,
                         double seconds) {
  TORCH_CHECK(!shapes.empty(), "measureConvPeak: no shape");
  torch::NoGradGuard no_grad;
  const auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize();
  };
  ConvPeak best;
  for (const ConvShape& s : shapes) {
    for (const bool channels_last : {false, true}) {
      const auto format = channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
      const auto options = torch::TensorOptions().dtype(dtype).device(device);
      const torch::Tensor x =
          torch::randn({s.rows, s.in_channels, s.height, s.width}, options).contiguous(format);
      const torch::Tensor w =
          (torch::randn({s.out_channels, s.in_channels / s.groups, s.kernel, s.kernel}, options) * 0.05)
              .contiguous(format);
      const torch::Tensor b = torch::zeros({s.out_channels}, options);
      const auto conv = [&] { return torch::conv2d(x, w, b, s.stride, s.padding, 1, s.groups); };
      conv();  // primitive creation and first-touch of the output: not timed
      sync();
      int64_t calls = 0;
      const auto start = std::chrono::steady_clock::now();
      double elapsed = 0;
      do {
        conv();
        sync();
        ++calls;
        elapsed = secondsSince(start);
      } while (calls < 2 || elapsed < seconds);
      const double rate = static_cast<double>(calls * s.forwardFlops()) / elapsed;
      if (rate > best.flops_per_s) best = {rate, s, channels_last};
    }
  }
  return best;
}

}  // namespace taehv
