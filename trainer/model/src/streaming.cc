#include "taehv/model/streaming.h"

#include <stdexcept>
#include <utility>

namespace taehv {
namespace {

// Every call of a stream must keep the (N, C, H, W) of its first one: the layer memories are of that shape.
void checkSameShape(std::vector<int64_t>& expected, c10::IntArrayRef got, const char* what) {
  const std::vector<int64_t> shape{got[0], got[2], got[3], got[4]};
  if (expected.empty()) {
    expected = shape;
  }
  TORCH_CHECK(shape == expected, "StreamingTAEHV: ", what, " of shape ", got,
              " differ in batch, channels or size from the stream's first ones (N, C, H, W) = ", c10::IntArrayRef(expected),
              "; call reset() to start a new stream");
}

}  // namespace

StreamingTAEHV::StreamingTAEHV(TAEHV model)
    : model_(std::move(model)), encoder_(model_->encoderLayers()), decoder_(model_->decoderLayers()) {
  if (model_->options().time_layout == TimeLayout::kH3) {
    throw std::invalid_argument(
        "StreamingTAEHV: taeh3 has no streaming mode (H3 encodes whole 17-frame chunks; upstream has none either)");
  }
}

void StreamingTAEHV::reset() {
  encoder_.reset();
  decoder_.reset();
  frames_encoded_ = 0;
  frames_decoded_ = 0;
  last_frame_ = torch::Tensor();
  frame_shape_.clear();
  latent_shape_.clear();
}

std::optional<torch::Tensor> StreamingTAEHV::encode(const torch::Tensor& frames) {
  TORCH_CHECK(frames.dim() == 5 && frames.size(1) >= 1 && frames.size(2) == 3,
              "StreamingTAEHV::encode: frames must be (N, T, 3, H, W) with T >= 1, got ", frames.sizes());
  const int64_t p = model_->options().patch_size;
  TORCH_CHECK(frames.size(3) % p == 0 && frames.size(4) % p == 0, "StreamingTAEHV::encode: height and width ",
              frames.sizes(), " must be multiples of the patch size ", p);
  checkSameShape(frame_shape_, frames.sizes(), "frames");
  torch::NoGradGuard no_grad;
  last_frame_ = frames.slice(1, frames.size(1) - 1);
  const torch::Tensor x = model_->preprocessFrames(frames);
  for (int64_t t = 0; t < x.size(1); ++t) {
    encoder_.push(x.select(1, t));
  }
  frames_encoded_ += x.size(1);
  return encode();
}

std::optional<torch::Tensor> StreamingTAEHV::encode() {
  torch::NoGradGuard no_grad;
  torch::Tensor z = encoder_.step();
  if (!z.defined()) {
    return std::nullopt;
  }
  return z.unsqueeze(1);
}

std::optional<torch::Tensor> StreamingTAEHV::decode(const torch::Tensor& latents) {
  const int64_t c = model_->options().latent_channels;
  TORCH_CHECK(latents.dim() == 5 && latents.size(1) >= 1 && latents.size(2) == c,
              "StreamingTAEHV::decode: latents must be (N, L, ", c, ", h, w) with L >= 1, got ", latents.sizes());
  checkSameShape(latent_shape_, latents.sizes(), "latents");
  for (int64_t t = 0; t < latents.size(1); ++t) {
    decoder_.push(latents.select(1, t));
  }
  return decode();
}

std::optional<torch::Tensor> StreamingTAEHV::decode() {
  torch::NoGradGuard no_grad;
  const bool trims = model_->options().time_layout != TimeLayout::kCogVideoX;
  while (true) {
    torch::Tensor x = decoder_.step();
    if (!x.defined()) {
      return std::nullopt;
    }
    ++frames_decoded_;
    // The first framesToTrim() outputs align the stream with the reference VAE; decodeVideo drops them too.
    if (trims && frames_decoded_ <= model_->framesToTrim()) {
      continue;
    }
    return model_->postprocessFrames(x).unsqueeze(1);
  }
}

std::vector<torch::Tensor> StreamingTAEHV::flushEncoder() {
  std::vector<torch::Tensor> latents;
  const int64_t td = model_->timeDownscale();
  if (last_frame_.defined() && frames_encoded_ % td != 0) {
    const int64_t pad = td - frames_encoded_ % td;
    for (int64_t i = 0; i < pad; ++i) {
      if (auto z = encode(last_frame_)) {
        latents.push_back(std::move(*z));
      }
    }
  }
  while (auto z = encode()) {
    latents.push_back(std::move(*z));
  }
  return latents;
}

std::vector<torch::Tensor> StreamingTAEHV::flushDecoder() {
  std::vector<torch::Tensor> frames;
  while (auto x = decode()) {
    frames.push_back(std::move(*x));
  }
  return frames;
}

std::vector<torch::Tensor> StreamingTAEHV::flush() {
  std::vector<torch::Tensor> frames;
  for (const auto& z : flushEncoder()) {
    if (auto x = decode(z)) {
      frames.push_back(std::move(*x));
    }
  }
  for (auto& x : flushDecoder()) {
    frames.push_back(std::move(x));
  }
  return frames;
}

}  // namespace taehv
