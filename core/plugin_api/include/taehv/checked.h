// A value or one line saying what is wrong: the one result shape of taehv-run, its libraries and its plugins
// (installed beside taehv/plugin_api.h; std only, header-only). A plugin's plan crosses the plugin ABI in it
// (taehv::PlanResult = Checked<NodePlan>), so its layout is part of the ABI: the message, then the value.
#pragma once

#include <string>

namespace taehv {

/// `error` is empty on success, else one line naming what is wrong and how to fix it; `value` is meaningful
/// only on success.
template <typename T>
struct Checked {
  std::string error;
  T value{};
  bool ok() const { return error.empty(); }
};

}  // namespace taehv
