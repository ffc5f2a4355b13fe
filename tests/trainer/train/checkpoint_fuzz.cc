// libFuzzer target: any bytes as a checkpoint's manifest.json or state.json give a parsed value or CheckpointError;
// never a crash, another exception, undefined behaviour (UBSan) or a manifest entry naming a path.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "taehv/train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto manifest = taehv::train::parseCheckpointManifest(text);
    if (manifest.step < 0) std::abort();
    for (const auto& f : manifest.files) {
      if (f.name.empty() || f.name.find('/') != std::string::npos || f.name == "..") std::abort();
    }
  } catch (const taehv::train::CheckpointError&) {
  }
  try {
    const auto state = taehv::train::parseCheckpointState(text);
    if (state.step < 0 || state.samples_consumed < 0 || state.data_skipped < 0) std::abort();
  } catch (const taehv::train::CheckpointError&) {
  }
  return 0;
}
