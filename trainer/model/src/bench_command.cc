// `taehv-train bench`: times training steps of the model alone (no data loading, no process group), the figure
// bench/model compares with PyTorch's own loop.
#include <sys/resource.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#if defined(TAEHV_WITH_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <algorithm>
#include <chrono>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

#include "command_line.h"
#include "taehv/files/output_file.h"
#include "taehv/log.h"
#include "taehv/model/autocast.h"
#include "taehv/model/commands.h"
#include "taehv/model/cpu_tuning.h"
#include "taehv/model/fused_adamw.h"
#include "taehv/model/roofline.h"
#include "taehv/model/slice_backward.h"
#include "taehv/model/taehv.h"
#include "taehv/parse.h"

namespace taehv {
namespace {

using namespace cli;  // NOLINT: the commands' shared parts

const char* kBenchUsage =
    "usage: taehv-train bench --variant V --batch B --frames T --size S --steps N [--warmup W] [--threads K]\n"
    "                         [--device cpu|cuda] [--precision fp32|bf16] [--optimizer fused|torch]\n"
    "                         [--allocator tuned|default] [--memory-format auto|contiguous|channels_last]\n"
    "                         [--profile TRACE.json] [--peak-tflops P] [--slices auto|N]\n"
    "                         [--conv auto|winograd|direct]\n"
    "  times training steps (MSE of decode(encode(x)) vs the aligned input frames, backward, AdamW).\n"
    "  --slices: on CPU in fp32, the batch runs as N slices on N threads of K/N intra-op threads each, as\n"
    "  taehv-train does (train.slices); auto = min(K, B); 1 = one pass with K intra-op threads per op.\n"
    "  --conv: fp32 3x3 convolutions on the CPU as Winograd transforms (NNPACK) or oneDNN's direct ones, as\n"
    "  train.cpu_conv; auto = winograd where the CPU has no AVX-512 (default).\n"
    "  --memory-format: the activations' layout; auto = taehv-train's: channels_last under bf16, else contiguous.\n";

Options benchOptions() {
  Options o;
  for (const char* name : {"variant", "batch", "frames", "size", "steps", "warmup", "threads", "device", "precision",
                           "optimizer", "allocator", "profile", "memory-format", "peak-tflops", "slices", "conv"}) {
    o.value(name);
  }
  return o;
}

/// The command line of one benchmark, checked.
struct BenchSettings {
  std::string variant;
  TAEHVOptions model;
  int64_t batch = 0, frames = 0, size = 0, steps = 0, warmup = 0;
  torch::Device device{torch::kCPU};
  bool bf16 = false;            ///< --precision bf16 (autocast), else fp32
  bool fused = true;            ///< --optimizer fused (FusedAdamW), else torch (torch::optim::AdamW)
  bool tuned_allocator = true;  ///< --allocator tuned (tuneCpuAllocator), else default
  bool channels_last = false;   ///< --memory-format channels_last (auto: under bf16), else contiguous
  double peak_tflops = 0;       ///< 0: not given
  int slices = 0;               ///< requested slices; 0 = auto
  bool winograd = false;        ///< --conv: setCpuWinograd
  std::string profile;          ///< chrome trace of one extra step; empty: none
};

/// Reads and checks every option, in the order their messages have always come; applies --threads (the slice plan
/// is sized by it).
BenchSettings benchSettings(const Args& args) {
  BenchSettings s;
  const std::string optimizer = args.get("optimizer", "fused");
  const std::string allocator = args.get("allocator", "tuned");
  if (optimizer != "fused" && optimizer != "torch") {
    throw UsageError("--optimizer must be fused (one-pass AdamW) or torch (torch::optim::AdamW), got '" + optimizer +
                     "'");
  }
  if (allocator != "tuned" && allocator != "default") {
    throw UsageError("--allocator must be tuned or default, got '" + allocator + "'");
  }
  s.fused = optimizer == "fused";
  s.tuned_allocator = allocator == "tuned";
  if (const std::string text = args.get("peak-tflops", ""); !text.empty()) {
    const std::optional<double> peak = parseNumber(text);
    if (!peak || !(*peak > 0)) {
      throw UsageError("--peak-tflops must be a positive number (the device's peak TFLOP/s), got '" + text + "'");
    }
    s.peak_tflops = *peak;
  }
  const std::string memory_format = args.get("memory-format", "auto");
  if (memory_format != "auto" && memory_format != "channels_last" && memory_format != "contiguous") {
    throw UsageError("--memory-format must be auto, channels_last or contiguous, got '" + memory_format + "'");
  }
  s.variant = args.get("variant", "taehv");
  try {
    s.model = TAEHVOptions::forVariant(s.variant);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--variant: ") + e.what());
  }
  s.batch = args.integer("batch", 2, 1, 4096);
  s.frames = args.integer("frames", 12, 1, 100000);
  s.size = args.integer("size", 64, 8, 16384);
  s.steps = args.integer("steps", 5, 1, 1000000);
  s.warmup = args.integer("warmup", 1, 0, 1000000);
  applyThreads(args);
  const std::string device = args.get("device", "cpu");
  const std::string precision = args.get("precision", "fp32");
  if (device != "cpu" && device != "cuda") throw UsageError("--device must be cpu or cuda, got '" + device + "'");
  if (precision != "fp32" && precision != "bf16") {
    throw UsageError("--precision must be fp32 or bf16, got '" + precision + "'");
  }
  if (device == "cuda" && !torch::cuda::is_available()) {
    throw UsageError("--device cuda: no CUDA device is available to this libtorch (torch::cuda::is_available() is "
                     "false); use --device cpu");
  }
  s.device = torch::Device(device == "cuda" ? torch::kCUDA : torch::kCPU);
  s.bf16 = precision == "bf16";
  // auto: the layout taehv-train trains in (TrainingRun::prepareSteps), so the bench times the job's step.
  s.channels_last = memory_format == "channels_last" || (memory_format == "auto" && s.bf16);
  const int64_t spatial = 8 * s.model.patch_size;
  if (s.size % spatial != 0) {
    throw UsageError("--size must be a multiple of " + std::to_string(spatial) + " for this variant, got " +
                     std::to_string(s.size));
  }
  const std::string slices = args.get("slices", "auto");
  if (slices != "auto") {
    s.slices = static_cast<int>(args.integer("slices", 1, 1, 4096));
    if (s.slices > 1 && (s.device.is_cuda() || s.bf16)) {
      throw UsageError("--slices " + slices + ": slicing is for CPU fp32 steps; use --slices 1 (or auto) "
                       "with --device cuda or --precision bf16");
    }
  }
  const std::string conv = args.get("conv", "auto");
  if (conv != "auto" && conv != "winograd" && conv != "direct") {
    throw UsageError("--conv must be auto, winograd or direct, got '" + conv + "'");
  }
  if (conv == "winograd" && (s.bf16 || s.device.is_cuda())) {
    throw UsageError("--conv winograd: Winograd convolutions are for fp32 steps on the CPU (bf16 autocast and GPU "
                     "steps never run them); use --precision fp32 --device cpu, or --conv auto");
  }
  if (conv == "winograd" && !cpuWinogradAvailable()) {
    throw UsageError("--conv winograd: this libtorch has no NNPACK or this CPU cannot run it (it needs AVX2 and "
                     "FMA); use --conv direct or auto");
  }
  // auto: as train.cpu_conv auto, for the fp32 CPU steps that can use them
  s.winograd = conv == "winograd" || (conv == "auto" && !s.bf16 && !s.device.is_cuda() && cpuWinogradAuto());
  s.profile = args.get("profile", "");
  if (!s.profile.empty()) {
    // Before any step: /dev/full, a folder, a missing folder or a read-only file system is one line here.
    if (Status writable = files::checkOutputFile(s.profile); !writable.ok()) {
      throw UsageError("--profile: " + writable.error);
    }
  }
  return s;
}

/// The seeded model, on the device in training mode.
TAEHV benchModel(const BenchSettings& s) {
  torch::manual_seed(0);
  TAEHV model(s.model);
  model->to(s.device);
  model->train();
  model->setChannelsLast(s.channels_last);
  setCpuWinograd(s.winograd);
  return model;
}

/// One benchmark's model, optimizers and random clip; `run` is one full training step (MSE of decode(encode(x))
/// against the aligned input frames, backward, AdamW).
class BenchStep {
 public:
  explicit BenchStep(const BenchSettings& s)
      : s_(s),
        plan_(!s.device.is_cuda() && !s.bf16 ? SliceBackward::plan(s.slices, at::get_num_threads(), s.batch)
                                             : SliceBackward::Plan{1, at::get_num_threads()}),
        slicer_(plan_),
        model_(benchModel(s)),
        // Both optimizers apply the same AdamW update (lr 3e-4, betas (0.9, 0.95), weight decay 1e-2, eps 1e-8).
        torch_optimizer_(model_->parameters(), torch::optim::AdamWOptions(3e-4).betas({0.9, 0.95}).weight_decay(1e-2)),
        fused_optimizer_(model_->parameters(), FusedAdamWOptions{}),
        params_(model_->parameters()),
        x_(torch::rand({s.batch, s.frames, 3, s.size, s.size}).to(s.device)) {
    const int64_t decoded = model_->decodedFrames(model_->encodedLatents(s.frames));
    if (decoded < 1) {
      throw UsageError("--frames " + std::to_string(s.frames) + " decodes to no frame; use at least 1");
    }
    aligned_ = std::min(decoded, s.frames);
    target_ = x_.slice(1, 0, aligned_);
  }

