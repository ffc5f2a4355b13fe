// The named TAEHV variants, one row per upstream checkpoint (madebyollin/taehv), without libtorch: the trainer's
// configuration checks `model.variant` against this table before any model is built, and the CLI maps an official
// weights file name (taew2_2_super.safetensors, taeltx2_3.pth, ...) to its row as upstream's constructor does.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace taehv {

/// The decoder network: the base one (Clamp, 3x3 MemBlocks, nearest-neighbour upsampling) or upstream's "super"
/// one (7x7 depthwise SuperMemBlocks, PixelShuffle upsampling, about twice the parameters).
enum class DecoderArch { kBase, kSuper };

/// How a variant's frames are grouped in time around the networks (upstream's is_cogvideox / is_h3 flags).
enum class TimeLayout {
  kPlain,      ///< pad T to a multiple of t_downscale; decode drops the first frames_to_trim frames
  kCogVideoX,  ///< taecvx: decode_video keeps every frame when the latent count is even; streaming never trims
  kH3,         ///< taeh3: MiniMax H3's 17-frame chunks on encode and 20-frame chunks on decode
};

struct VariantSpec {
  std::string name;
  int64_t patch_size;
  int64_t latent_channels;
  std::array<bool, 3> encoder_time_downscale;
  std::array<bool, 3> decoder_time_upscale;
  DecoderArch decoder;
  TimeLayout time_layout;

  /// Input frames per step of the time grid: a clip of a multiple of this many frames encodes without padding
  /// and decodes to no more frames than it had (t_downscale; 17 for H3's chunks).
  int64_t clipFrameMultiple() const;
  /// Spatial size multiple of the frames: 8 x patch_size.
  int64_t sizeMultiple() const { return 8 * patch_size; }
};

/// Every variant in upstream's order: taehv, taew2_1, taecvx, taeos1_3, taehv1_5, taew2_2, taehv1_5_super,
/// taew2_2_super, taeltx_2, taeltx2_3, taeh3.
const std::vector<VariantSpec>& variantSpecs();

/// The row named `name`, or nullptr.
const VariantSpec* findVariant(const std::string& name);

/// "taehv, taew2_1, ..." for messages.
std::string variantList();
/// "unknown TAEHV variant 'X' (did you mean 'Y'?); valid: ..." for a name findVariant() does not know.
std::string unknownVariantMessage(const std::string& name);

/// The variant an official checkpoint file name stands for: the longest variant name that starts the file's base
/// name and is followed by its end, '.', '_' or '-' ("taew2_2_super.f16.safetensors" -> taew2_2_super,
/// "/w/taeltx2_3.pth" -> taeltx2_3); "" when none does.
std::string variantForCheckpoint(const std::string& path);

}  // namespace taehv
