#include "layers.h"

#include <ATen/autocast_mode.h>

#include <array>
#include <atomic>
#include <utility>
#include <variant>

#include "taehv/model/cpu_tuning.h"
#include "winograd_grad.h"

namespace taehv {
namespace detail {
namespace nn = torch::nn;
namespace {

std::atomic<int64_t> g_conv_flops{0};

// An fp32 weight as the bf16 channels_last copy a convolution of channels_last activations under CPU autocast uses:
// cast, then transposed in bf16; its gradient transposed in bf16, then cast, straight into the parameter's NCHW
// layout. Left to autocast, autograd casts the NHWC bf16 weight gradient to NHWC fp32 and then copies it into the
// parameter's NCHW gradient (a transposing copy at twice the bytes): bench, bf16 4x12x32x32, 1 thread: all copies
// 27.6 -> 21.3 ms a step. One fused pass each way (cast and transpose in one copy_) was slower: 29.5 ms.
struct Bf16ChannelsLastWeight : torch::autograd::Function<Bf16ChannelsLastWeight> {
  static torch::Tensor forward(torch::autograd::AutogradContext*, const torch::Tensor& w) {
    return w.to(torch::kBFloat16).contiguous(at::MemoryFormat::ChannelsLast);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grad) {
    return {grad[0].contiguous().to(torch::kFloat32)};
  }
};

bool isChannelsLast(const torch::Tensor& x) {
  return x.dim() == 4 && x.size(1) > 1 && !x.is_contiguous() && x.is_contiguous(at::MemoryFormat::ChannelsLast);
}

// The case above: channels_last activations on the CPU under bf16 autocast, an fp32 weight, numeric padding.
const torch::ExpandingArray<2>* castsWeight(const nn::Conv2dImpl& conv, const torch::Tensor& x) {
  if (!x.device().is_cpu() || !at::autocast::is_autocast_enabled(at::kCPU) ||
      at::autocast::get_autocast_dtype(at::kCPU) != at::kBFloat16 || conv.weight.scalar_type() != torch::kFloat32 ||
      !isChannelsLast(x)) {
    return nullptr;
  }
  return std::get_if<torch::ExpandingArray<2>>(&conv.options.padding());
}

std::atomic<bool> g_cpu_winograd{false};

// A 3x3 stride-1 convolution (padding 1) with Winograd transforms. The forward as NNPACK's (built into libtorch; its
// algorithm "auto" picks F(6x6, 3x3) for a 3x3 kernel: ~5x fewer multiplies than the direct one, 1e-5 relative
// rounding in fp32) where `nnpack`, else oneDNN's direct kernels; the input gradient the same way (it is the same
// kind of convolution of the output gradient with the kernel flipped and its channels swapped); the weight gradient
// as F(3x3, 4x4) transforms (winograd_grad.h) where the frame's sides are multiples of 4, else oneDNN's.
struct WinogradConv3x3 : torch::autograd::Function<WinogradConv3x3> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               const std::optional<torch::Tensor>& b, bool nnpack) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["bias"] = b.has_value();
    ctx->saved_data["nnpack"] = nnpack;
    return nnpack ? at::_nnpack_spatial_convolution(x, w, b, {1, 1}, {1, 1}) : at::conv2d(x, w, b, 1, 1);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& w = saved[1];
    const bool bias = ctx->saved_data["bias"].toBool();
    const torch::Tensor gy = grad[0].contiguous();
    auto direct = [&](bool input, bool weight) {
      return at::convolution_backward(gy, x, w, std::nullopt, /*stride=*/{1, 1}, /*padding=*/{1, 1},
                                      /*dilation=*/{1, 1}, /*transposed=*/false, /*output_padding=*/{0, 0},
                                      /*groups=*/1, {input, weight, false});
    };
    torch::Tensor gx, gw, gb;
    if (ctx->needs_input_grad(0)) {
      gx = ctx->saved_data["nnpack"].toBool()
               ? at::_nnpack_spatial_convolution(gy, w.flip({2, 3}).transpose(0, 1).contiguous(), std::nullopt,
                                                 {1, 1}, {1, 1})
               : std::get<0>(direct(true, false));
    }
    if (ctx->needs_input_grad(1)) {
      gw = winogradWeightGradFits(x, gy) ? winogradWeightGrad(x, gy) : std::get<1>(direct(false, true));
    }
    if (bias && ctx->needs_input_grad(2)) gb = gy.sum({0, 2, 3});
    return {gx, gw, gb, torch::Tensor()};
  }
};

