// The weight gradient of each 3x3 stride-1 convolution shape of the main job's step (4 clips x 12 frames of 32x32,
// taehv), oneDNN's direct kernels (libtorch's convolution_backward) against the F(3x3, 4x4) Winograd transforms of
// trainer/model/src/winograd_grad.h, one thread, the trainer's allocator settings; medians of 9 runs after one.
// Not a test: build/bench/winograd_grad_bench [RUNS]. Figures in bench/model/RESULTS.md.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <vector>

#include "taehv/model/cpu_tuning.h"
#include "winograd_grad.h"

namespace {

struct Shape {
  int64_t calls, n, ci, h, w, co;  ///< calls: how many times a step runs it
};

template <class F>
double medianMs(F&& f, int runs) {
  f();
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  // One OpenMP thread from the start, as taehv-run gives each worker: set_num_threads(1) after the runtime started
  // with 2 left oneDNN's direct kernels ~2x slower here.
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    setenv("OMP_NUM_THREADS", "1", 1);
    execv("/proc/self/exe", argv);
  }
  const int runs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 9;
  torch::set_num_threads(1);
  taehv::tuneCpuAllocator();
  const std::vector<Shape> shapes = {
      {12, 24, 64, 16, 16, 64}, {7, 24, 128, 16, 16, 64}, {1, 48, 64, 32, 32, 64}, {6, 12, 64, 8, 8, 64},
      {6, 12, 64, 4, 4, 64},    {6, 12, 256, 4, 4, 256},  {6, 12, 128, 8, 8, 128}, {3, 12, 128, 8, 8, 64},
      {3, 12, 128, 4, 4, 64},   {3, 12, 512, 4, 4, 256},  {4, 12, 256, 8, 8, 128}, {1, 12, 64, 4, 4, 16},
      {1, 12, 16, 4, 4, 256},   {1, 48, 3, 32, 32, 64},   {1, 48, 64, 32, 32, 3}};
  std::printf("%-5s %-22s %10s %10s %8s %12s\n", "calls", "N x Ci x H x W -> Co", "direct ms", "winograd ms", "ratio",
              "direct GF/s");
  double direct_total = 0, winograd_total = 0;
  for (const Shape& s : shapes) {
    const torch::Tensor x = torch::randn({s.n, s.ci, s.h, s.w});
    const torch::Tensor gy = torch::randn({s.n, s.co, s.h, s.w});
    const torch::Tensor w = torch::zeros({s.co, s.ci, 3, 3});
    const double direct = medianMs(
        [&] {
          return at::convolution_backward(gy, x, w, std::nullopt, {1, 1}, {1, 1}, {1, 1}, false, {0, 0}, 1,
                                          {false, true, false});
        },
        runs);
    const double winograd = medianMs([&] { return taehv::detail::winogradWeightGrad(x, gy); }, runs);
    direct_total += direct * static_cast<double>(s.calls);
    winograd_total += winograd * static_cast<double>(s.calls);
    const double gflop = 2.0 * static_cast<double>(s.n * s.ci * s.h * s.w * s.co * 9) / 1e9;
    char name[64];
    std::snprintf(name, sizeof name, "%ldx%ldx%ldx%ld->%ld", static_cast<long>(s.n), static_cast<long>(s.ci),
                  static_cast<long>(s.h), static_cast<long>(s.w), static_cast<long>(s.co));
    std::printf("%-5ld %-22s %10.2f %10.2f %7.2fx %12.1f\n", static_cast<long>(s.calls), name, direct, winograd,
                direct / winograd, gflop / direct * 1e3);
  }
  std::printf("a step's weight gradients (shapes x calls): direct %.1f ms, winograd %.1f ms (%.2fx)\n", direct_total,
              winograd_total, direct_total / winograd_total);
  return 0;
}
