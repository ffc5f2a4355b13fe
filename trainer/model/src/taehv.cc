#include "taehv/model/taehv.h"

#include <atomic>
#include <stdexcept>
#include <utility>

namespace taehv {
namespace {

namespace nn = torch::nn;

std::atomic<int64_t> g_conv_flops{0};

// Every convolution of the model goes through here so that convFlops() can count its forward work.
torch::Tensor countedConv(nn::Conv2dImpl& conv, const torch::Tensor& x) {
  torch::Tensor y = conv.forward(x);
  const auto& o = conv.options;
  g_conv_flops.fetch_add(2 * y.numel() * (o.in_channels() / o.groups()) * (*o.kernel_size())[0] *
                             (*o.kernel_size())[1],
                         std::memory_order_relaxed);
  return y;
}

nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride = 1, bool bias = true) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(bias));
}

nn::Conv2d conv1x1NoBias(int64_t in, int64_t out) { return nn::Conv2d(nn::Conv2dOptions(in, out, 1).bias(false)); }

bool mixesTime(TAEHVLayer::Kind kind) {
  return kind == TAEHVLayer::Kind::kMemBlock || kind == TAEHVLayer::Kind::kTPool || kind == TAEHVLayer::Kind::kTGrow;
}

bool isChannelsLast(const torch::Tensor& x) {
  return x.dim() == 4 && x.size(1) > 1 && !x.is_contiguous() && x.is_contiguous(at::MemoryFormat::ChannelsLast);
}

// Drops the first `trim` frames of each of `clips` clips of x (N*T, C, H, W); keeps x's memory format.
torch::Tensor trimClips(const torch::Tensor& x, int64_t clips, int64_t trim) {
  const int64_t frames = x.size(0) / clips;
  std::vector<torch::Tensor> kept;
  for (int64_t c = 0; c < clips; ++c) {
    kept.push_back(x.slice(0, c * frames + trim, (c + 1) * frames));
  }
  return clips == 1 ? kept[0] : torch::cat(kept, 0);
}

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
      case Kind::kConv:
        x = countedConv(*layer.conv.ptr(), x);
        break;
      case Kind::kReLU:
        x = torch::relu(x);
        break;
      case Kind::kClamp:
        x = torch::tanh(x / 3) * 3;
        break;
      case Kind::kMemBlock:
        x = layer.memblock.ptr()->forwardClip(x, x.size(0) / clips);
        break;
      case Kind::kTPool:
        x = layer.tpool.ptr()->forward(x);
        break;
      case Kind::kTGrow:
        x = layer.tgrow.ptr()->forward(x);
        break;
      case Kind::kUpsample:
        x = layer.upsample.ptr()->forward(x);
        break;
    }
  }
  return (trim > 0 ? trimClips(x, clips, trim) : x).contiguous();
}

void checkVideo(const torch::Tensor& x, const char* what, int64_t channels) {
  TORCH_CHECK(x.dim() == 5, what, " must be NTCHW (5 dimensions), got ", x.sizes());
  TORCH_CHECK(x.size(1) >= 1, what, " must have at least one time step, got ", x.sizes());
  TORCH_CHECK(x.size(2) == channels, what, " must have ", channels, " channels, got ", x.sizes());
}

}  // namespace

int64_t convFlops() { return g_conv_flops.load(std::memory_order_relaxed); }

// ---------------------------------------------------------------- options

TAEHVOptions TAEHVOptions::forVariant(const std::string& name) {
  TAEHVOptions o;
  if (name == "taehv" || name == "taew2_1" || name == "taecvx" || name == "taeos1_3") {
    return o;
  }
  if (name == "taehv1_5") {
    o.patch_size = 2;
    o.latent_channels = 32;
    return o;
  }
  if (name == "taew2_2") {
    o.patch_size = 2;
    o.latent_channels = 48;
    return o;
  }
  std::string valid;
  for (const auto& v : variantNames()) {
    valid += (valid.empty() ? "" : ", ") + v;
  }
  throw std::invalid_argument("unknown TAEHV variant '" + name + "' (valid: " + valid + ")");
}