// Where WinogradConv3x3 runs when train.cpu_conv is winograd: fp32 on the CPU outside autocast, NCHW, 3x3, stride
// 1, padding 1, at least 16 channels in and out, one intra-op thread (the slices' case; NNPACK's thread pool is sized
// once, by its first caller). NNPACK's forward and input gradient on frames of at least 16x16 only: on the Zen 3
// host (AVX2) they were 1.26-1.47x oneDNN's direct kernels there and 0.45-0.9x below 16x16 or with 3 channels; the
// F(3x3, 4x4) weight gradient, on frames whose sides are multiples of 4, 1.2-3.8x oneDNN's on every such shape of
// the step and 0.15-0.22x with 3 input channels (bench/model/RESULTS.md). Smaller frames without a whole number of
// tiles keep libtorch's own convolution (nothing of WinogradConv3x3 would run).
enum class WinogradRoute { kNone, kWeightGradient, kAll };

WinogradRoute winogradRoute(const nn::Conv2dImpl& conv, const torch::Tensor& x) {
  const auto& o = conv.options;
  const auto* padding = std::get_if<torch::ExpandingArray<2>>(&o.padding());
  const bool fits =
      g_cpu_winograd.load(std::memory_order_relaxed) && x.device().is_cpu() && x.scalar_type() == torch::kFloat32 &&
      conv.weight.scalar_type() == torch::kFloat32 && !at::autocast::is_autocast_enabled(at::kCPU) &&
      x.dim() == 4 && x.is_contiguous() && (*o.kernel_size())[0] == 3 && (*o.kernel_size())[1] == 3 &&
      (*o.stride())[0] == 1 && (*o.stride())[1] == 1 && (*o.dilation())[0] == 1 && (*o.dilation())[1] == 1 &&
      o.groups() == 1 && padding != nullptr && (**padding)[0] == 1 && (**padding)[1] == 1 &&
      o.in_channels() >= 16 && o.out_channels() >= 16 && at::get_num_threads() == 1;
  if (!fits) return WinogradRoute::kNone;
  if (x.size(2) >= 16 && x.size(3) >= 16) return WinogradRoute::kAll;
  const bool whole_tiles = x.size(2) % 4 == 0 && x.size(3) % 4 == 0;  // winogradWeightGradFits
  // Without a backward (no grad mode) nothing of it would run either.
  return torch::GradMode::is_enabled() && whole_tiles ? WinogradRoute::kWeightGradient : WinogradRoute::kNone;
}

}  // namespace

// Every convolution of the model goes through here so that convFlops() can count its forward work.
torch::Tensor countedConv(nn::Conv2dImpl& conv, const torch::Tensor& x) {
  torch::Tensor y;
  if (const auto* padding = castsWeight(conv, x)) {
    const auto& o = conv.options;
    y = torch::conv2d(x, Bf16ChannelsLastWeight::apply(conv.weight), conv.bias, *o.stride(), **padding,
                      *o.dilation(), o.groups());
  } else if (const WinogradRoute route = winogradRoute(conv, x); route != WinogradRoute::kNone) {
    const auto bias = conv.bias.defined() ? std::optional<torch::Tensor>(conv.bias) : std::nullopt;
    const bool nnpack = route == WinogradRoute::kAll;
    y = torch::GradMode::is_enabled() ? WinogradConv3x3::apply(x, conv.weight, bias, nnpack)
                                      : at::_nnpack_spatial_convolution(x, conv.weight, bias, {1, 1}, {1, 1});
  } else {
    y = conv.forward(x);
  }
  const auto& o = conv.options;
  g_conv_flops.fetch_add(2 * y.numel() * (o.in_channels() / o.groups()) * (*o.kernel_size())[0] *
                             (*o.kernel_size())[1],
                         std::memory_order_relaxed);
  return y;
}

nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride, bool bias) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(bias));
}

nn::Conv2d conv1x1NoBias(int64_t in, int64_t out) { return nn::Conv2d(nn::Conv2dOptions(in, out, 1).bias(false)); }