  const SliceBackward::Plan& plan() const { return plan_; }

  int64_t parameterCount() const {
    int64_t n = 0;
    for (const auto& p : params_) n += p.numel();
    return n;
  }

  /// What one step took, per phase (wall seconds).
  struct Result {
    double loss = 0;
    double forward_s = 0;    ///< through the loss; with slices > 1 forward and backward together
    double backward_s = 0;   ///< 0 with slices > 1 (counted in forward_s)
    double optimizer_s = 0;  ///< the AdamW update
  };

  /// One step.
  Result run() {
    Result r;
    const auto sync = [&] {
      if (s_.device.is_cuda()) torch::cuda::synchronize();
    };
    auto mark = std::chrono::steady_clock::now();
    const auto lap = [&] {
      sync();
      const double seconds = secondsSince(mark);
      mark = std::chrono::steady_clock::now();
      return seconds;
    };
    double& loss_value = r.loss;
    if (slicer_.slices() > 1) {
      // The same loss as the one-pass step, as a sum of slice losses weighted by their share of the batch.
      std::vector<torch::Tensor> losses;
      std::vector<torch::Tensor> grads = slicer_.run(
          s_.batch, params_,
          [&](int, int64_t begin, int64_t end) {
            torch::Tensor y = model_->decodeVideo(model_->encodeVideo(x_.slice(0, begin, end))).slice(1, 0, aligned_);
            return torch::mse_loss(y, target_.slice(0, begin, end)) *
                   (static_cast<double>(end - begin) / static_cast<double>(s_.batch));
          },
          &losses);
      zeroGrad();
      for (size_t k = 0; k < params_.size(); ++k) params_[k].mutable_grad() = grads[k];
      for (const auto& l : losses) loss_value += l.item<double>();
      r.forward_s = lap();
    } else {
      torch::Tensor loss;
      {
        Bf16Autocast forward(s_.device.type(), s_.bf16);
        torch::Tensor y = model_->decodeVideo(model_->encodeVideo(x_)).slice(1, 0, aligned_);
        loss = torch::mse_loss(y.to(torch::kFloat), target_);
      }
      zeroGrad();  // after the forward: the old gradients' memory then serves the new ones
      r.forward_s = lap();
      loss.backward();
      loss_value = loss.item<double>();
      r.backward_s = lap();
    }
    if (s_.fused) {
      fused_optimizer_.step();
    } else {
      torch_optimizer_.step();
    }
    r.optimizer_s = lap();
    return r;
  }

