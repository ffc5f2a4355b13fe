// Process-wide CPU settings that make libtorch training steps cheaper on Linux/glibc without changing results, and
// what the CPU offers them.
#pragma once

namespace taehv {

/// Keeps freed tensor memory in the malloc heap for reuse instead of returning it to the kernel: glibc serves
/// large blocks (a 64x64 video batch's activations are tens of MB) with mmap/munmap, so every step page-faults
/// its activations in afresh (kernel zero-fill, ~10% of a CPU training step here). Sets M_MMAP_MAX = 0 and a
/// large M_TRIM_THRESHOLD. Peak RSS stays about the same; memory is not returned to the OS until exit.
/// Call once, early, from the main thread. No-op where glibc's mallopt is unavailable.
void tuneCpuAllocator();

/// Whether the CPU has the instruction-set flag `name` as libtorch's own kernels see it (cpuinfo's, through
/// at::cpu::get_cpu_capabilities: "avx512_f", "avx512_bf16", "amx_bf16", ...). An unknown name is false.
bool cpuHasFlag(const char* name);

}  // namespace taehv
