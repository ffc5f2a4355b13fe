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
  return kind == TAEHVLayer::Kind::kMemBlock || kind == TAEHVLayer::Kind::kSuperMemBlock ||
         kind == TAEHVLayer::Kind::kTPool || kind == TAEHVLayer::Kind::kTGrow;
}

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

// past[t] = x[t - 1] within each clip of `frames` rows of x (N*T, C, H, W), zeros at t = 0; built by concatenating
// along the frame dimension so that x's memory format (contiguous or channels_last) carries over.
torch::Tensor pastFrames(const torch::Tensor& x, int64_t frames) {
  const int64_t clips = x.size(0) / frames;
  const torch::Tensor zero = torch::zeros_like(x.slice(0, 0, 1));
  std::vector<torch::Tensor> pieces;
  for (int64_t c = 0; c < clips; ++c) {
    pieces.push_back(zero);
    if (frames > 1) {
      pieces.push_back(x.slice(0, c * frames, (c + 1) * frames - 1));
    }
  }
  return torch::cat(pieces, 0);
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

void checkVideo(const torch::Tensor& x, const char* what, int64_t channels) {
  TORCH_CHECK(x.dim() == 5, what, " must be NTCHW (5 dimensions), got ", x.sizes());
  TORCH_CHECK(x.size(1) >= 1, what, " must have at least one time step, got ", x.sizes());
  TORCH_CHECK(x.size(2) == channels, what, " must have ", channels, " channels, got ", x.sizes());
}

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// H3 chunking (ARCHITECTURE.md): 17 input frames after 3 zero frames encode to 5 latents; 3 latents are dropped.
constexpr int64_t kH3ChunkFrames = 17;
constexpr int64_t kH3LeadFrames = 3;
constexpr int64_t kH3LatentsPerChunk = 5;
constexpr int64_t kH3DroppedLatents = 3;

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

}  // namespace

int64_t convFlops() { return g_conv_flops.load(std::memory_order_relaxed); }

// ---------------------------------------------------------------- options

TAEHVOptions TAEHVOptions::forVariant(const std::string& name) {
  const VariantSpec* spec = findVariant(name);
  if (spec == nullptr) {
    throw std::invalid_argument(unknownVariantMessage(name));
  }
  TAEHVOptions o;
  o.patch_size = spec->patch_size;
  o.latent_channels = spec->latent_channels;
  o.encoder_time_downscale = spec->encoder_time_downscale;
  o.decoder_time_upscale = spec->decoder_time_upscale;
  o.decoder_arch = spec->decoder;
  o.time_layout = spec->time_layout;
  return o;
}