// A layer that works on each frame alone (conv, ReLU, Clamp, Upsample, PixelShuffle), on (B, C, H, W).
torch::Tensor applyFrameLayer(const TAEHVLayer& layer, const torch::Tensor& x) {
  using Kind = TAEHVLayer::Kind;
  switch (layer.kind) {
    case Kind::kConv:
      return countedConv(*layer.conv.ptr(), x);
    case Kind::kReLU:
      return torch::relu(x);
    case Kind::kClamp:
      return torch::tanh(x / 3) * 3;
    case Kind::kUpsample:
      return layer.upsample.ptr()->forward(x);
    case Kind::kPixelShuffle:
      return layer.pixelshuffle.ptr()->forward(x);
    default:
      TORCH_CHECK(false, "applyFrameLayer: layer mixes time");
  }
}

namespace {

bool mixesTime(TAEHVLayer::Kind kind) {
  return kind == TAEHVLayer::Kind::kMemBlock || kind == TAEHVLayer::Kind::kSuperMemBlock ||
         kind == TAEHVLayer::Kind::kTPool || kind == TAEHVLayer::Kind::kTGrow;
}

// Frames moved within each clip: rows of (N*T, C, H, W) x viewed as (clips, T, C, H, W). Both directions of the two
// functions below are one copy into a fresh tensor of the source's memory format. Written as autograd functions
// because a slice's own backward (slice_backward) writes the gradient into a contiguous zero tensor of the whole
// input, per slice: on channels_last activations each MemBlock's past frames then cost a transposing copy and a
// transposing add per clip in the backward (bench, bf16 4x12x32x32, 1 thread: add_ 33 ms and copy_ 31 ms a step
// against 5 and 17 contiguous).
torch::Tensor clipView(const torch::Tensor& x, int64_t clips) {
  return x.view({clips, x.size(0) / clips, x.size(1), x.size(2), x.size(3)});
}

// out[:, to + t] = in[:, from + t] for t < count, per clip; out's other frames zero. out has `out_rows` rows per clip
// and `format`'s layout.
torch::Tensor moveFrames(const torch::Tensor& in, int64_t clips, int64_t out_rows, int64_t from, int64_t to,
                         int64_t count, at::MemoryFormat format) {
  const std::array<int64_t, 4> sizes = {clips * out_rows, in.size(1), in.size(2), in.size(3)};
  torch::Tensor out = torch::empty(sizes, in.options().memory_format(format));  // torch::zeros drops the format
  const torch::Tensor frames = clipView(out, clips);
  frames.slice(1, 0, to).zero_();
  frames.slice(1, to + count, out_rows).zero_();
  frames.slice(1, to, to + count).copy_(clipView(in, clips).slice(1, from, from + count));
  return out;
}

// The input's memory format, kept for the backward (the incoming gradient may be a slice of another layout's).
void saveFormat(torch::autograd::AutogradContext* ctx, const torch::Tensor& x) {
  ctx->saved_data["format"] = static_cast<int64_t>(x.suggest_memory_format());
}
at::MemoryFormat savedFormat(torch::autograd::AutogradContext* ctx) {
  return static_cast<at::MemoryFormat>(ctx->saved_data["format"].toInt());
}

// past[t] = x[t - 1] within each clip of `frames` rows, zeros at t = 0.
struct PastFrames : torch::autograd::Function<PastFrames> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, int64_t frames) {
    ctx->saved_data["frames"] = frames;
    saveFormat(ctx, x);
    return moveFrames(x, x.size(0) / frames, frames, 0, 1, frames - 1, x.suggest_memory_format());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const int64_t frames = ctx->saved_data["frames"].toInt();
    return {moveFrames(grad[0], grad[0].size(0) / frames, frames, 1, 0, frames - 1, savedFormat(ctx)),
            torch::Tensor()};
  }
};

torch::Tensor pastFrames(const torch::Tensor& x, int64_t frames) { return PastFrames::apply(x, frames); }

// Drops the first `trim` frames of each of `clips` clips of x (N*T, C, H, W); keeps x's memory format.
struct TrimFrames : torch::autograd::Function<TrimFrames> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, int64_t clips,
                               int64_t trim) {
    ctx->saved_data["clips"] = clips;
    ctx->saved_data["trim"] = trim;
    saveFormat(ctx, x);
    const int64_t kept = x.size(0) / clips - trim;
    return moveFrames(x, clips, kept, trim, 0, kept, x.suggest_memory_format());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const int64_t clips = ctx->saved_data["clips"].toInt(), trim = ctx->saved_data["trim"].toInt();
    const int64_t kept = grad[0].size(0) / clips;
    return {moveFrames(grad[0], clips, kept + trim, 0, trim, kept, savedFormat(ctx)), torch::Tensor(),
            torch::Tensor()};
  }
};