  const TAEHVImpl& model() const { return *model_; }

 private:
  void zeroGrad() {
    if (s_.fused) {
      fused_optimizer_.zeroGrad();
    } else {
      torch_optimizer_.zero_grad();
    }
  }

  const BenchSettings& s_;
  SliceBackward::Plan plan_;
  SliceBackward slicer_;
  TAEHV model_;
  torch::optim::AdamW torch_optimizer_;
  FusedAdamW fused_optimizer_;
  std::vector<torch::Tensor> params_;
  torch::Tensor x_, target_;
  int64_t aligned_ = 0;
};

/// The first line: what is measured.
void reportSetup(const BenchSettings& s, const BenchStep& step) {
  const SliceBackward::Plan& plan = step.plan();
  // Winograd convolutions run on one intra-op thread only (layers.cc): with more, the direct ones run.
  const char* conv = s.winograd && plan.intra_threads == 1 ? "winograd" : "direct";
  log::report(log::format("bench: variant=%s batch=%lld frames=%lld size=%lld device=%s precision=%s threads=%d "
                          "params=%lld optimizer=%s allocator=%s memory_format=%s conv=%s slices=%d "
                          "(x %d intra-op threads)",
                          s.variant.c_str(), static_cast<long long>(s.batch), static_cast<long long>(s.frames),
                          static_cast<long long>(s.size), s.device.is_cuda() ? "cuda" : "cpu",
                          s.bf16 ? "bf16" : "fp32", at::get_num_threads(),
                          static_cast<long long>(step.parameterCount()), s.fused ? "fused" : "torch",
                          s.tuned_allocator ? "tuned" : "default", s.channels_last ? "channels_last" : "contiguous",
                          conv, plan.slices, plan.intra_threads));
}

/// What the timed steps measured.
struct BenchTimes {
  double timed_s = 0;        ///< wall seconds of the timed steps
  double forward_s = 0;      ///< of which the forward (with slices > 1: forward and backward)
  double backward_s = 0;     ///< the backward (0 with slices > 1)
  double optimizer_s = 0;    ///< the AdamW update
  int64_t flops_before = 0;  ///< convFlops() when the timed steps began
  int64_t timed_flops = 0;   ///< forward convolution FLOPs the timed steps ran (convFlops(): what the layers did)
  struct rusage before {};   ///< at the first timed step
  struct rusage after {};    ///< after the last timed step (before the profiled one and the peak measurement)
};

/// Runs the warm-up, timed and profiled steps, one line each.
BenchTimes timeSteps(BenchStep& step, const BenchSettings& s) {
  BenchTimes t;
  const int64_t timed_end = s.warmup + s.steps;
  // --profile FILE: one extra, untimed step under the autograd profiler (chrome trace JSON).
  const int64_t total = timed_end + (s.profile.empty() ? 0 : 1);
  const auto sync = [&] {
    if (s.device.is_cuda()) torch::cuda::synchronize();
  };
  for (int64_t i = 0; i < total; ++i) {
    if (i == s.warmup) {
      getrusage(RUSAGE_SELF, &t.before);
      t.flops_before = convFlops();
    }
    if (i == timed_end) {
      getrusage(RUSAGE_SELF, &t.after);
      t.timed_flops = convFlops() - t.flops_before;
    }
    // The trace goes to memory, then to the file through the one output writer (taehv/files/output_file.h): the
    // profiler's own file writer reports no failure at all.
    std::ostringstream trace;
    std::unique_ptr<torch::autograd::profiler::RecordProfile> recording;
    if (i == timed_end) recording = std::make_unique<torch::autograd::profiler::RecordProfile>(trace);
    sync();
    const auto start = std::chrono::steady_clock::now();
    const BenchStep::Result r = step.run();
    sync();
    const double seconds = secondsSince(start);
    if (recording) {
      recording.reset();  // writes the trace
      if (Status written = files::writeFileAtomically(s.profile, trace.str()); !written.ok()) {
        throw std::runtime_error("--profile: " + written.error);
      }
    }
    if (i >= s.warmup && i < timed_end) {
      t.timed_s += seconds;
      t.forward_s += r.forward_s;
      t.backward_s += r.backward_s;
      t.optimizer_s += r.optimizer_s;
    }
    log::report(log::format("step %lld%s: %.3f s loss %.6f", static_cast<long long>(i),
                            i < s.warmup ? " (warmup)" : "", seconds, r.loss));
  }
  if (total == timed_end) {
    getrusage(RUSAGE_SELF, &t.after);
    t.timed_flops = convFlops() - t.flops_before;
  }
  return t;
}

/// " peak_gpu_mb=X" on a CUDA device: the most memory its tensors held at once (the caching allocator's peak of
/// allocated bytes, as Python's torch.cuda.max_memory_allocated), over all steps; "" otherwise.
std::string gpuPeakText(const torch::Device& device) {
#if defined(TAEHV_WITH_CUDA)
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.has_index() ? device.index() : 0);
    return log::format(" peak_gpu_mb=%.1f", static_cast<double>(stats.allocated_bytes[0].peak) / (1024.0 * 1024.0));
  }
#endif
  (void)device;
  return "";
}

