// `taehv-train bench`: times training steps of the model alone (no data loading, no process group), the figure
// bench/model compares with PyTorch's own loop.
#include <sys/resource.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <algorithm>
#include <chrono>

#include "command_line.h"
#include "taehv/log.h"
#include "taehv/model/autocast.h"
#include "taehv/model/commands.h"
#include "taehv/model/cpu_tuning.h"
#include "taehv/model/fused_adamw.h"
#include "taehv/model/slice_backward.h"
#include "taehv/model/taehv.h"
#include "taehv/parse.h"

namespace taehv {
namespace {

const char* kBenchUsage =
    "usage: taehv-train bench --variant V --batch B --frames T --size S --steps N [--warmup W] [--threads K]\n"
    "                         [--device cpu|cuda] [--precision fp32|bf16] [--optimizer fused|torch]\n"
    "                         [--allocator tuned|default] [--memory-format contiguous|channels_last]\n"
    "                         [--profile TRACE.json] [--peak-tflops P] [--slices auto|N]\n"
    "  times training steps (MSE of decode(encode(x)) vs the aligned input frames, backward, AdamW).\n"
    "  --slices: on CPU in fp32, the batch runs as N slices on N threads of K/N intra-op threads each, as\n"
    "  taehv-train does (train.slices); auto = min(K, B); 1 = one pass with K intra-op threads per op.\n";

}  // namespace

using namespace cli;  // NOLINT: the commands' shared parts

int benchCommand(const std::vector<std::string>& argv) {
  return runGuarded(kBenchUsage, argv, [&] {
    Options options;
    for (const char* name : {"variant", "batch", "frames", "size", "steps", "warmup", "threads", "device", "precision",
                             "optimizer", "allocator", "profile", "memory-format", "peak-tflops", "slices"}) {
      options.value(name);
    }
    const Args args = options.parse(argv);
    const std::string optimizer_name = args.get("optimizer", "fused");
    const std::string allocator = args.get("allocator", "tuned");
    if (optimizer_name != "fused" && optimizer_name != "torch") {
      throw UsageError("--optimizer must be fused (one-pass AdamW) or torch (torch::optim::AdamW), got '" +
                       optimizer_name + "'");
    }
    if (allocator != "tuned" && allocator != "default") {
      throw UsageError("--allocator must be tuned or default, got '" + allocator + "'");
    }
    const std::string peak_text = args.get("peak-tflops", "");
    double peak = 0;
    if (!peak_text.empty()) {
      peak = parseNumber(peak_text).value_or(0);
      if (!(peak > 0)) {
        throw UsageError("--peak-tflops must be a positive number (the device's peak TFLOP/s), got '" + peak_text + "'");
      }
    }
    const std::string memory_format = args.get("memory-format", "contiguous");
    if (memory_format != "channels_last" && memory_format != "contiguous") {
      throw UsageError("--memory-format must be channels_last or contiguous, got '" + memory_format + "'");
    }
    if (allocator == "tuned") {
      tuneCpuAllocator();
    }
    TAEHVOptions model_options;
    try {
      model_options = TAEHVOptions::forVariant(args.get("variant", "taehv"));
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--variant: ") + e.what());
    }
    const int64_t batch = args.integer("batch", 2, 1, 4096);
    const int64_t frames = args.integer("frames", 12, 1, 100000);
    const int64_t size = args.integer("size", 64, 8, 16384);
    const int64_t steps = args.integer("steps", 5, 1, 1000000);
    const int64_t warmup = args.integer("warmup", 1, 0, 1000000);
    applyThreads(args);
    const std::string device_name = args.get("device", "cpu");
    const std::string precision = args.get("precision", "fp32");
    if (device_name != "cpu" && device_name != "cuda") {
      throw UsageError("--device must be cpu or cuda, got '" + device_name + "'");
    }
    if (precision != "fp32" && precision != "bf16") {
      throw UsageError("--precision must be fp32 or bf16, got '" + precision + "'");
    }
    if (device_name == "cuda" && !torch::cuda::is_available()) {
      throw UsageError("--device cuda: no CUDA device is available to this libtorch (torch::cuda::is_available() is "
                       "false); use --device cpu");
    }
    const int64_t spatial = 8 * model_options.patch_size;
    if (size % spatial != 0) {
      throw UsageError("--size must be a multiple of " + std::to_string(spatial) + " for this variant, got " +
                       std::to_string(size));
    }
    const torch::Device device(device_name == "cuda" ? torch::kCUDA : torch::kCPU);
    const bool bf16 = precision == "bf16";
    const std::string slices_text = args.get("slices", "auto");
    int slices_requested = 0;
    if (slices_text != "auto") {
      slices_requested = static_cast<int>(args.integer("slices", 1, 1, 4096));
      if (slices_requested > 1 && (device_name == "cuda" || bf16)) {
        throw UsageError("--slices " + slices_text + ": slicing is for CPU fp32 steps; use --slices 1 (or auto) "
                         "with --device cuda or --precision bf16");
      }
    }
    const SliceBackward::Plan slice_plan =
        device_name == "cpu" && !bf16 ? SliceBackward::plan(slices_requested, at::get_num_threads(), batch)
                                      : SliceBackward::Plan{1, at::get_num_threads()};
    SliceBackward slicer(slice_plan);

    torch::manual_seed(0);
    TAEHV model(model_options);
    model->to(device);
    model->train();
    model->setChannelsLast(memory_format == "channels_last");
    // Both optimizers apply the same AdamW update (lr 3e-4, betas (0.9, 0.95), weight decay 1e-2, eps 1e-8).
    torch::optim::AdamW torch_optimizer(model->parameters(),
                                        torch::optim::AdamWOptions(3e-4).betas({0.9, 0.95}).weight_decay(1e-2));
    FusedAdamW fused_optimizer(model->parameters(), FusedAdamWOptions{});
    const std::vector<torch::Tensor> params = model->parameters();
    const bool fused = optimizer_name == "fused";
    const torch::Tensor x = torch::rand({batch, frames, 3, size, size}).to(device);
    const int64_t decoded = model->decodedFrames(model->encodedLatents(frames));
    if (decoded < 1) {
      throw UsageError("--frames " + std::to_string(frames) + " decodes to no frame; use at least 1");
    }
    const int64_t aligned = std::min(decoded, frames);
    const torch::Tensor target = x.slice(1, 0, aligned);
    log::report(log::format(
        "bench: variant=%s batch=%lld frames=%lld size=%lld device=%s precision=%s threads=%d params=%lld "
        "optimizer=%s allocator=%s memory_format=%s slices=%d (x %d intra-op threads)",
        args.get("variant", "taehv").c_str(), static_cast<long long>(batch), static_cast<long long>(frames),
        static_cast<long long>(size), device_name.c_str(), precision.c_str(), at::get_num_threads(),
        static_cast<long long>([&] {
          int64_t n = 0;
          for (const auto& p : model->parameters()) {
            n += p.numel();
          }
          return n;
        }()),
        optimizer_name.c_str(), allocator.c_str(), memory_format.c_str(), slice_plan.slices,
        slice_plan.slices > 1 ? slice_plan.intra_threads : at::get_num_threads()));

    const auto sync = [&] {
      if (device.is_cuda()) {
        torch::cuda::synchronize();
      }
    };
    double timed = 0;
    double loss_value = 0;
    int64_t flops_before = 0;
    struct rusage before {};
    // --profile FILE: one extra, untimed step under the autograd profiler (chrome trace JSON).
    const std::string profile = args.get("profile", "");
    const int64_t total = warmup + steps + (profile.empty() ? 0 : 1);
    struct rusage usage {};
    for (int64_t step = 0; step < total; ++step) {
      if (step == warmup) {
        getrusage(RUSAGE_SELF, &before);
        flops_before = convFlops();
      }
      if (step == warmup + steps) {
        getrusage(RUSAGE_SELF, &usage);
      }
      std::unique_ptr<torch::autograd::profiler::RecordProfile> recording;
      if (step == warmup + steps) {
        recording = std::make_unique<torch::autograd::profiler::RecordProfile>(profile);
      }
      sync();
      const auto start = std::chrono::steady_clock::now();
      const auto zeroGrad = [&] {
        if (fused) {
          fused_optimizer.zeroGrad();
        } else {
          torch_optimizer.zero_grad();
        }
      };
      if (slicer.slices() > 1) {
        // The same loss as the one-pass step, as a sum of slice losses weighted by their share of the batch.
        std::vector<torch::Tensor> losses;
        std::vector<torch::Tensor> grads = slicer.run(
            batch, params,
            [&](int, int64_t begin, int64_t end) {
              torch::Tensor y = model->decodeVideo(model->encodeVideo(x.slice(0, begin, end))).slice(1, 0, aligned);
              return torch::mse_loss(y, target.slice(0, begin, end)) *
                     (static_cast<double>(end - begin) / static_cast<double>(batch));
            },
            &losses);
        zeroGrad();
        for (size_t k = 0; k < params.size(); ++k) params[k].mutable_grad() = grads[k];
        loss_value = 0;
        for (const auto& l : losses) loss_value += l.item<double>();
      } else {
        torch::Tensor loss;
        {
          Bf16Autocast forward(device.type(), bf16);
          torch::Tensor y = model->decodeVideo(model->encodeVideo(x)).slice(1, 0, aligned);
          loss = torch::mse_loss(y.to(torch::kFloat), target);
        }
        zeroGrad();  // after the forward: the old gradients' memory then serves the new ones
        loss.backward();
        loss_value = loss.item<double>();
      }
      if (fused) {
        fused_optimizer.step();
      } else {
        torch_optimizer.step();
      }
      sync();
      const double seconds = secondsSince(start);
      if (step >= warmup && step < warmup + steps) {
        timed += seconds;
      }
      log::report(log::format("step %lld%s: %.3f s loss %.6f", static_cast<long long>(step),
                              step < warmup ? " (warmup)" : "", seconds, loss_value));
    }
    const double step_s = timed / static_cast<double>(steps);
    // Forward convolution FLOPs of one step (the profiled step, if any, is excluded), x3 for forward + backward.
    const double train_flops = 3.0 * static_cast<double>(convFlops() - flops_before) /
                               static_cast<double>(steps + (profile.empty() ? 0 : 1));
    const double tflops = train_flops / step_s / 1e12;
    if (peak > 0) {
      log::report(log::format("model_gflop_per_step=%.2f achieved_tflops=%.4f mfu=%.3f", train_flops / 1e9, tflops,
                              tflops / peak));
    } else {
      log::report(log::format("model_gflop_per_step=%.2f achieved_tflops=%.4f (pass --peak-tflops P for MFU)",
                              train_flops / 1e9, tflops));
    }
    if (profile.empty()) {
      getrusage(RUSAGE_SELF, &usage);
    }
    // CPU seconds per step (all threads, user + system): a steadier figure than wall time on a shared machine.
    const auto cpu_seconds = [](const struct rusage& r) {
      return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
             static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1e-6;
    };
    log::report(log::format("cpu_s_per_step=%.4f minor_faults_per_step=%.0f",
                            (cpu_seconds(usage) - cpu_seconds(before)) / static_cast<double>(steps),
                            static_cast<double>(usage.ru_minflt - before.ru_minflt) / static_cast<double>(steps)));
    const double peak_rss_mb = static_cast<double>(usage.ru_maxrss) / 1024.0;
    log::report(log::format("frames_per_s=%.3f step_s=%.4f peak_rss_mb=%.1f",
                            static_cast<double>(batch * frames) / step_s, step_s, peak_rss_mb));
    return 0;
  });
}

}  // namespace taehv