torch::Tensor trimClips(const torch::Tensor& x, int64_t clips, int64_t trim) { return TrimFrames::apply(x, clips, trim); }

}  // namespace

// Runs `layers` over (N*T, C, H, W) holding N clips of consecutive frames, all frames at once. With trim > 0
// the first `trim` frames of each clip are dropped as soon as no later layer mixes time (after the last
// MemBlock/TPool/TGrow): the remaining layers work frame by frame, so the frames kept are exactly those of
// running everything and trimming at the end, without computing the frames thrown away.
// channels_last runs every layer on NHWC memory (oneDNN's native layout: no reorders around each convolution).
torch::Tensor runParallel(const std::vector<TAEHVLayer>& layers, torch::Tensor x, int64_t clips, int64_t trim,
                          bool channels_last) {
  using Kind = TAEHVLayer::Kind;
  if (channels_last) {
    x = x.contiguous(at::MemoryFormat::ChannelsLast);
  }
  std::size_t last_temporal = 0;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    if (mixesTime(layers[i].kind)) {
      last_temporal = i;
    }
  }
  if (trim > 0 && !mixesTime(layers[last_temporal].kind)) {
    x = trimClips(x, clips, trim);  // no layer mixes time at all
    trim = 0;
  }
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const TAEHVLayer& layer = layers[i];
    if (layer.kind == Kind::kUpsample && i + 1 < layers.size() && layers[i + 1].kind == Kind::kTGrow) {
      // Upsample then TGrow == TGrow then Upsample: a nearest-neighbour copy commutes with a 1x1 convolution
      // without bias (every output pixel is the same dot product of the same input pixel). Running the 1x1
      // convolution at the lower resolution does 1/4 of its work, forward and backward.
      x = layers[i + 1].tgrow.ptr()->forward(x);
      if (trim > 0 && i + 1 == last_temporal) {
        x = trimClips(x, clips, trim);
        trim = 0;
      }
      x = layers[i].upsample.ptr()->forward(x);
      ++i;
      continue;
    }
    if (trim > 0 && i > last_temporal) {
      x = trimClips(x, clips, trim);
      trim = 0;
    }
    switch (layer.kind) {
      case Kind::kMemBlock:
        x = layer.memblock.ptr()->forwardClip(x, x.size(0) / clips);
        break;
      case Kind::kSuperMemBlock:
        x = layer.supermemblock.ptr()->forwardClip(x, x.size(0) / clips);
        break;
      case Kind::kTPool:
        x = layer.tpool.ptr()->forward(x);
        break;
      case Kind::kTGrow:
        x = layer.tgrow.ptr()->forward(x);
        break;
      default:
        x = applyFrameLayer(layer, x);
        break;
    }
  }
  return (trim > 0 ? trimClips(x, clips, trim) : x).contiguous();
}

// Runs `layers` over NTCHW x one frame at a time (FrameStream), draining after each frame so that only O(1)
// frames of activations are alive; returns NTCHW.
torch::Tensor runStreaming(const std::vector<TAEHVLayer>& layers, const torch::Tensor& x) {
  FrameStream stream(layers);
  std::vector<torch::Tensor> out;
  for (int64_t i = 0; i < x.size(1); ++i) {
    stream.push(x.select(1, i));
    for (auto& y : stream.drain()) {
      out.push_back(std::move(y));
    }
  }
  return torch::stack(out, 1);
}

}  // namespace detail

using namespace detail;  // NOLINT: the blocks below run their convolutions through countedConv


int64_t convFlops() { return detail::g_conv_flops.load(std::memory_order_relaxed); }

bool cpuWinogradAvailable() { return at::_nnpack_available(); }

bool cpuWinogradAuto() { return cpuWinogradAvailable() && !cpuHasFlag("avx512_f"); }

void setCpuWinograd(bool on) {
  TORCH_CHECK(!on || cpuWinogradAvailable(),
              "Winograd convolutions need NNPACK, which this libtorch lacks or which does not run on this CPU "
              "(it needs AVX2 and FMA)");
  detail::g_cpu_winograd.store(on, std::memory_order_relaxed);
}

