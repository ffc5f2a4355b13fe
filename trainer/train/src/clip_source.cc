#include "taehv/train/clip_source.h"

namespace taehv::train {

std::unique_ptr<ClipSource> makeSource(const DataConfig& data, uint64_t seed) {
  if (data.source.kind() == SourceKind::kSynthetic) {
    return makeSyntheticSource(data.synthetic_clips, seed, syntheticScenes(data));
  }
  return makeFileSource(data.source);
}

}  // namespace taehv::train
