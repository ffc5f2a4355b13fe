// The evaluation's clips: held-out synthetic scenes, or a file source's items cut another way. eval_clips.cc.
#pragma once

#include <cstdint>
#include <memory>

#include "taehv/train/clip_source.h"
#include "taehv/train/config.h"

namespace taehv::train {

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

}  // namespace taehv::train
