#include "taehv/model/cpu_tuning.h"

#include <ATen/cpu/Utils.h>

// __GLIBC__ is defined by <features.h>, which every C library header includes: without one before the test below,
// the test is false and tuneCpuAllocator() compiles to nothing.
#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace taehv {

void tuneCpuAllocator() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
#endif
}

bool cpuHasFlag(const char* name) {
  const auto caps = at::cpu::get_cpu_capabilities();
  const auto it = caps.find(name);
  return it != caps.end() && it->second.isBool() && it->second.toBool();
}

}  // namespace taehv
