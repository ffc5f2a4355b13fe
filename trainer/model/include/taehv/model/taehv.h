// TAEHV, the Tiny AutoEncoder for Hunyuan Video, in libtorch. Reproduces the upstream reference
// (madebyollin/taehv, MIT); the architecture is written out in ../shared/taehv-reference/ARCHITECTURE.md.
// Parameter names are the upstream state_dict keys ("encoder.0.weight", "decoder.3.conv.0.bias", ...).
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "taehv/model/variants.h"

namespace taehv {

struct TAEHVOptions {
  int64_t patch_size = 1;        ///< 1: taehv, taew2_1, taecvx, taeos1_3; 2: taehv1_5(_super), taew2_2(_super), taeh3; 4: taeltx
  int64_t latent_channels = 16;  ///< 16, or 32 (taehv1_5), 48 (taew2_2), 128 (taeltx), 24 (taeh3)
  std::array<bool, 3> encoder_time_downscale{true, true, false};
  std::array<bool, 3> decoder_time_upscale{false, true, true};
  std::array<bool, 3> decoder_space_upscale{true, true, true};
  DecoderArch decoder_arch = DecoderArch::kBase;
  TimeLayout time_layout = TimeLayout::kPlain;

  /// Options of a named variant (variants.h: taehv, taew2_1, taecvx, taeos1_3, taehv1_5, taew2_2, taehv1_5_super,
  /// taew2_2_super, taeltx_2, taeltx2_3, taeh3). Throws std::invalid_argument naming the valid variants otherwise.
  static TAEHVOptions forVariant(const std::string& name);
};

/// `tanh(x / 3) * 3`: soft clamp of latents to about [-3, 3] (decoder.0).
class ClampImpl : public torch::nn::Module {
 public:
  torch::Tensor forward(const torch::Tensor& x);
};
TORCH_MODULE(Clamp);

/// ReLU(conv(ReLU(conv(ReLU(conv(cat[x, past])))))+ x); `past` is the block's input at the previous time step
/// (zeros at t = 0). Parameters conv.0 (2C -> C), conv.2, conv.4 (C -> C), 3x3, with bias.
class MemBlockImpl : public torch::nn::Module {
 public:
  explicit MemBlockImpl(int64_t channels);
  /// x, past: (B, C, H, W), one frame per row.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& past);
  /// x: (N*T, C, H, W), clips of `frames` consecutive rows; past is built by shifting x one step in time.
  torch::Tensor forwardClip(const torch::Tensor& x, int64_t frames);

  torch::nn::Sequential conv{nullptr};

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
};
TORCH_MODULE(MemBlock);

/// The Super decoder's block: conv(cat[x, past]) + x, no activation after the sum; conv = conv.0 7x7 depthwise
/// 2C -> 2C (no bias), conv.1 1x1 2C -> 4C (bias), conv.2 ReLU, conv.3 1x1 4C -> C (no bias). `past` as for MemBlock.
class SuperMemBlockImpl : public torch::nn::Module {
 public:
  explicit SuperMemBlockImpl(int64_t channels);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& past);
  torch::Tensor forwardClip(const torch::Tensor& x, int64_t frames);

  torch::nn::Sequential conv{nullptr};

 private:
  torch::nn::Conv2d depthwise_{nullptr}, expand_{nullptr}, project_{nullptr};
};
TORCH_MODULE(SuperMemBlock);

/// Temporal pooling: `stride` consecutive frames stacked on channels (earliest first), 1x1 conv sC -> C, no bias.
class TPoolImpl : public torch::nn::Module {
 public:
  TPoolImpl(int64_t channels, int64_t stride);
  /// x: (N*T, C, H, W) with T a multiple of stride -> (N*T/stride, C, H, W).
  torch::Tensor forward(const torch::Tensor& x);
  int64_t stride() const { return stride_; }

  torch::nn::Conv2d conv{nullptr};

 private:
  int64_t channels_;
  int64_t stride_;
};
TORCH_MODULE(TPool);