bool cpuWinograd() { return detail::g_cpu_winograd.load(std::memory_order_relaxed); }

// ---------------------------------------------------------------- blocks

torch::Tensor ClampImpl::forward(const torch::Tensor& x) { return torch::tanh(x / 3) * 3; }

MemBlockImpl::MemBlockImpl(int64_t channels)
    : conv1_(conv3x3(2 * channels, channels)), conv2_(conv3x3(channels, channels)), conv3_(conv3x3(channels, channels)) {
  conv = register_module("conv", nn::Sequential(conv1_, nn::ReLU(), conv2_, nn::ReLU(), conv3_));
}

// In place on the convolutions' fresh outputs, as upstream's ReLU(inplace=True): a convolution's backward does not
// read its output, and ReLU's reads its own result, so autograd is unaffected and three buffers per call are saved.
torch::Tensor MemBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& past) {
  torch::Tensor h = countedConv(*conv1_, torch::cat({x, past}, 1)).relu_();
  h = countedConv(*conv2_, h).relu_();
  return countedConv(*conv3_, h).add_(x).relu_();
}

torch::Tensor MemBlockImpl::forwardClip(const torch::Tensor& x, int64_t frames) {
  return forward(x, pastFrames(x, frames));
}

SuperMemBlockImpl::SuperMemBlockImpl(int64_t channels)
    : depthwise_(nn::Conv2d(nn::Conv2dOptions(2 * channels, 2 * channels, 7).padding(3).groups(2 * channels).bias(false))),
      expand_(nn::Conv2d(nn::Conv2dOptions(2 * channels, 4 * channels, 1))),
      project_(nn::Conv2d(nn::Conv2dOptions(4 * channels, channels, 1).bias(false))) {
  conv = register_module("conv", nn::Sequential(depthwise_, expand_, nn::ReLU(), project_));
}

torch::Tensor SuperMemBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& past) {
  torch::Tensor h = countedConv(*depthwise_, torch::cat({x, past}, 1));
  h = countedConv(*expand_, h).relu_();
  return countedConv(*project_, h).add_(x);
}

torch::Tensor SuperMemBlockImpl::forwardClip(const torch::Tensor& x, int64_t frames) {
  return forward(x, pastFrames(x, frames));
}

TPoolImpl::TPoolImpl(int64_t channels, int64_t stride) : channels_(channels), stride_(stride) {
  conv = register_module("conv", conv1x1NoBias(channels * stride, channels));
}

torch::Tensor TPoolImpl::forward(const torch::Tensor& x) {
  TORCH_CHECK(x.size(0) % stride_ == 0, "TPool: ", x.size(0), " frames is not a multiple of ", stride_);
  const int64_t groups = x.size(0) / stride_;
  if (stride_ > 1 && isChannelsLast(x)) {
    // NHWC memory: (G*s, H, W, C) -> (G, H, W, s*C), the channels_last layout of the stacked frames.
    const torch::Tensor stacked = x.permute({0, 2, 3, 1})
                                      .reshape({groups, stride_, x.size(2), x.size(3), channels_})
                                      .permute({0, 2, 3, 1, 4})
                                      .reshape({groups, x.size(2), x.size(3), stride_ * channels_})
                                      .permute({0, 3, 1, 2});
    return countedConv(*conv, stacked);
  }
  return countedConv(*conv, x.reshape({groups, stride_ * channels_, x.size(2), x.size(3)}));
}

TGrowImpl::TGrowImpl(int64_t channels, int64_t stride) : channels_(channels), stride_(stride) {
  conv = register_module("conv", conv1x1NoBias(channels, channels * stride));
}

torch::Tensor TGrowImpl::forward(const torch::Tensor& x) {
  const torch::Tensor y = countedConv(*conv, x);
  if (stride_ > 1 && isChannelsLast(y)) {
    // NHWC memory: (B, H, W, s*C) -> (B*s, H, W, C), keeping channels_last.
    return y.permute({0, 2, 3, 1})
        .reshape({x.size(0), x.size(2), x.size(3), stride_, channels_})
        .permute({0, 3, 1, 2, 4})
        .reshape({x.size(0) * stride_, x.size(2), x.size(3), channels_})
        .permute({0, 3, 1, 2});
  }
  return y.reshape({x.size(0) * stride_, channels_, x.size(2), x.size(3)});
}

