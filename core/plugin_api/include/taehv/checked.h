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

/// Checked<void>: the result of a step that yields no value (a check, a write, an update of its argument): `error`
/// empty on success, else one line as above. Added beside Checked<T>, whose layout it leaves as it is.
template <>
struct Checked<void> {
  std::string error;
  bool ok() const { return error.empty(); }
};

/// The value-less result. `return {};` succeeds; `return {message};` fails, and so does `return {status.error};`
/// from a function returning any Checked<T> (aggregate initialization: the value stays default).
using Status = Checked<void>;

}  // namespace taehv
