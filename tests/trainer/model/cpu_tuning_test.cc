// tuneCpuAllocator keeps a large tensor's memory in the malloc heap: freed and allocated again, it is not handed
// back to the kernel and page-faulted in afresh.
#include "taehv/model/cpu_tuning.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace taehv {
namespace {

#if defined(__GLIBC__)
TEST(CpuTuningTest, LargeTensorsComeFromTheHeapNotFromMmap) {
  tuneCpuAllocator();
  // 64 MB: glibc's default serves it with mmap (its threshold is at most 32 MB) and unmaps it when freed.
  const std::size_t mapped_before = mallinfo2().hblkhd;
  {
    const torch::Tensor big = torch::ones({16 << 20});
    EXPECT_EQ(mallinfo2().hblkhd, mapped_before) << "the 64 MB tensor was mmapped: M_MMAP_MAX is not 0";
    EXPECT_EQ(big.sum().item<double>(), 16 << 20);
  }
  const std::size_t heap_free = mallinfo2().fordblks;
  EXPECT_GE(heap_free, std::size_t{64} << 20) << "the freed 64 MB went back to the kernel: M_TRIM_THRESHOLD too low";
}
#endif

}  // namespace
}  // namespace taehv