std::vector<std::string> TAEHVOptions::variantNames() {
  return {"taehv", "taew2_1", "taecvx", "taeos1_3", "taehv1_5", "taew2_2"};
}

// ---------------------------------------------------------------- blocks

torch::Tensor ClampImpl::forward(const torch::Tensor& x) { return torch::tanh(x / 3) * 3; }

MemBlockImpl::MemBlockImpl(int64_t channels)
    : conv1_(conv3x3(2 * channels, channels)), conv2_(conv3x3(channels, channels)), conv3_(conv3x3(channels, channels)) {
  conv = register_module("conv", nn::Sequential(conv1_, nn::ReLU(), conv2_, nn::ReLU(), conv3_));
}

torch::Tensor MemBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& past) {
  torch::Tensor h = torch::relu(countedConv(*conv1_, torch::cat({x, past}, 1)));
  h = torch::relu(countedConv(*conv2_, h));
  h = countedConv(*conv3_, h);
  return torch::relu(h + x);
}

torch::Tensor MemBlockImpl::forwardClip(const torch::Tensor& x, int64_t frames) {
  const int64_t clips = x.size(0) / frames;
  // past[t] = x[t - 1] within each clip, zeros at t = 0; built by concatenating along the frame dimension so
  // that x's memory format (contiguous or channels_last) carries over.
  const torch::Tensor zero = torch::zeros_like(x.slice(0, 0, 1));
  std::vector<torch::Tensor> pieces;
  for (int64_t c = 0; c < clips; ++c) {
    pieces.push_back(zero);
    if (frames > 1) {
      pieces.push_back(x.slice(0, c * frames, (c + 1) * frames - 1));
    }
  }
  return forward(x, torch::cat(pieces, 0));
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

// ---------------------------------------------------------------- TAEHV

TAEHVImpl::TAEHVImpl(TAEHVOptions options) : options_(options) {
  using Kind = TAEHVLayer::Kind;
  TORCH_CHECK(options_.patch_size >= 1, "TAEHV: patch_size must be >= 1");
  TORCH_CHECK(options_.latent_channels >= 1, "TAEHV: latent_channels must be >= 1");
  encoder = register_module("encoder", nn::Sequential());
  decoder = register_module("decoder", nn::Sequential());

  const auto add_conv = [](nn::Sequential& seq, std::vector<TAEHVLayer>& layers, nn::Conv2d conv) {
    seq->push_back(conv);
    TAEHVLayer l;
    l.kind = Kind::kConv;
    l.conv = conv;
    layers.push_back(l);
  };
  const auto add_relu = [](nn::Sequential& seq, std::vector<TAEHVLayer>& layers) {
    seq->push_back(nn::ReLU());
    TAEHVLayer l;
    l.kind = Kind::kReLU;
    layers.push_back(l);
  };
  const auto add_memblocks = [](nn::Sequential& seq, std::vector<TAEHVLayer>& layers, int64_t channels) {
    for (int i = 0; i < 3; ++i) {
      MemBlock m(channels);
      seq->push_back(m);
      TAEHVLayer l;
      l.kind = Kind::kMemBlock;
      l.memblock = m;
      layers.push_back(l);
    }
  };
  const int64_t image_channels = 3 * options_.patch_size * options_.patch_size;

  // Encoder (ARCHITECTURE.md, "Encoder").
  auto& enc = encoder_layers_;
  add_conv(encoder, enc, conv3x3(image_channels, 64));
  add_relu(encoder, enc);
  for (int stage = 0; stage < 3; ++stage) {
    TPool pool(64, options_.encoder_time_downscale[static_cast<std::size_t>(stage)] ? 2 : 1);
    encoder->push_back(pool);
    TAEHVLayer l;
    l.kind = Kind::kTPool;
    l.tpool = pool;
    enc.push_back(l);
    add_conv(encoder, enc, conv3x3(64, 64, 2, false));
    add_memblocks(encoder, enc, 64);
  }
  add_conv(encoder, enc, conv3x3(64, options_.latent_channels));

  // Decoder (ARCHITECTURE.md, "Decoder").
  auto& dec = decoder_layers_;
  {
    Clamp clamp;
    decoder->push_back(clamp);
    TAEHVLayer l;
    l.kind = Kind::kClamp;
    dec.push_back(l);
  }
  const int64_t n_f[4] = {256, 128, 64, 64};
  add_conv(decoder, dec, conv3x3(options_.latent_channels, n_f[0]));
  add_relu(decoder, dec);
  for (int stage = 0; stage < 3; ++stage) {
    const auto s = static_cast<std::size_t>(stage);
    add_memblocks(decoder, dec, n_f[s]);
    Upsample up(options_.decoder_space_upscale[s] ? 2 : 1);
    decoder->push_back(up);
    TAEHVLayer lu;
    lu.kind = Kind::kUpsample;
    lu.upsample = up;
    dec.push_back(lu);
    TGrow grow(n_f[s], options_.decoder_time_upscale[s] ? 2 : 1);
    decoder->push_back(grow);
    TAEHVLayer lg;
    lg.kind = Kind::kTGrow;
    lg.tgrow = grow;
    dec.push_back(lg);
    add_conv(decoder, dec, conv3x3(n_f[s], n_f[s + 1], 1, false));
  }
  add_relu(decoder, dec);
  add_conv(decoder, dec, conv3x3(n_f[3], image_channels));
}

int64_t TAEHVImpl::timeDownscale() const {
  int64_t s = 1;
  for (const bool on : options_.encoder_time_downscale) {
    s *= on ? 2 : 1;
  }
  return s;
}

int64_t TAEHVImpl::timeUpscale() const {
  int64_t s = 1;
  for (const bool on : options_.decoder_time_upscale) {
    s *= on ? 2 : 1;
  }
  return s;
}

int64_t TAEHVImpl::framesToTrim() const { return timeUpscale() - 1; }

bool TAEHVImpl::isTGrowWeight(const std::string& name) const {
  for (std::size_t i = 0; i < decoder_layers_.size(); ++i) {
    if (decoder_layers_[i].kind == TAEHVLayer::Kind::kTGrow && name == "decoder." + std::to_string(i) + ".conv.weight") {
      return true;
    }
  }
  return false;
}

torch::Tensor TAEHVImpl::encodeVideo(const torch::Tensor& frames, bool streaming) {
  checkVideo(frames, "encodeVideo: frames", 3);
  const int64_t p = options_.patch_size;
  TORCH_CHECK(frames.size(3) % p == 0 && frames.size(4) % p == 0, "encodeVideo: height and width ",
              frames.sizes(), " must be multiples of the patch size ", p);
  torch::Tensor x = p > 1 ? torch::pixel_unshuffle(frames, p) : frames;
  const int64_t td = timeDownscale();
  const int64_t t = x.size(1);
  if (t % td != 0) {
    // Pad time with copies of the last frame.
    x = torch::cat({x, x.slice(1, t - 1, t).expand({-1, td - t % td, -1, -1, -1})}, 1);
  }
  const int64_t n = x.size(0);
  if (streaming) {
    FrameStream stream(encoder_layers_);
    std::vector<torch::Tensor> out;
    for (int64_t i = 0; i < x.size(1); ++i) {
      for (auto& f : stream.push(x.select(1, i))) {
        out.push_back(std::move(f));
      }
    }
    return torch::stack(out, 1);
  }
  torch::Tensor y =
      runParallel(encoder_layers_, x.reshape({-1, x.size(2), x.size(3), x.size(4)}), n, 0, channels_last_);
  return y.view({n, -1, y.size(1), y.size(2), y.size(3)});
}

torch::Tensor TAEHVImpl::decodeVideo(const torch::Tensor& latents, bool streaming) {
  checkVideo(latents, "decodeVideo: latents", options_.latent_channels);
  const int64_t n = latents.size(0);
  const int64_t p = options_.patch_size;
  torch::Tensor x;
  if (streaming) {
    FrameStream stream(decoder_layers_);
    std::vector<torch::Tensor> out;
    for (int64_t i = 0; i < latents.size(1); ++i) {
      for (auto& f : stream.push(latents.select(1, i))) {
        out.push_back(std::move(f));
      }
    }
    x = torch::stack(out, 1);
  } else {
    x = runParallel(decoder_layers_, latents.reshape({-1, latents.size(2), latents.size(3), latents.size(4)}), n,
                    framesToTrim(), channels_last_);
    x = x.view({n, -1, x.size(1), x.size(2), x.size(3)});
  }
  if (p > 1) {
    x = torch::pixel_shuffle(x, p);
  }
  return streaming ? x.clamp(0, 1).slice(1, framesToTrim()) : x.clamp(0, 1);
}

// ---------------------------------------------------------------- streaming

FrameStream::FrameStream(const std::vector<TAEHVLayer>& layers)
    : layers_(layers), memory_(layers.size()), pooled_(layers.size()) {}

std::vector<torch::Tensor> FrameStream::push(const torch::Tensor& frame) {
  std::vector<torch::Tensor> out;
  run(0, frame, out);
  return out;
}

void FrameStream::run(std::size_t first, torch::Tensor x, std::vector<torch::Tensor>& out) {
  using Kind = TAEHVLayer::Kind;
  for (std::size_t i = first; i < layers_.size(); ++i) {
    const TAEHVLayer& layer = layers_[i];
    switch (layer.kind) {
      case Kind::kConv:
        x = countedConv(*layer.conv.ptr(), x);
        break;
      case Kind::kReLU:
        x = torch::relu(x);
        break;
      case Kind::kClamp:
        x = torch::tanh(x / 3) * 3;
        break;
      case Kind::kMemBlock: {
        torch::Tensor past = memory_[i].defined() ? memory_[i] : torch::zeros_like(x);
        memory_[i] = x;
        x = layer.memblock.ptr()->forward(x, past);
        break;
      }
      case Kind::kTPool: {
        auto& group = pooled_[i];
        group.push_back(x);
        if (static_cast<int64_t>(group.size()) < layer.tpool.ptr()->stride()) {
          return;
        }
        x = countedConv(*layer.tpool.ptr()->conv, torch::cat(group, 1));
        group.clear();
        break;
      }
      case Kind::kTGrow: {
        const torch::Tensor y = countedConv(*layer.tgrow.ptr()->conv, x);
        const int64_t c = layer.tgrow.ptr()->channels();
        for (int64_t k = 0; k < layer.tgrow.ptr()->stride(); ++k) {
          run(i + 1, y.slice(1, k * c, (k + 1) * c), out);
        }
        return;
      }
      case Kind::kUpsample:
        x = layer.upsample.ptr()->forward(x);
        break;
    }
  }
  out.push_back(std::move(x));
}

StreamingDecoder::StreamingDecoder(TAEHV model)
    : model_(std::move(model)), stream_(model_->decoderLayers()), to_trim_(model_->framesToTrim()) {}

std::vector<torch::Tensor> StreamingDecoder::push(const torch::Tensor& latent) {
  TORCH_CHECK(latent.dim() == 4 && latent.size(1) == model_->options().latent_channels,
              "StreamingDecoder: latent must be (N, ", model_->options().latent_channels, ", h, w), got ",
              latent.sizes());
  std::vector<torch::Tensor> frames;
  for (auto& f : stream_.push(latent)) {
    if (to_trim_ > 0) {
      --to_trim_;
      continue;
    }
    const int64_t p = model_->options().patch_size;
    frames.push_back((p > 1 ? torch::pixel_shuffle(f, p) : f).clamp(0, 1));
  }
  return frames;
}

}  // namespace taehv
