// A fake libnvidia-ml for tests (see CMakeLists.txt: no GPU or NVIDIA driver exists on the test machines).
// Implements the NVML entry points NvmlGpuProbe calls, with NVML's C signatures; nothing else.
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {
struct FakeMemory {
  unsigned long long total, free, used;
};
int g_initialised = 0;

unsigned count() {
  const char* v = std::getenv("TAEHV_FAKE_NVML_GPUS");
  return v != nullptr ? static_cast<unsigned>(std::atoi(v)) : 8u;
}
}  // namespace

extern "C" {
__attribute__((visibility("default"))) int nvmlInit_v2() {
  if (std::getenv("TAEHV_FAKE_NVML_INIT_ERROR") != nullptr) return 9;  // NVML_ERROR_DRIVER_NOT_LOADED
  g_initialised = 1;
  return 0;
}
__attribute__((visibility("default"))) int nvmlShutdown() {
  g_initialised = 0;
  return 0;
}
__attribute__((visibility("default"))) const char* nvmlErrorString(int r) {
  return r == 9 ? "Driver Not Loaded" : "Unknown Error";
}
__attribute__((visibility("default"))) int nvmlSystemGetDriverVersion(char* buf, unsigned len) {
  std::snprintf(buf, len, "%s", "550.54.15");
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceGetCount_v2(unsigned* n) {
  if (!g_initialised) return 1;  // NVML_ERROR_UNINITIALIZED
  *n = count();
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** dev) {
  if (i >= count()) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *dev = reinterpret_cast<void*>(static_cast<unsigned long>(i) + 1);
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceGetName(void* /*dev*/, char* buf, unsigned len) {
  std::snprintf(buf, len, "%s", "NVIDIA H100 80GB HBM3");
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceGetUUID(void* dev, char* buf, unsigned len) {
  unsigned long i = reinterpret_cast<unsigned long>(dev) - 1;
  std::snprintf(buf, len, "GPU-%08lx-1111-2222-3333-444455556666", 0xabc00000ul + i);
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceGetMemoryInfo(void* /*dev*/, FakeMemory* m) {
  m->total = 80ull << 30;
  m->used = 0;
  m->free = m->total;
  return 0;
}
}
