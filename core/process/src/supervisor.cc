// Bootstrap placeholder so the tree builds; replaced by the real supervisor (core issue).
#include "taehv/process/supervisor.h"

#include <cstdio>

namespace taehv::process {
SupervisorResult supervise(const std::function<std::vector<ChildSpec>(int)>&, const SupervisorOptions&) {
  std::fprintf(stderr, "taehv-run: supervisor missing from this build\n");
  return SupervisorResult{1, std::nullopt, 0, 0};
}
}  // namespace taehv::process
