// Where training clips come from: a built-in synthetic source (moving shapes and textures, deterministic by seed, no
// files) and file sources (video files through taehv::video's decoder, folders of PNG/JPEG frames), behind one
// ClipSource interface. synthetic_source.cc, file_source.cc; makeSource in clip_source.cc.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "taehv/train/config.h"

namespace taehv::train {

/// An item that cannot be read (missing, corrupt, too short); the loader skips it and counts it.
struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// One training clip.
struct Clip {
  torch::Tensor frames;   ///< [T, 3, S, S] float in [0, 1]
  torch::Tensor latents;  ///< [L, C, S/8, S/8] teacher latents, or undefined
};

/// How one clip is cut from its item: stride, crop and (for videos) the start; all drawn from `seed`.
struct ClipRequest {
  int64_t frames = 12;
  int64_t size = 64;
  int64_t stride_max = 5;
  double crop_min = 0.6;
  uint64_t seed = 0;
  /// Synthetic source: pixels across the whole scene at crop 1 (data.synthetic_scene_size); 0 = size. Above
  /// size, the clip is a size x size window of the scene rendered at that many pixels: the shapes keep their
  /// pixel size and the window moves over the scene. File sources ignore it.
  int64_t scene_size = 0;
};

/// A fixed list of items from which clips are cut.
class ClipSource {
 public:
  virtual ~ClipSource() = default;
  virtual int64_t size() const = 0;
  /// Cuts a clip of item `index` (0 <= index < size()) as `request` says. Deterministic in (index, request).
  /// Throws DataError when the item cannot be read.
  virtual Clip load(int64_t index, const ClipRequest& request) const = 0;
  virtual std::string name(int64_t index) const = 0;
  /// True when every item comes with teacher latents (distillation possible).
  virtual bool hasLatents() const { return false; }
};

/// What the synthetic scenes hold (data.synthetic_*). The defaults are the upstream recipe's scenes.
struct SyntheticScenes {
  /// false: smooth scenes only (gradient and low-frequency backgrounds, solid-colour shapes), with the same
  /// layout and motion as true; learnable in a few hundred steps (data.synthetic_texture).
  bool texture = true;
  int64_t max_shapes = 5;        ///< a scene draws 2-5 shapes and keeps its first max_shapes (1-5)
  double shape_scale = 1;        ///< radius multiplier of every shape (radius 0.06-0.22 of the view at 1)
  bool flat_background = false;  ///< one colour behind the shapes
};
SyntheticScenes syntheticScenes(const DataConfig& data);

/// Procedural clips: a background plus 2-5 moving, rotating shapes (discs, boxes, rings); `clips` items per
/// epoch. Every option of `scenes` leaves the random draws as they are: a scene with fewer, larger shapes or a
/// flat background is the default scene of the same number with that changed, nothing else.
std::unique_ptr<ClipSource> makeSyntheticSource(int64_t clips, uint64_t seed, const SyntheticScenes& scenes = {});

/// Items under `path`: a video file; a folder of frames; or a folder holding videos (names taehv::video's
/// isVideoFileName takes: .mp4 .mkv .webm .mov .avi .ts ...) and/or sub-folders of frames (.png .jpg .jpeg, sorted
/// by name). Teacher latents for an item X are read from "X.latents.safetensors" (tensor "latents", [L, C, h, w],
/// computed by the full VAE from the item's first 4L frames, stride 1, centre square crop resized to the training
/// size); with latents the clip is cut exactly that way. Throws DataError when the path holds no items.
std::unique_ptr<ClipSource> makeFileSource(const std::string& path);

/// The source data.source names ("synthetic" or a path).
std::unique_ptr<ClipSource> makeSource(const DataConfig& data, uint64_t seed);

}  // namespace taehv::train
