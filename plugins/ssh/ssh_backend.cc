// Bootstrap: loads, recognises nothing. Platform behaviour comes with this backend's own issue.
#include "taehv/plugin_api.h"

namespace {
class Backend final : public taehv::Backend {
 public:
  taehv::Detection detect(const taehv::HostContext&) const override { return {}; }
  taehv::PlanResult plan(const taehv::HostContext&, const taehv::PlanRequest&) const override {
    return {"the ssh backend has no platform mapping in this build", {}};
  }
};
}  // namespace

TAEHV_DEFINE_PLUGIN(Backend, "ssh", "0.1.0", "ssh backend (bootstrap)")
