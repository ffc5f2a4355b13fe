// Training clips: a built-in synthetic source (moving shapes and textures, deterministic by seed, no files)
// and file sources (video files through taehv::video's decoder, folders of PNG/JPEG frames), the deterministic global
// sample order that gives each rank a disjoint shard per epoch, and a background prefetching loader.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

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
/// by name). Teacher latents for an item X are read from "X.latents.safetensors" (tensor "latents", [L, C, h, w], computed by the full VAE from the item's
/// first 4L frames, stride 1, centre square crop resized to the training size); with latents the clip is
/// cut exactly that way. Throws DataError when the path holds no items.
std::unique_ptr<ClipSource> makeFileSource(const std::string& path);

/// The source data.source names ("synthetic" or a path).
std::unique_ptr<ClipSource> makeSource(const DataConfig& data, uint64_t seed);

/// The evaluation clips of a config (eval.clips, eval.size, eval.frames; data.stride_max and data.crop_min as in
/// training; whole scenes at the eval size, whatever data.synthetic_scene_size is). Synthetic source: held out.
/// Clip k is scene data.synthetic_clips + k of the training source (same seed), an index the training order never
/// reaches (it draws from [0, data.synthetic_clips)), cut with stride/crop/time draws of its own. File source:
/// there is no split, so the clips are the training items cut with other draws (heldOut() false).
class EvalClips {
 public:
  /// `seed`: train.seed, the seed the training source is made from.
  EvalClips(const Config& cfg, uint64_t seed);
  int64_t size() const { return clips_; }
  bool heldOut() const { return held_out_; }
  /// Clip k (0 <= k < size()). Deterministic in (config, seed, k). Throws DataError when its item is unreadable.
  Clip load(int64_t k) const;
  /// The source item clip k is cut from (for the synthetic source: data.synthetic_clips + k).
  int64_t item(int64_t k) const;

 private:
  std::unique_ptr<ClipSource> source_;
  ClipRequest request_;
  uint64_t seed_;
  int64_t clips_;
  int64_t first_ = 0;
  bool held_out_ = false;
};

/// The global sample order. Epoch e is a permutation of [0, dataset_size) drawn from (seed, e); global
/// position p reads item order(p / N)[p % N]. The position of sample j of rank r in micro-step a of
/// optimizer step s is base + ((s * A + a) * W + r) * B + j, so within an epoch the ranks read disjoint
/// shards, and W ranks with batch B see exactly what 1 rank with batch W * B sees.
class SampleOrder {
 public:
  SampleOrder(int64_t dataset_size, uint64_t seed);
  int64_t itemAt(int64_t position) const;
  int64_t datasetSize() const { return n_; }
  static int64_t position(int64_t base, int64_t step, int64_t micro, int64_t rank, int64_t j, int64_t accum,
                          int64_t world, int64_t batch) {
    return base + ((step * accum + micro) * world + rank) * batch + j;
  }
  /// Seed of the augmentation (stride, crop, synthetic content) of the sample at `position`.
  uint64_t sampleSeed(int64_t position) const;

 private:
  const std::vector<int64_t>& permutation(int64_t epoch) const;
  int64_t n_;
  uint64_t seed_;
  mutable std::mutex mutex_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_;
};

/// One micro-step's data for this rank.
struct Batch {
  torch::Tensor frames;   ///< [B, T, 3, S, S]
  torch::Tensor latents;  ///< [B, L, C, h, w] or undefined
  int64_t step = 0;
  int64_t micro = 0;
};

/// Decodes this rank's batches in order on a background thread, `prefetch` batches ahead.
/// An unreadable item is skipped with a warning (once per item) and replaced by the next readable item in the
/// dataset, deterministically; skipped() counts the distinct items skipped.
class Loader {
 public:
  struct Layout {
    int64_t base = 0;        ///< global position of the first sample of `first_step`
    int64_t first_step = 0;  ///< steps are counted from here
    int64_t accum = 1, world = 1, rank = 0, batch = 1;
  };
  Loader(std::shared_ptr<const ClipSource> source, const DataConfig& data, uint64_t seed, Layout layout,
         int64_t prefetch);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  /// The next micro-batch (step-major, micro-minor). Rethrows a fatal data error (no readable item at all).
  Batch next();
  int64_t skipped() const { return skipped_count_.load(); }
  /// The items (dataset indices) this rank has read so far, in order (for tests of sharding).
  std::vector<int64_t> itemsRead() const;

 private:
  void run();
  Clip loadWithSkip(int64_t position);

  std::shared_ptr<const ClipSource> source_;
  DataConfig data_;
  SampleOrder order_;
  Layout layout_;
  size_t prefetch_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::set<int64_t> bad_;
  std::vector<int64_t> read_;
  std::atomic<int64_t> skipped_count_{0};
  std::thread thread_;
};

}  // namespace taehv::train