torch::Tensor UpsampleImpl::forward(const torch::Tensor& x) {
  if (scale_ == 1) {
    return x;
  }
  return torch::upsample_nearest2d(x, {x.size(2) * scale_, x.size(3) * scale_});
}

// ---------------------------------------------------------------- streaming

FrameStream::FrameStream(const std::vector<TAEHVLayer>& layers)
    : layers_(layers), memory_(layers.size()), pooled_(layers.size()) {}

// Frames run through the layers in channels_last (NHWC) memory, which oneDNN convolves as it is: in NCHW every
// convolution of a single frame reorders its input into a blocked layout and its output back. Measured (roundtrip
// --streaming, taehv, 256x256, 17 frames, 2 threads): oneDNN kernel samples -20%, 4.4-4.6 -> 3.7-4.0 CPU s per
// run. Outputs are returned contiguous, as the frames came in.
void FrameStream::push(torch::Tensor frame) {
  queue_.push_back({frame.contiguous(at::MemoryFormat::ChannelsLast), 0});
}

void FrameStream::reset() {
  queue_.clear();
  memory_.assign(layers_.size(), torch::Tensor());
  pooled_.assign(layers_.size(), {});
}

std::vector<torch::Tensor> FrameStream::drain() {
  std::vector<torch::Tensor> out;
  for (torch::Tensor y = step(); y.defined(); y = step()) {
    out.push_back(std::move(y));
  }
  return out;
}

torch::Tensor FrameStream::step() {
  using Kind = TAEHVLayer::Kind;
  // Depth first: a layer's output goes to the front of the queue, so each frame runs as deep as it can before the
  // next one starts (upstream's work_queue.insert(0, ...)).
  while (!queue_.empty()) {
    WorkItem item = std::move(queue_.front());
    queue_.pop_front();
    const std::size_t i = item.layer;
    if (i == layers_.size()) {
      return item.x.contiguous();
    }
    torch::Tensor x = std::move(item.x);
    const TAEHVLayer& layer = layers_[i];
    switch (layer.kind) {
      case Kind::kMemBlock:
      case Kind::kSuperMemBlock: {
        const torch::Tensor past = memory_[i].defined() ? memory_[i] : torch::zeros_like(x);
        memory_[i] = x;
        x = layer.kind == Kind::kMemBlock ? layer.memblock.ptr()->forward(x, past)
                                          : layer.supermemblock.ptr()->forward(x, past);
        break;
      }
      case Kind::kTPool: {
        auto& group = pooled_[i];
        group.push_back(std::move(x));
        if (static_cast<int64_t>(group.size()) < layer.tpool.ptr()->stride()) {
          continue;
        }
        x = countedConv(*layer.tpool.ptr()->conv, torch::cat(group, 1));
        group.clear();
        break;
      }
      case Kind::kTGrow: {
        const torch::Tensor y = countedConv(*layer.tgrow.ptr()->conv, x);
        const int64_t c = layer.tgrow.ptr()->channels();
        for (int64_t k = layer.tgrow.ptr()->stride() - 1; k >= 0; --k) {
          queue_.push_front({y.slice(1, k * c, (k + 1) * c), i + 1});
        }
        continue;
      }
      case Kind::kUpsample:
        if (i + 1 < layers_.size() && layers_[i + 1].kind == Kind::kTGrow) {
          // As in runParallel: the TGrow's 1x1 convolution without bias at the lower resolution, then the nearest
          // upsample (they commute exactly), its frames queued for the layer after the TGrow. The upsampled TGrow
          // output is held as long as before, when the convolution ran on the upsampled frame.
          const auto tgrow = layers_[i + 1].tgrow.ptr();
          const torch::Tensor y = layer.upsample.ptr()->forward(countedConv(*tgrow->conv, x));
          const int64_t c = tgrow->channels();
          for (int64_t k = tgrow->stride() - 1; k >= 0; --k) {
            queue_.push_front({y.slice(1, k * c, (k + 1) * c), i + 2});
          }
          continue;
        }
        x = applyFrameLayer(layer, x);
        break;
      default:
        x = applyFrameLayer(layer, x);
        break;
    }
    queue_.push_front({std::move(x), i + 1});
  }
  return {};
}

}  // namespace taehv