std::vector<std::string> TAEHVOptions::variantNames() {
  std::vector<std::string> names;
  for (const auto& spec : variantSpecs()) {
    names.push_back(spec.name);
  }
  return names;
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
  h = torch::relu(countedConv(*expand_, h));
  return countedConv(*project_, h) + x;
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

// ---------------------------------------------------------------- TAEHV

namespace {

// The layers of a block list. appendLayer adds one to the typed list and its module to the Sequential that names
// its parameters ("decoder.<index>. ..."), so that the two stay index for index the same.
TAEHVLayer convLayer(nn::Conv2d conv) {
  TAEHVLayer l{TAEHVLayer::Kind::kConv};
  l.conv = std::move(conv);
  return l;
}
TAEHVLayer plainLayer(TAEHVLayer::Kind kind) { return TAEHVLayer{kind}; }  // ReLU, Clamp
TAEHVLayer memBlockLayer(int64_t channels) {
  TAEHVLayer l{TAEHVLayer::Kind::kMemBlock};
  l.memblock = MemBlock(channels);
  return l;
}
TAEHVLayer superMemBlockLayer(int64_t channels) {
  TAEHVLayer l{TAEHVLayer::Kind::kSuperMemBlock};
  l.supermemblock = SuperMemBlock(channels);
  return l;
}
TAEHVLayer tpoolLayer(int64_t channels, bool on) {
  TAEHVLayer l{TAEHVLayer::Kind::kTPool};
  l.tpool = TPool(channels, on ? 2 : 1);
  return l;
}
TAEHVLayer tgrowLayer(int64_t channels, bool on) {
  TAEHVLayer l{TAEHVLayer::Kind::kTGrow};
  l.tgrow = TGrow(channels, on ? 2 : 1);
  return l;
}
TAEHVLayer upsampleLayer(bool on) {
  TAEHVLayer l{TAEHVLayer::Kind::kUpsample};
  l.upsample = Upsample(on ? 2 : 1);
  return l;
}
TAEHVLayer pixelShuffleLayer(int64_t factor) {
  TAEHVLayer l{TAEHVLayer::Kind::kPixelShuffle};
  l.pixelshuffle = nn::PixelShuffle(nn::PixelShuffleOptions(factor));
  return l;
}

void appendLayer(nn::Sequential& seq, std::vector<TAEHVLayer>& layers, TAEHVLayer layer) {
  using Kind = TAEHVLayer::Kind;
  switch (layer.kind) {
    case Kind::kConv:
      seq->push_back(layer.conv);
      break;
    case Kind::kReLU:
      seq->push_back(nn::ReLU());
      break;
    case Kind::kClamp:
      seq->push_back(Clamp());
      break;
    case Kind::kMemBlock:
      seq->push_back(layer.memblock);
      break;
    case Kind::kSuperMemBlock:
      seq->push_back(layer.supermemblock);
      break;
    case Kind::kTPool:
      seq->push_back(layer.tpool);
      break;
    case Kind::kTGrow:
      seq->push_back(layer.tgrow);
      break;
    case Kind::kUpsample:
      seq->push_back(layer.upsample);
      break;
    case Kind::kPixelShuffle:
      seq->push_back(layer.pixelshuffle);
      break;
  }
  layers.push_back(std::move(layer));
}

}  // namespace

TAEHVImpl::TAEHVImpl(TAEHVOptions options) : options_(options) {
  TORCH_CHECK(options_.patch_size >= 1, "TAEHV: patch_size must be >= 1");
  TORCH_CHECK(options_.latent_channels >= 1, "TAEHV: latent_channels must be >= 1");
  encoder = register_module("encoder", nn::Sequential());
  decoder = register_module("decoder", nn::Sequential());

  // Encoder (ARCHITECTURE.md, "Encoder").
  const auto add = [&](TAEHVLayer layer) { appendLayer(encoder, encoder_layers_, std::move(layer)); };
  add(convLayer(conv3x3(imageChannels(), 64)));
  add(plainLayer(TAEHVLayer::Kind::kReLU));
  for (std::size_t s = 0; s < 3; ++s) {
    add(tpoolLayer(64, options_.encoder_time_downscale[s]));
    add(convLayer(conv3x3(64, 64, 2, false)));
    for (int i = 0; i < 3; ++i) {
      add(memBlockLayer(64));
    }
  }
  add(convLayer(conv3x3(64, options_.latent_channels)));

  if (options_.decoder_arch == DecoderArch::kSuper) {
    buildSuperDecoder();
  } else {
    buildBaseDecoder();
  }
}

int64_t TAEHVImpl::imageChannels() const { return 3 * options_.patch_size * options_.patch_size; }

void TAEHVImpl::buildBaseDecoder() {
  // ARCHITECTURE.md, "Decoder".
  const auto add = [&](TAEHVLayer layer) { appendLayer(decoder, decoder_layers_, std::move(layer)); };
  const int64_t n_f[4] = {256, 128, 64, 64};
  add(plainLayer(TAEHVLayer::Kind::kClamp));
  add(convLayer(conv3x3(options_.latent_channels, n_f[0])));
  add(plainLayer(TAEHVLayer::Kind::kReLU));
  for (std::size_t s = 0; s < 3; ++s) {
    for (int i = 0; i < 3; ++i) {
      add(memBlockLayer(n_f[s]));
    }
    add(upsampleLayer(options_.decoder_space_upscale[s]));
    add(tgrowLayer(n_f[s], options_.decoder_time_upscale[s]));
    add(convLayer(conv3x3(n_f[s], n_f[s + 1], 1, false)));
  }
  add(plainLayer(TAEHVLayer::Kind::kReLU));
  add(convLayer(conv3x3(n_f[3], imageChannels())));
}

void TAEHVImpl::buildSuperDecoder() {
  // ARCHITECTURE.md, "Super decoder": no Clamp; spatial upscaling by PixelShuffle after a wider conv.
  const auto add = [&](TAEHVLayer layer) { appendLayer(decoder, decoder_layers_, std::move(layer)); };
  const int64_t n_f[4] = {512, 256, 128, 64};
  add(convLayer(conv1x1NoBias(options_.latent_channels, n_f[0])));
  for (std::size_t s = 0; s < 3; ++s) {
    for (int i = 0; i < 3; ++i) {
      add(superMemBlockLayer(n_f[s]));
    }
    const int64_t up = options_.decoder_space_upscale[s] ? 2 : 1;
    add(convLayer(conv3x3(n_f[s], n_f[s + 1] * up * up)));
    add(plainLayer(TAEHVLayer::Kind::kReLU));
    add(pixelShuffleLayer(up));
    add(tgrowLayer(n_f[s + 1], options_.decoder_time_upscale[s]));
  }
  add(convLayer(conv3x3(n_f[3], imageChannels())));
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

torch::Tensor TAEHVImpl::preprocessFrames(const torch::Tensor& frames) const {
  const int64_t p = options_.patch_size;
  return p > 1 ? torch::pixel_unshuffle(frames, p) : frames;
}

torch::Tensor TAEHVImpl::postprocessFrames(const torch::Tensor& x) const {
  const int64_t p = options_.patch_size;
  return (p > 1 ? torch::pixel_shuffle(x, p) : x).clamp(0, 1);
}

int64_t TAEHVImpl::encodedLatents(int64_t frames) const {
  if (options_.time_layout == TimeLayout::kH3) {
    return std::max<int64_t>(0, kH3LatentsPerChunk * ceilDiv(frames, kH3ChunkFrames) - kH3DroppedLatents);
  }
  return ceilDiv(frames, timeDownscale());
}

int64_t TAEHVImpl::decodedFrames(int64_t latents) const {
  const int64_t raw = latents * timeUpscale();
  if (options_.time_layout == TimeLayout::kH3) {
    const int64_t chunks = ceilDiv(raw, kH3LatentsPerChunk * timeUpscale());
    const int64_t kept = chunks * (kH3LatentsPerChunk * timeUpscale() - framesToTrim());
    return std::max<int64_t>(0, kept - kH3DroppedLatents * timeUpscale());
  }
  return skipsTrim(latents) ? raw : std::max<int64_t>(0, raw - framesToTrim());
}

bool TAEHVImpl::skipsTrim(int64_t latents) const {
  // upstream decode_video: "skip trimming for cogvideox to make frame counts match" (even latent counts only)
  return options_.time_layout == TimeLayout::kCogVideoX && latents % 2 == 0;
}

torch::Tensor TAEHVImpl::runEncoder(const torch::Tensor& x, bool streaming) {
  if (streaming) {
    return runStreaming(encoder_layers_, x);
  }
  const int64_t n = x.size(0);
  torch::Tensor y =
      runParallel(encoder_layers_, x.reshape({-1, x.size(2), x.size(3), x.size(4)}), n, 0, channels_last_);
  return y.view({n, -1, y.size(1), y.size(2), y.size(3)});
}

torch::Tensor TAEHVImpl::encodeVideo(const torch::Tensor& frames, bool streaming) {
  checkVideo(frames, "encodeVideo: frames", 3);
  const int64_t p = options_.patch_size;
  TORCH_CHECK(frames.size(3) % p == 0 && frames.size(4) % p == 0, "encodeVideo: height and width ",
              frames.sizes(), " must be multiples of the patch size ", p);
  const bool h3 = options_.time_layout == TimeLayout::kH3;
  const int64_t multiple = h3 ? kH3ChunkFrames : timeDownscale();
  torch::Tensor x = frames;
  const int64_t t = x.size(1);
  if (t % multiple != 0) {
    // Pad time with copies of the last frame.
    x = torch::cat({x, x.slice(1, t - 1, t).expand({-1, multiple - t % multiple, -1, -1, -1})}, 1);
  }
  if (!h3) {
    return runEncoder(preprocessFrames(x), streaming);
  }
  // H3 (ARCHITECTURE.md, "H3 chunking"): 17-frame chunks, each after 3 zero frames, encoded independently;
  // the last 3 latents of the whole sequence dropped.
  const int64_t n = x.size(0);
  const int64_t chunks = x.size(1) / kH3ChunkFrames;
  x = x.reshape({n * chunks, kH3ChunkFrames, x.size(2), x.size(3), x.size(4)});
  x = torch::cat({torch::zeros_like(x.slice(1, 0, kH3LeadFrames)), x}, 1);
  torch::Tensor z;
  if (streaming) {
    // One chunk at a time (all clips of the batch together), each with empty memory, as upstream's sequential mode.
    x = x.view({n, chunks, x.size(1), x.size(2), x.size(3), x.size(4)});
    std::vector<torch::Tensor> parts;
    for (int64_t c = 0; c < chunks; ++c) {
      parts.push_back(runEncoder(preprocessFrames(x.select(1, c)), true));
    }
    z = torch::cat(parts, 1);
  } else {
    z = runEncoder(preprocessFrames(x), false);
    z = z.reshape({n, -1, z.size(2), z.size(3), z.size(4)});
  }
  return z.slice(1, 0, z.size(1) - kH3DroppedLatents);
}

torch::Tensor TAEHVImpl::decodeVideo(const torch::Tensor& latents, bool streaming) {
  checkVideo(latents, "decodeVideo: latents", options_.latent_channels);
  const int64_t n = latents.size(0);
  const bool h3 = options_.time_layout == TimeLayout::kH3;
  const int64_t trim = h3 || skipsTrim(latents.size(1)) ? 0 : framesToTrim();
  torch::Tensor x;
  if (streaming) {
    x = runStreaming(decoder_layers_, latents).slice(1, trim);
  } else {
    x = runParallel(decoder_layers_, latents.reshape({-1, latents.size(2), latents.size(3), latents.size(4)}), n,
                    trim, channels_last_);
    x = x.view({n, -1, x.size(1), x.size(2), x.size(3)});
  }
  if (!h3) {
    return postprocessFrames(x);
  }
  // H3: pad the frames with zeros to whole 20-frame chunks, drop the first framesToTrim() of each chunk, and after
  // postprocessing the last 3 latents' worth of frames.
  const int64_t chunk = kH3LatentsPerChunk * timeUpscale();
  if (x.size(1) % chunk != 0) {
    const int64_t pad = chunk - x.size(1) % chunk;
    x = torch::cat({x, torch::zeros({n, pad, x.size(2), x.size(3), x.size(4)}, x.options())}, 1);
  }
  x = x.reshape({n, -1, chunk, x.size(2), x.size(3), x.size(4)}).slice(2, framesToTrim());
  x = postprocessFrames(x.reshape({n, -1, x.size(3), x.size(4), x.size(5)}));
  return x.slice(1, 0, std::max<int64_t>(0, x.size(1) - kH3DroppedLatents * timeUpscale()));
}

// ---------------------------------------------------------------- streaming

FrameStream::FrameStream(const std::vector<TAEHVLayer>& layers)
    : layers_(layers), memory_(layers.size()), pooled_(layers.size()) {}

void FrameStream::push(torch::Tensor frame) { queue_.push_back({std::move(frame), 0}); }

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
      return item.x;
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
      default:
        x = applyFrameLayer(layer, x);
        break;
    }
    queue_.push_front({std::move(x), i + 1});
  }
  return {};
}

}  // namespace taehv
