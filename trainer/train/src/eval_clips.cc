#include "taehv/train/eval_clips.h"

#include "random.h"

namespace taehv::train {

EvalClips::EvalClips(const Config& cfg, uint64_t seed)
    : request_{cfg.eval.frames > 0 ? cfg.eval.frames : cfg.data.frames,
               cfg.eval.size > 0 ? cfg.eval.size : cfg.data.size, cfg.data.stride_max, cfg.data.crop_min, 0,
               0},  // scene size 0: whole scenes at the eval size, not data.synthetic_scene_size
      seed_(splitmix(seed ^ 0x6576616c756174ull)),  // "evaluat": draws unrelated to any training sample's
      clips_(cfg.eval.clips) {
  if (cfg.data.source.kind() == SourceKind::kSynthetic) {
    // One more source of the same seed, longer by the eval clips: items [synthetic_clips, +clips) are scenes
    // the training source (synthetic_clips items) can never return.
    source_ = makeSyntheticSource(cfg.data.synthetic_clips + clips_, seed, syntheticScenes(cfg.data));
    first_ = cfg.data.synthetic_clips;
    held_out_ = true;
  } else {
    source_ = makeFileSource(cfg.data.source);
  }
}

int64_t EvalClips::item(int64_t k) const {
  return held_out_ ? first_ + k : k % source_->size();
}

Clip EvalClips::load(int64_t k) const {
  ClipRequest req = request_;
  req.seed = splitmix(seed_ + static_cast<uint64_t>(k));
  return source_->load(item(k), req);
}

}  // namespace taehv::train
