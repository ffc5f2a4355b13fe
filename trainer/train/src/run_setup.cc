#include "run_setup.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "taehv/model/cpu_tuning.h"
#include "taehv/model/safetensors.h"
#include "taehv/model/taehv.h"

namespace taehv::train {
namespace {

// MemAvailable of /proc/meminfo in bytes; 0 when unknown.
uint64_t availableMemory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib << 10;
  }
  return 0;
}

}  // namespace

/// Random init for training from scratch. libtorch's default conv init (kaiming-uniform, a = sqrt(5)) shrinks
/// the signal about 2.5x per conv + ReLU; through TAEHV's ~12 plain convs the output starts as a constant and
/// reconstruction training stalls there (measured: flat grey previews, PSNR stuck at ~13 dB for 100 steps).
/// So: variance-preserving normal weights (He gain for convs followed by a ReLU, gain 1 for the others: TPool,
/// TGrow, strided and output convs), zero biases, each MemBlock's last conv scaled by 0.1 so the residual
/// branches start small, the final decoder conv scaled by `output_scale` with its bias at 0.5 (mid-grey, as
/// upstream; model.init_output_scale).
void initForTraining(TAEHV& model, double output_scale) {
  torch::NoGradGuard no_grad;
  std::string last_bias;
  for (auto& item : model->named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor& p = item.value();
    if (name.ends_with(".bias")) {
      p.zero_();
      if (name.starts_with("decoder.")) last_bias = name;
      continue;
    }
    if (p.dim() != 4) continue;
    const bool relu_follows = name.ends_with(".conv.0.weight") || name.ends_with(".conv.2.weight") ||
                              name == "encoder.0.weight" || name == "decoder.1.weight" || name == "decoder.20.weight";
    if (relu_follows) {
      torch::nn::init::kaiming_normal_(p, 0.0, torch::kFanIn, torch::kReLU);
    } else {
      torch::nn::init::kaiming_normal_(p, 0.0, torch::kFanIn, torch::kLinear);
    }
    if (name.ends_with(".conv.4.weight")) p.mul_(0.1);
  }
  if (!last_bias.empty()) {
    model->named_parameters()[last_bias].fill_(0.5);
    const std::string last_weight = last_bias.substr(0, last_bias.size() - 5) + ".weight";
    model->named_parameters()[last_weight].mul_(output_scale);
  }
}

TAEHV makeModel(const Config& cfg, const torch::Device& device) {
  torch::manual_seed(static_cast<uint64_t>(cfg.train.seed));
  TAEHV model(TAEHVOptions::forVariant(cfg.model.variant));
  if (!cfg.model.init.empty()) {
    loadWeights(*model, cfg.model.init);
  } else {
    initForTraining(model, cfg.model.init_output_scale);
  }
  model->to(device);
  return model;
}

torch::Device pickDevice(const Config& cfg, const DistEnv& env) {
  // train.device may be cuda:N (explicit, or TAEHV_DEVICE from the launcher via applyLauncherEnvironment).
  const std::string& d = cfg.train.device;
  if (d.rfind("cuda", 0) == 0 || (d == "auto" && torch::cuda::is_available())) {
    if (!torch::cuda::is_available()) {
#if defined(TAEHV_CUDA_VERSION)
      throw ConfigError("train.device=" + d + " but no GPU is visible (torch::cuda::is_available() is false: no "
                        "NVIDIA driver or device, or CUDA_VISIBLE_DEVICES hides them all); use train.device=cpu");
#else
      throw ConfigError("train.device=" + d + " but this taehv-train is built against a CPU-only libtorch ("
                        "taehv-train --version; scripts/build-cuda.sh builds the CUDA one); use train.device=cpu");
#endif
    }
    const auto count = static_cast<int>(torch::cuda::device_count());
    if (d.size() > 5) {
      const int index = std::stoi(d.substr(5));
      if (index >= count) {
        throw ConfigError("train.device=" + d + " but only " + std::to_string(count) + " CUDA device(s) are visible");
      }
      return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
    }
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank % std::max(1, count)));
  }
  return torch::Device(torch::kCPU);
}

bool bf16Autocast(const Config& cfg, const torch::Device& device) {
  if (device.is_cuda()) return cfg.train.bf16;
  if (cfg.train.cpu_precision != CpuPrecision::kAuto) return cfg.train.cpu_precision == CpuPrecision::kBf16;
  return cpuHasFlag("avx512_bf16") || cpuHasFlag("amx_bf16");
}

bool cpuWinogradConv(const Config& cfg, const torch::Device& device) {
  if (!device.is_cpu() || cfg.train.cpu_conv == CpuConv::kDirect) return false;
  if (cfg.train.cpu_conv == CpuConv::kAuto) return cpuWinogradAuto();
  if (!cpuWinogradAvailable()) {
    throw ConfigError("train.cpu_conv=winograd but NNPACK cannot run here (this libtorch is built without it, or the "
                      "CPU lacks AVX2 and FMA); use train.cpu_conv=auto or direct");
  }
  return true;
}

void setThreads(const Config& cfg, const DistEnv& env) {
  int threads = static_cast<int>(cfg.train.threads);
  if (threads <= 0 && env.omp_num_threads > 0) threads = env.omp_num_threads;  // set per worker by taehv-run / torchrun
  if (threads <= 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(1, cores / std::max(1, env.local_world_size));
  }
  torch::set_num_threads(threads);
}

// Before anything heavy: a CPU step that cannot fit is refused with the figures, rather than allocated until
// libtorch gives up (or the kernel's OOM killer ends a rank). A GPU's memory is the device's, checked by libtorch.
void checkCpuMemory(const Config& cfg, const DistEnv& env) {
  if (cfg.train.device != "cpu" && !(cfg.train.device == "auto" && !torch::cuda::is_available())) return;
  const uint64_t available = availableMemory();
  if (available == 0) return;
  const std::string problem = cfg.memoryCheck(available, env.local_world_size, env.world_size);
  if (!problem.empty()) throw ConfigError(problem);
}

std::vector<std::pair<std::string, torch::Tensor>> namedParams(TAEHV& model) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : model->named_parameters()) out.emplace_back(item.key(), item.value());
  return out;
}

}  // namespace taehv::train