/// The seconds a peak measurement spends on each shape and memory format (3 shapes x 2 formats x 2 precisions).
constexpr double kPeakSecondsPerShape = 0.1;

/// FLOP/s of the heaviest 3x3 convolution shapes of the step, fp32 and bf16, as measured by measureConvPeak.
struct MeasuredPeaks {
  ConvPeak fp32, bf16;
};

std::string shapeText(const ConvPeak& p) {
  const ConvShape& c = p.shape;
  return log::format("%lldx%lldx%lldx%lld->%lld %s", static_cast<long long>(c.rows),
                     static_cast<long long>(c.in_channels), static_cast<long long>(c.height),
                     static_cast<long long>(c.width), static_cast<long long>(c.out_channels),
                     p.channels_last ? "channels_last" : "contiguous");
}

/// The roofline lines: the step's FLOPs (upstream's formulation and what ran), the measured convolution peaks, and
/// each phase's FLOP/s as a share of the peak of the step's precision (--peak-tflops replaces the measurement).
/// Returns the model FLOPs per step (0 where not counted).
double reportRoofline(const BenchSettings& s, const BenchStep& step, const BenchTimes& t) {
  const double steps = static_cast<double>(s.steps);
  const double executed_forward = static_cast<double>(t.timed_flops) / steps;
  StepFlops model;
  std::string not_counted;
  try {
    model = countStepFlops(step.model(), s.batch, s.frames, s.size);
  } catch (const std::invalid_argument& e) {
    not_counted = e.what();
  }
  // The first convolution (no input gradient) runs on every frame in both formulations.
  const double first = model.convs.empty() ? 0.0 : static_cast<double>(model.convs.front().forwardFlops());
  const double executed_backward = 2 * executed_forward - first;
  if (not_counted.empty()) {
    log::report(log::format("flops: model_forward=%lld model_backward=%lld executed_forward=%.0f "
                            "executed_backward=%.0f (per step; model: upstream's formulation, as "
                            "torch.utils.flop_counter counts it; executed: what these layers ran)",
                            static_cast<long long>(model.forward), static_cast<long long>(model.backward),
                            executed_forward, executed_backward));
  } else {
    log::report(log::format("flops: executed_forward=%.0f executed_backward=%.0f (per step, what these layers "
                            "ran; backward taken as 2x forward); no model count: %s",
                            executed_forward, executed_backward, not_counted.c_str()));
  }
  double peak = s.peak_tflops * 1e12;
  if (peak > 0) {
    log::report(log::format("peak: given, %.1f GFLOP/s (--peak-tflops)", peak / 1e9));
  } else if (!model.convs.empty()) {
    const std::vector<ConvShape> shapes = heaviestConv3x3Shapes(model, 3);
    MeasuredPeaks m{measureConvPeak(shapes, torch::kFloat, s.device, kPeakSecondsPerShape),
                    measureConvPeak(shapes, torch::kBFloat16, s.device, kPeakSecondsPerShape)};
    log::report(log::format("peak: fp32_peak_gflops=%.1f (%s) bf16_peak_gflops=%.1f (%s) (forward 3x3 "
                            "convolutions of the step's %zu heaviest shapes, this process, %d threads)",
                            m.fp32.flops_per_s / 1e9, shapeText(m.fp32).c_str(), m.bf16.flops_per_s / 1e9,
                            shapeText(m.bf16).c_str(), shapes.size(), at::get_num_threads()));
    peak = (s.bf16 ? m.bf16 : m.fp32).flops_per_s;
  }
  const char* against = s.bf16 ? "bf16" : "fp32";
  const auto phase = [&](const char* name, double seconds, double executed, double counted) {
    const double per_step = seconds / steps;
    if (peak <= 0 || per_step <= 0) {
      log::report(log::format("phase %s: %s_s=%.4f", name, name, per_step));
      return;
    }
    log::report(log::format("phase %s: %s_s=%.4f %s_gflops=%.1f %s_share=%.3f (executed FLOPs / the %s peak; "
                            "model FLOPs: %.3f)",
                            name, name, per_step, name, executed / per_step / 1e9, name,
                            executed / per_step / peak, against, counted / per_step / peak));
  };
  if (t.backward_s > 0) {
    phase("forward", t.forward_s, executed_forward, static_cast<double>(model.forward));
    phase("backward", t.backward_s, executed_backward, static_cast<double>(model.backward));
  } else {
    phase("forward_backward", t.forward_s, executed_forward + executed_backward, static_cast<double>(model.total()));
  }
  log::report(log::format("phase optimizer: optimizer_s=%.4f (the AdamW update, no convolution)",
                          t.optimizer_s / steps));
  log::report("phase data: none (bench trains on one random clip held in memory); phase exchange: none (one "
              "process, no gradient all-reduce)");
  phase("total", t.timed_s, executed_forward + executed_backward, static_cast<double>(model.total()));
  return static_cast<double>(model.total());
}

