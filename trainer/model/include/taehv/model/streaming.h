// StreamingTAEHV: TAEHV for live video, one frame or one latent at a time (upstream's StreamingTAEHV,
// madebyollin/taehv, same semantics and the same numbers).
//
// Contract:
// - encode(frames) queues input frames (N, T, 3, H, W) in [0, 1] and does the work for at most one latent: it returns
//   that latent (N, 1, C, h, w) once timeDownscale() frames have arrived, else nothing. encode() with no argument
//   only works through what is queued.
// - decode(latents) queues latents (N, L, C, h, w) and returns the next output frame (N, 1, 3, H, W) in [0, 1];
//   decode() with no argument returns the following frames one by one (each latent makes timeUpscale() frames),
//   nothing when the queue is empty. The first framesToTrim() decoder outputs of a stream are consumed silently,
//   as decodeVideo drops them (taecvx: never, as upstream's streaming mode).
// - flushEncoder() pads with copies of the last input frame up to a multiple of timeDownscale() and returns the
//   remaining latents; flushDecoder() returns the remaining frames; flush() = flushEncoder, each latent decoded,
//   flushDecoder (video in, video out). reset() forgets everything: the next call starts a new stream.
// - Each call does only the work its one output needs; the state is one memory slot per layer, so memory does not
//   grow with the length of the stream. Fed frame by frame and flushed, it gives encodeVideo's latents and
//   decodeVideo's frames (to float rounding).
// - Work runs without autograd (NoGradGuard inside). Keeps the model alive; the model's weights must not change
//   while a stream is open. One stream is not thread-safe; separate streams on one model may run on separate
//   threads. taeh3 has no streaming mode (its chunks need whole 17-frame groups; upstream has none either): the
//   constructor throws std::invalid_argument.
#pragma once

#include <torch/torch.h>

#include <optional>
#include <vector>

#include "taehv/model/taehv.h"

namespace taehv {

class StreamingTAEHV {
 public:
  /// Throws std::invalid_argument for a model with H3 chunking (taeh3).
  explicit StreamingTAEHV(TAEHV model);

  /// Queues frames (N, T, 3, H, W), T >= 1, then encode().
  std::optional<torch::Tensor> encode(const torch::Tensor& frames);
  /// Works through the queued frames until one latent (N, 1, C, h, w) is made; nothing if more input is needed.
  std::optional<torch::Tensor> encode();

  /// Queues latents (N, L, C, h, w), L >= 1, then decode().
  std::optional<torch::Tensor> decode(const torch::Tensor& latents);
  /// The next decoded frame (N, 1, 3, H, W) in [0, 1]; nothing if the queued latents have all been decoded.
  std::optional<torch::Tensor> decode();

  /// Pads the input to a multiple of timeDownscale() frames (copies of the last frame) and returns every latent
  /// still to come, in order.
  std::vector<torch::Tensor> flushEncoder();
  /// Every frame still to come from the queued latents, in order.
  std::vector<torch::Tensor> flushDecoder();
  /// flushEncoder(), each of its latents through decode(), then flushDecoder(): the remaining output frames.
  std::vector<torch::Tensor> flush();
  /// Starts a new stream: queues, layer memories and counters cleared.
  void reset();

  const TAEHV& model() const { return model_; }

 private:
  TAEHV model_;
  FrameStream encoder_;
  FrameStream decoder_;
  int64_t frames_encoded_ = 0;
  int64_t frames_decoded_ = 0;
  torch::Tensor last_frame_;            // (N, 1, 3, H, W): the last input frame, for flushEncoder's padding
  std::vector<int64_t> frame_shape_;    // (N, 3, H, W) of the stream's first frame
  std::vector<int64_t> latent_shape_;   // (N, C, h, w) of the stream's first latent
};

}  // namespace taehv