/// Temporal upsampling: 1x1 conv C -> sC, no bias; output frame t*s + k takes channels [kC, (k+1)C).
class TGrowImpl : public torch::nn::Module {
 public:
  TGrowImpl(int64_t channels, int64_t stride);
  /// x: (B, C, H, W) -> (B*stride, C, H, W).
  torch::Tensor forward(const torch::Tensor& x);
  int64_t stride() const { return stride_; }
  int64_t channels() const { return channels_; }

  torch::nn::Conv2d conv{nullptr};

 private:
  int64_t channels_;
  int64_t stride_;
};
TORCH_MODULE(TGrow);

/// Nearest-neighbour spatial upsampling by an integer factor (1: identity).
class UpsampleImpl : public torch::nn::Module {
 public:
  explicit UpsampleImpl(int64_t scale) : scale_(scale) {}
  torch::Tensor forward(const torch::Tensor& x);
  int64_t scale() const { return scale_; }

 private:
  int64_t scale_;
};
TORCH_MODULE(Upsample);

/// One entry of a block list (encoder or decoder), for running it in parallel or streaming mode.
struct TAEHVLayer {
  enum class Kind { kConv, kReLU, kClamp, kMemBlock, kSuperMemBlock, kTPool, kTGrow, kUpsample, kPixelShuffle };
  Kind kind = Kind::kReLU;
  torch::nn::Conv2d conv{nullptr};
  MemBlock memblock{nullptr};
  SuperMemBlock supermemblock{nullptr};
  TPool tpool{nullptr};
  TGrow tgrow{nullptr};
  Upsample upsample{nullptr};
  torch::nn::PixelShuffle pixelshuffle{nullptr};
};

class TAEHVImpl : public torch::nn::Module {
 public:
  explicit TAEHVImpl(TAEHVOptions options = {});

  /// Frames NTCHW in [0, 1] -> latents NTCHW (upstream encode_video). T is padded with copies of the last frame
  /// to a multiple of timeDownscale() (taeh3: H3's 17-frame chunks, see ARCHITECTURE.md).
  /// streaming=true runs one frame at a time (O(1) memory in time) and gives the same numbers.
  torch::Tensor encodeVideo(const torch::Tensor& frames, bool streaming = false);

  /// Latents NTCHW -> frames NTCHW in [0, 1] (upstream decode_video); L latents give decodedFrames(L) frames:
  /// timeUpscale() * L - framesToTrim() (the first frames are dropped; taecvx keeps them for even L; taeh3 trims
  /// per 20-frame chunk).
  torch::Tensor decodeVideo(const torch::Tensor& latents, bool streaming = false);

  int64_t encodedLatents(int64_t frames) const;  ///< latents encodeVideo makes of `frames` frames
  int64_t decodedFrames(int64_t latents) const;  ///< frames decodeVideo makes of `latents` latents

  const TAEHVOptions& options() const { return options_; }
  int64_t timeDownscale() const;  ///< 2^(stride-2 TPools) = 4 by default
  int64_t timeUpscale() const;    ///< 2^(stride-2 TGrows)
  int64_t framesToTrim() const;   ///< timeUpscale() - 1

  /// Patch size 1 -> identity; else pixel_unshuffle of NTCHW frames (upstream preprocess_input_frames).
  torch::Tensor preprocessFrames(const torch::Tensor& frames) const;
  /// pixel_shuffle by the patch size, then clamp to [0, 1] (upstream postprocess_output_frames).
  torch::Tensor postprocessFrames(const torch::Tensor& x) const;

  /// Parallel mode on channels_last (NHWC) activations: same math, no layout reorders around each oneDNN
  /// convolution; faster on the CPU under bf16 autocast (the trainer turns it on there; fp32 measured level).
  /// Off by default; streaming mode runs channels_last always (FrameStream).
  void setChannelsLast(bool on) { channels_last_ = on; }

  /// True for the weight of a decoder TGrow ("decoder.N.conv.weight"), the tensors the loader may patch.
  bool isTGrowWeight(const std::string& name) const;

