#include "taehv/model/cpu_tuning.h"

#include <cstdlib>  // a C library header first: it defines __GLIBC__ (without one this file compiled to a bare return)

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

}  // namespace taehv
