// bf16 autocast over one scope (a forward pass and its loss): the training step's and `taehv-train bench`'s.
#pragma once

#include <ATen/autocast_mode.h>
#include <c10/core/DeviceType.h>

namespace taehv {

/// With on = true: ops on `device` run under bf16 autocast until the scope ends, also by an exception; then
/// autocast is off again and its cache of cast weights cleared (the next step's weights differ). With on = false
/// it does nothing (the fp32 step). Autocast is per thread: the scope covers this thread only.
class Bf16Autocast {
 public:
  Bf16Autocast(c10::DeviceType device, bool on) : device_(device), on_(on) {
    if (!on_) return;
    at::autocast::set_autocast_dtype(device_, at::kBFloat16);
    at::autocast::set_autocast_enabled(device_, true);
  }
  ~Bf16Autocast() {
    if (!on_) return;
    at::autocast::set_autocast_enabled(device_, false);
    at::autocast::clear_cache();
  }
  Bf16Autocast(const Bf16Autocast&) = delete;
  Bf16Autocast& operator=(const Bf16Autocast&) = delete;

 private:
  c10::DeviceType device_;
  bool on_;
};

}  // namespace taehv
