#include "taehv/model/taehv.h"

#include <stdexcept>
#include <utility>

#include "layers.h"

namespace taehv {
namespace nn = torch::nn;
namespace {

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

}  // namespace

using namespace detail;  // NOLINT: the layers' helpers (layers.h)

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

}  // namespace taehv