  /// The layers of encoder / decoder in order, typed (the Sequentials hold the same modules).
  const std::vector<TAEHVLayer>& encoderLayers() const { return encoder_layers_; }
  const std::vector<TAEHVLayer>& decoderLayers() const { return decoder_layers_; }

  torch::nn::Sequential encoder{nullptr};
  torch::nn::Sequential decoder{nullptr};

 private:
  int64_t imageChannels() const;  // 3 * patch_size^2
  void buildBaseDecoder();
  void buildSuperDecoder();
  bool skipsTrim(int64_t latents) const;  // taecvx with an even latent count
  torch::Tensor runEncoder(const torch::Tensor& x, bool streaming);

  TAEHVOptions options_;
  bool channels_last_ = false;
  std::vector<TAEHVLayer> encoder_layers_;
  std::vector<TAEHVLayer> decoder_layers_;
};
TORCH_MODULE(TAEHV);

/// Runs a block list one frame at a time, depth first, keeping one memory slot per layer (O(1) memory in time):
/// a MemBlock remembers its previous input, a TPool buffers inputs until it has `stride`, a TGrow emits its
/// frames in time order. The work queue is upstream's (apply_model_with_memblocks_sequential_single_step): step()
/// does only the work that makes the next output frame. Works in channels_last memory inside; the frames it returns
/// are contiguous. Holds a reference to the model's layers: the model must outlive it. Not thread-safe.
class FrameStream {
 public:
  explicit FrameStream(const std::vector<TAEHVLayer>& layers);
  /// Queues one frame (N, C, H, W) behind those already queued; no work is done yet.
  void push(torch::Tensor frame);
  /// Works through the queue until one output frame (N, C', H', W') is made (returned) or the queue is empty
  /// (returns an undefined tensor: more input needed).
  torch::Tensor step();
  /// Every output frame the queued input completes, in order (step() until empty).
  std::vector<torch::Tensor> drain();
  /// Forgets the queue and every layer's memory: the next frame starts a new clip.
  void reset();

 private:
  struct WorkItem {
    torch::Tensor x;
    std::size_t layer;  // index of the layer x goes into; layers_.size() = finished output
  };
  const std::vector<TAEHVLayer>& layers_;
  std::deque<WorkItem> queue_;
  std::vector<torch::Tensor> memory_;               // per MemBlock: its previous input
  std::vector<std::vector<torch::Tensor>> pooled_;  // per TPool: inputs waiting for a full group
};

/// Forward convolution FLOPs (2 per multiply-add) run by all TAEHV models of the process so far; convolutions
/// are over 95% of the model's work. A training step costs about 3x its forward FLOPs (the first convolution's
/// input gradient is skipped, so slightly less). Used by `taehv-train bench` for achieved FLOP/s and MFU.
int64_t convFlops();

/// Winograd 3x3 convolutions for fp32 on the CPU in place of oneDNN's direct ones, for every TAEHV model of the
/// process; off by default. They run only where they were measured faster: fp32 outside autocast, NCHW, 3x3 stride
/// 1, at least 16 channels in and out, one intra-op thread; forward and input gradient as NNPACK's (built into
/// libtorch) on frames of at least 16x16, the weight gradient as F(3x3, 4x4) transforms where the frame's sides are
/// multiples of 4 (details in layers.cc). Rounding differs from the direct convolution's by ~1e-5 relative.
/// setCpuWinograd(true) throws where cpuWinogradAvailable() is false.
void setCpuWinograd(bool on);
bool cpuWinograd();
/// Whether this libtorch has NNPACK and NNPACK runs on this CPU (AVX2 and FMA).
bool cpuWinogradAvailable();
/// The choice of "auto": available and no AVX-512 on this CPU. Measured on AVX2 (Zen 3): the fp32 step ~8% faster;
/// against oneDNN's AVX-512 kernels (twice as wide) it was not measured, so those keep the direct convolutions.
bool cpuWinogradAuto();

}  // namespace taehv
