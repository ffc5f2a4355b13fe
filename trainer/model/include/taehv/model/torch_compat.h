// The one place that knows how libtorch 1.x and 2.x differ outside c10d (the bench and the trainer both use it;
// c10d's differences live in trainer/train/src/c10d_compat.h).
//  - autocast: 2.4 replaced the per-device setters (set_enabled, set_cpu_enabled, set_autocast_gpu_dtype,
//    set_autocast_cpu_dtype) by set_autocast_enabled/set_autocast_dtype(device_type, ...). The old names stay as
//    deprecated wrappers that print a deprecation warning on every call and were announced for removal.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace taehv::compat {

/// Turns autocast of ops on `device` (kCPU or kCUDA) on, casting to `dtype`, or off, for this thread.
inline void setAutocast(c10::DeviceType device, bool on, at::ScalarType dtype = at::kBFloat16) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  if (on) at::autocast::set_autocast_dtype(device, dtype);
  at::autocast::set_autocast_enabled(device, on);
#else
  if (device == c10::DeviceType::CUDA) {
    if (on) at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(on);
  } else {
    if (on) at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::set_cpu_enabled(on);
  }
#endif
}

}  // namespace taehv::compat