/// The last lines, which scripts parse: FLOPs (and MFU with --peak-tflops), CPU time and faults, frames/s.
void reportSummary(const BenchSettings& s, const BenchTimes& t, double model_flops) {
  const double step_s = t.timed_s / static_cast<double>(s.steps);
  // Model FLOPs (upstream's formulation) when counted, else 3x the forward FLOPs the layers ran.
  const double train_flops =
      model_flops > 0 ? model_flops : 3.0 * static_cast<double>(t.timed_flops) / static_cast<double>(s.steps);
  const double tflops = train_flops / step_s / 1e12;
  if (s.peak_tflops > 0) {
    log::report(log::format("model_gflop_per_step=%.2f achieved_tflops=%.4f mfu=%.3f", train_flops / 1e9, tflops,
                            tflops / s.peak_tflops));
  } else {
    log::report(log::format("model_gflop_per_step=%.2f achieved_tflops=%.4f (pass --peak-tflops P for MFU)",
                            train_flops / 1e9, tflops));
  }
  // CPU seconds per step (all threads, user + system): a steadier figure than wall time on a shared machine.
  const auto cpu_seconds = [](const struct rusage& r) {
    return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
           static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1e-6;
  };
  const double steps = static_cast<double>(s.steps);
  log::report(log::format("cpu_s_per_step=%.4f minor_faults_per_step=%.0f",
                          (cpu_seconds(t.after) - cpu_seconds(t.before)) / steps,
                          static_cast<double>(t.after.ru_minflt - t.before.ru_minflt) / steps));
  log::report(log::format("frames_per_s=%.3f step_s=%.4f peak_rss_mb=%.1f%s",
                          static_cast<double>(s.batch * s.frames) / step_s, step_s,
                          static_cast<double>(t.after.ru_maxrss) / 1024.0, gpuPeakText(s.device).c_str()));
}

}  // namespace

int benchCommand(const std::vector<std::string>& argv) {
  return runGuarded(kBenchUsage, argv, [&] {
    const BenchSettings settings = benchSettings(benchOptions().parse(argv));
    if (settings.tuned_allocator) tuneCpuAllocator();
    BenchStep step(settings);
    reportSetup(settings, step);
    const BenchTimes times = timeSteps(step, settings);
    reportSummary(settings, times, reportRoofline(settings, step, times));
    return 0;
  });
}

}  // namespace taehv
