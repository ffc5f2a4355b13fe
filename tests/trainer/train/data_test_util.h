// Helpers of the training data's tests: a temporary folder, a clip request, the loader's request for a sample.
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <string>

#include "taehv/train/clip_source.h"
#include "taehv/train/config.h"

namespace taehv::testing {

/// A fresh folder under /tmp (the test removes it).
inline std::string tempDir() {
  char tmpl[] = "/tmp/taehv-data-XXXXXX";
  return mkdtemp(tmpl);
}

/// A request for `frames` frames of `size` pixels, the other draws at their defaults.
inline train::ClipRequest request(uint64_t seed, int64_t frames = 4, int64_t size = 32) {
  train::ClipRequest r;
  r.frames = frames;
  r.size = size;
  r.seed = seed;
  return r;
}

/// The request the loader makes for a sample of `data` whose augmentation seed is `seed` (SampleOrder::sampleSeed).
inline train::ClipRequest sampleRequest(const train::DataConfig& data, uint64_t seed) {
  return train::ClipRequest{data.frames, data.size, data.stride_max, data.crop_min, seed, data.synthetic_scene_size};
}

}  // namespace taehv::testing
