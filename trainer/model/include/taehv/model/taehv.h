// TAEHV, the Tiny AutoEncoder for Hunyuan Video, in libtorch. Reproduces the upstream reference
// (madebyollin/taehv, MIT); the architecture is written out in ../shared/taehv-reference/ARCHITECTURE.md.
// Parameter names are the upstream state_dict keys ("encoder.0.weight", "decoder.3.conv.0.bias", ...).
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace taehv {

struct TAEHVOptions {
  int64_t patch_size = 1;        ///< 1: taehv, taew2_1, taecvx, taeos1_3; 2: taehv1_5, taew2_2
  int64_t latent_channels = 16;  ///< 16, or 32 (taehv1_5), 48 (taew2_2)
  std::array<bool, 3> encoder_time_downscale{true, true, false};
  std::array<bool, 3> decoder_time_upscale{false, true, true};
  std::array<bool, 3> decoder_space_upscale{true, true, true};

  /// Options of a named variant: taehv, taew2_1, taecvx, taeos1_3, taehv1_5, taew2_2.
  /// Throws std::invalid_argument naming the valid variants otherwise.
  static TAEHVOptions forVariant(const std::string& name);
  static std::vector<std::string> variantNames();
};

class TAEHVImpl : public torch::nn::Module {
 public:
  explicit TAEHVImpl(TAEHVOptions options = {});

  /// Frames NTCHW in [0, 1] -> latents NTCHW. T is padded with copies of the last frame to a multiple of 4.
  /// streaming=true runs one frame at a time (O(1) memory in time) and gives the same numbers.
  torch::Tensor encodeVideo(const torch::Tensor& frames, bool streaming = false);

  /// Latents NTCHW -> frames NTCHW in [0, 1]; L latents give 4L - 3 frames (the first 3 are dropped).
  torch::Tensor decodeVideo(const torch::Tensor& latents, bool streaming = false);

  const TAEHVOptions& options() const { return options_; }
  int64_t timeDownscale() const;  ///< 2^(stride-2 TPools) = 4 by default
  int64_t timeUpscale() const;    ///< 2^(stride-2 TGrows)
  int64_t framesToTrim() const;   ///< timeUpscale() - 1

  torch::nn::Sequential encoder{nullptr};
  torch::nn::Sequential decoder{nullptr};

 private:
  TAEHVOptions options_;
};
TORCH_MODULE(TAEHV);

}  // namespace taehv
