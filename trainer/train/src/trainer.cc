#include "taehv/train/trainer.h"

#include <unistd.h>

#include <ATen/autocast_mode.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "taehv/model/metrics.h"
#include "taehv/model/output_file.h"
#include "taehv/model/safetensors.h"
#include "taehv/model/slice_backward.h"
#include "taehv/model/taehv.h"
#include "taehv/train/checkpoint.h"
#include "taehv/train/data.h"
#include "taehv/train/dist.h"
#include "taehv/train/events.h"
#include "taehv/train/zero.h"

namespace taehv::train {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

// SIGTERM/SIGINT: inside the step loop the trainer finishes its step, saves a checkpoint and exits 0 (what a
// preemption wants); it gets kStopGrace for that, less than taehv-run's default 30 s --shutdown-grace, after which
// SIGALRM ends it without saving (the last checkpoint stays). Before the loop (building the model, the rendezvous,
// loading data) there is nothing to save, and a second signal means "now": both exit at once.
constexpr unsigned kStopGraceS = 20;
std::atomic<int> g_stop_signal{0};
std::atomic<bool> g_in_step_loop{false};

void writeStderr(const char* text) {  // async-signal-safe
  size_t n = 0;
  while (text[n] != '\0') ++n;
  ssize_t ignored = ::write(STDERR_FILENO, text, n);
  (void)ignored;
}

extern "C" void onStopSignal(int sig) {
  if (!g_in_step_loop.load() || g_stop_signal.load() != 0) {
    writeStderr("taehv-train: stopped by a signal before a checkpoint could be taken; the last checkpoint is kept\n");
    _exit(128 + sig);
  }
  g_stop_signal = sig;
  alarm(kStopGraceS);
}

extern "C" void onStopGraceOver(int) {
  writeStderr("taehv-train: the step in progress did not end within 20 s of the stop signal; exiting without saving "
              "(the last checkpoint is kept)\n");
  _exit(128 + SIGTERM);
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string formatDuration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const auto total = static_cast<int64_t>(s + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(total / 3600),
                static_cast<long long>(total / 60 % 60), static_cast<long long>(total % 60));
  return buf;
}

double learningRate(const TrainConfig& t, int64_t step) {
  if (step < t.warmup_steps) return t.lr * static_cast<double>(step + 1) / static_cast<double>(t.warmup_steps);
  const double span = static_cast<double>(std::max<int64_t>(1, t.steps - t.warmup_steps));
  const double progress = std::min(1.0, static_cast<double>(step - t.warmup_steps) / span);
  return t.lr * (t.min_lr_ratio + (1 - t.min_lr_ratio) * 0.5 * (1 + std::cos(M_PI * progress)));
}

torch::Tensor reconstructionLoss(const std::string& kind, const torch::Tensor& pred, const torch::Tensor& target) {
  if (kind == "l1") return torch::l1_loss(pred, target);
  if (kind == "mse+l1") return torch::mse_loss(pred, target) + torch::l1_loss(pred, target);
  return torch::mse_loss(pred, target);
}

struct Objective {
  torch::Tensor loss;
  torch::Tensor pred;    ///< reconstruction [B, T', 3, S, S]
  torch::Tensor target;  ///< aligned input frames
};

/// Reconstruction: decode(encode(x)) against the first T' input frames (decoded frame j matches input frame j).
/// Distillation (upstream recipe): MSE(encoder(x), teacher latents) + reconstruction of decode(teacher latents).
Objective computeObjective(TAEHV& model, const Batch& batch, const torch::Device& device, const std::string& loss,
                           bool distill) {
  auto x = batch.frames.to(device);
  Objective out;
  if (distill) {
    auto teacher = batch.latents.to(device);
    auto latents = model->encodeVideo(x);
    const int64_t L = std::min(latents.size(1), teacher.size(1));
    auto enc = torch::mse_loss(latents.narrow(1, 0, L).to(torch::kFloat), teacher.narrow(1, 0, L));
    out.pred = model->decodeVideo(teacher);
    out.target = x.narrow(1, 0, out.pred.size(1));
    out.loss = enc + reconstructionLoss(loss, out.pred.to(torch::kFloat), out.target);
  } else {
    out.pred = model->decodeVideo(model->encodeVideo(x));
    out.target = x.narrow(1, 0, out.pred.size(1));
    out.loss = reconstructionLoss(loss, out.pred.to(torch::kFloat), out.target);
  }
  return out;
}

/// computeObjective and its backward for one micro-batch as the slicer's slices, each on its own thread (CPU).
/// The gradients, scaled by `scale`, reach `sync` and the parameters' grads as backward's would; returns the
/// whole micro-batch's loss (the slices' losses weighted by their share of it), predictions and targets.
Objective slicedObjective(SliceBackward& slicer, GradSync& sync, TAEHV& model, const std::vector<torch::Tensor>& params,
                          const Batch& batch, const torch::Device& device, const std::string& loss, bool distill,
                          double scale) {
  const int64_t n = batch.frames.size(0);
  std::vector<Objective> parts(static_cast<size_t>(slicer.slices()));
  struct ManualGrads {  // the parameter hooks stay off while the slices run, also when one throws
    GradSync& sync;
    explicit ManualGrads(GradSync& s) : sync(s) { sync.setManual(true); }
    ~ManualGrads() { sync.setManual(false); }
  };
  std::vector<torch::Tensor> grads;
  {
    ManualGrads manual(sync);
    grads = slicer.run(n, params, [&](int s, int64_t begin, int64_t end) {
      Batch part = batch;
      part.frames = batch.frames.slice(0, begin, end);
      if (batch.latents.defined()) part.latents = batch.latents.slice(0, begin, end);
      Objective o = computeObjective(model, part, device, loss, distill);
      const double share = static_cast<double>(end - begin) / static_cast<double>(n);
      parts[static_cast<size_t>(s)] = {o.loss.detach() * share, o.pred.detach(), o.target};
      return o.loss * (share * scale);
    });
  }
  sync.addGrads(grads);
  Objective out;
  std::vector<torch::Tensor> preds, targets;
  for (auto& part : parts) {
    if (!part.loss.defined()) continue;
    out.loss = out.loss.defined() ? out.loss + part.loss : part.loss;
    preds.push_back(part.pred);
    targets.push_back(part.target);
  }
  out.pred = torch::cat(preds, 0);
  out.target = torch::cat(targets, 0);
  return out;
}

/// Input frames above, reconstructions below, up to 6 frames of the first clip.
RgbImage previewImage(const torch::Tensor& target, const torch::Tensor& pred) {
  const int64_t n = std::min<int64_t>(6, pred.size(1));
  auto top = torch::cat(target[0].narrow(0, 0, n).unbind(0), 2);  // [3, S, n*S]
  auto bottom = torch::cat(pred[0].narrow(0, 0, n).unbind(0), 2);
  auto img = torch::cat({top, bottom}, 1).detach().to(torch::kCPU, torch::kFloat).clamp(0, 1);
  img = img.mul(255).round().to(torch::kUInt8).permute({1, 2, 0}).contiguous();
  RgbImage out;
  out.height = static_cast<int>(img.size(0));
  out.width = static_cast<int>(img.size(1));
  out.pixels.assign(img.data_ptr<uint8_t>(), img.data_ptr<uint8_t>() + img.numel());
  return out;
}

// Checkpoint files are serialized in memory and then written by writeFileBytes: libtorch's file writer throws from
// its destructor when the disk is full (std::terminate, exit 134), where a failed write of ours is one message.
void writeText(const std::string& path, const std::string& text) {
  writeFileAtomically(path, [&](int fd) { return writeAllBytes(fd, text.data(), text.size()); });
}

void saveArchive(torch::serialize::OutputArchive& archive, const std::string& path) {
  std::ostringstream bytes;
  archive.save_to(bytes);
  writeText(path, bytes.str());
}

/// Sums over the evaluation clips k = first, first + step, ... of PSNR and SSIM of decode(encode(x)) against the
/// aligned input frames; `preview` (when not null) receives the preview of clip 0 if this call evaluates it.
/// Unreadable clips are skipped with a warning. The model is put in eval mode and back.
struct EvalSums {
  double psnr = 0, ssim = 0;
  int64_t clips = 0;
};
EvalSums evaluateClips(TAEHV& model, const EvalClips& clips, const torch::Device& device, int64_t first, int64_t step,
                       RgbImage* preview) {
  EvalSums sums;
  torch::NoGradGuard no_grad;
  model->eval();
  for (int64_t k = first; k < clips.size(); k += step) {
    Clip clip;
    try {
      clip = clips.load(k);
    } catch (const DataError& e) {
      std::fprintf(stderr, "warning: skipping unreadable eval item: %s\n", e.what());
      continue;
    }
    auto x = clip.frames.unsqueeze(0).to(device);
    auto y = model->decodeVideo(model->encodeVideo(x)).to(torch::kFloat);
    auto target = x.narrow(1, 0, y.size(1));
    sums.psnr += psnr(y, target);
    sums.ssim += ssim(y[0].to(torch::kCPU), target[0].to(torch::kCPU));
    ++sums.clips;
    if (preview && k == 0) *preview = previewImage(target, y);
  }
  model->train();
  return sums;
}

/// Swaps the EMA weights into the model for its lifetime (no-op without EMA).
class EmaWeights {
 public:
  EmaWeights(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& ema) : params_(params) {
    if (ema.empty()) return;
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < ema.size(); ++i) {
      backup_.push_back(params_[i].detach().clone());
      params_[i].copy_(ema[i]);
    }
  }
  ~EmaWeights() {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < backup_.size(); ++i) params_[i].copy_(backup_[i]);
  }
  EmaWeights(const EmaWeights&) = delete;
  EmaWeights& operator=(const EmaWeights&) = delete;

 private:
  const std::vector<torch::Tensor>& params_;
  std::vector<torch::Tensor> backup_;
};

void saveTensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  torch::serialize::OutputArchive archive;
  for (const auto& [name, t] : tensors) archive.write(name, t.detach().to(torch::kCPU));
  saveArchive(archive, path);
}

std::vector<std::pair<std::string, torch::Tensor>> namedParams(TAEHV& model) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : model->named_parameters()) out.emplace_back(item.key(), item.value());
  return out;
}

/// Random init for training from scratch. libtorch's default conv init (kaiming-uniform, a = sqrt(5)) shrinks
/// the signal about 2.5x per conv + ReLU; through TAEHV's ~12 plain convs the output starts as a constant and
/// reconstruction training stalls there (measured: flat grey previews, PSNR stuck at ~13 dB for 100 steps).
/// So: variance-preserving normal weights (He gain for convs followed by a ReLU, gain 1 for the others: TPool,
/// TGrow, strided and output convs), zero biases, each MemBlock's last conv scaled by 0.1 so the residual
/// branches start small, the final decoder conv scaled by 0.1 with its bias at 0.5 (mid-grey, as upstream).
void initForTraining(TAEHV& model) {
  torch::NoGradGuard no_grad;
  std::string last_bias;
  auto endsWith = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  for (auto& item : model->named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor& p = item.value();
    if (endsWith(name, ".bias")) {
      p.zero_();
      if (name.rfind("decoder.", 0) == 0) last_bias = name;
      continue;
    }
    if (p.dim() != 4) continue;
    const bool relu_follows = endsWith(name, ".conv.0.weight") || endsWith(name, ".conv.2.weight") ||
                              name == "encoder.0.weight" || name == "decoder.1.weight" || name == "decoder.20.weight";
    if (relu_follows) {
      torch::nn::init::kaiming_normal_(p, 0.0, torch::kFanIn, torch::kReLU);
    } else {
      torch::nn::init::kaiming_normal_(p, 0.0, torch::kFanIn, torch::kLinear);
    }
    if (endsWith(name, ".conv.4.weight")) p.mul_(0.1);
  }
  if (!last_bias.empty()) {
    model->named_parameters()[last_bias].fill_(0.5);
    const std::string last_weight = last_bias.substr(0, last_bias.size() - 5) + ".weight";
    model->named_parameters()[last_weight].mul_(0.1);
  }
}

TAEHV makeModel(const Config& cfg, const torch::Device& device) {
  torch::manual_seed(static_cast<uint64_t>(cfg.train.seed));
  TAEHV model(TAEHVOptions::forVariant(cfg.model.variant));
  if (!cfg.model.init.empty()) {
    loadWeights(*model, cfg.model.init);
  } else {
    initForTraining(model);
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

void setThreads(const Config& cfg, const DistEnv& env) {
  int threads = static_cast<int>(cfg.train.threads);
  if (const char* omp = std::getenv("OMP_NUM_THREADS"); threads <= 0 && omp && std::atoi(omp) > 0) {
    threads = std::atoi(omp);  // set per worker by taehv-run / torchrun
  }
  if (threads <= 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(1, cores / std::max(1, env.local_world_size));
  }
  torch::set_num_threads(threads);
}

class StopSignals {
 public:
  StopSignals() {
    struct sigaction sa {};
    sa.sa_handler = onStopSignal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &old_term_);
    sigaction(SIGINT, &sa, &old_int_);
    sa.sa_handler = onStopGraceOver;
    sigaction(SIGALRM, &sa, &old_alrm_);
  }
  ~StopSignals() {
    alarm(0);
    g_in_step_loop = false;
    sigaction(SIGTERM, &old_term_, nullptr);
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGALRM, &old_alrm_, nullptr);
  }

 private:
  struct sigaction old_term_ {};
  struct sigaction old_int_ {};
  struct sigaction old_alrm_ {};
};

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

// Before anything heavy: a CPU step that cannot fit is refused with the figures, rather than allocated until
// libtorch gives up (or the kernel's OOM killer ends a rank). A GPU's memory is the device's, checked by libtorch.
void checkCpuMemory(const Config& cfg, const DistEnv& env) {
  if (cfg.train.device != "cpu" && !(cfg.train.device == "auto" && !torch::cuda::is_available())) return;
  const uint64_t available = availableMemory();
  if (available == 0) return;
  const std::string problem = cfg.memoryCheck(available, env.local_world_size);
  if (!problem.empty()) throw ConfigError(problem);
}

struct Run {
  const TrainOptions& options;
  const Config& cfg;
  DistEnv env;
  torch::Device device{torch::kCPU};
  bool rank0 = true;
  bool tty = false;

  void say(const std::string& line) const {
    if (!rank0) return;
    if (tty) std::fputs("\r\033[K", stdout);
    std::fprintf(stdout, "%s\n", line.c_str());
    std::fflush(stdout);
  }
};

int train(const TrainOptions& options, Distributed& dist, const DistEnv& env, const torch::Device& device) {
  const Config& cfg = options.config;
  Run run{options, cfg, env, device, env.rank == 0, isatty(STDOUT_FILENO) == 1};
  const int64_t W = env.world_size, B = cfg.train.batch_per_rank, A = cfg.train.grad_accum, T = cfg.data.frames;
  const std::string out_dir = cfg.output.dir;

  TAEHV model = makeModel(cfg, device);
  std::vector<torch::Tensor> params = model->parameters();
  int64_t n_params = 0;
  for (const auto& p : params) n_params += p.numel();

  std::unique_ptr<torch::optim::Optimizer> optimizer_holder;
  if (cfg.train.optimizer == "sgd") {
    optimizer_holder = std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(cfg.train.lr).weight_decay(cfg.train.weight_decay));
  } else {
    optimizer_holder = std::make_unique<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(cfg.train.lr)
                    .betas({cfg.train.beta1, cfg.train.beta2})
                    .weight_decay(cfg.train.weight_decay));
  }
  torch::optim::Optimizer& optimizer = *optimizer_holder;
  // ZeRO stages 1-2: the AdamW state lives sharded in `zero`; `optimizer` only carries it through checkpoints.
  std::unique_ptr<ShardedAdamW> zero;
  auto* adamw = dynamic_cast<torch::optim::AdamW*>(&optimizer);
  if (cfg.train.zero_stage > 0) {
    ShardedAdamWOptions zero_options;
    zero_options.stage = static_cast<int>(cfg.train.zero_stage);
    zero_options.beta1 = cfg.train.beta1;
    zero_options.beta2 = cfg.train.beta2;
    zero_options.weight_decay = cfg.train.weight_decay;
    zero_options.bucket_mb = cfg.dist.bucket_mb;
    zero = std::make_unique<ShardedAdamW>(dist, params, zero_options);
  }
  std::vector<torch::Tensor> ema;
  if (cfg.train.ema > 0) {
    for (const auto& p : params) ema.push_back(p.detach().clone());
  }

  // Resume.
  int64_t start_step = 0, base_position = 0, skipped_before = 0;
  std::string resumed_from;
  if (run.rank0) {
    for (const auto& stale : removeStaleTemporaries(out_dir)) run.say("removed " + stale + " (left by a killed run)");
  }
  if (options.resume.empty()) {
    const auto existing = listCheckpoints(out_dir);
    if (!existing.empty()) {
      throw CheckpointError("output.dir " + out_dir + " already holds checkpoints of an earlier run (newest: " +
                            existing.front().second + "); training from step 0 would overwrite them. Continue that "
                            "run with --resume latest, or give another output.dir (--set output.dir=...)");
    }
  } else {
    auto found = resolveResume(options.resume, out_dir, [&](const std::string& w) {
      std::fprintf(stderr, "[rank %d] warning: %s\n", env.rank, w.c_str());
    });
    if (found) {
      resumed_from = *found;
      std::ifstream in(fs::path(*found) / "state.json");
      const CheckpointState state = parseCheckpointState(std::string(std::istreambuf_iterator<char>(in), {}));
      start_step = state.step;
      base_position = state.samples_consumed;
      skipped_before = state.data_skipped;
      {
        torch::serialize::InputArchive archive;
        archive.load_from((fs::path(*found) / "model.pt").string(), device);
        torch::NoGradGuard no_grad;
        for (auto& item : model->named_parameters()) {
          torch::Tensor t;
          archive.read(item.key(), t);
          item.value().copy_(t);
        }
      }
      {
        torch::serialize::InputArchive archive;
        archive.load_from((fs::path(*found) / "optimizer.pt").string(), device);
        optimizer.load(archive);
        if (zero) zero->importState(*adamw);  // this rank's shard, at any earlier world size and stage
      }
      if (!ema.empty() && fs::exists(fs::path(*found) / "ema.pt")) {
        torch::serialize::InputArchive archive;
        archive.load_from((fs::path(*found) / "ema.pt").string(), device);
        auto named = namedParams(model);
        for (size_t i = 0; i < ema.size(); ++i) {
          torch::Tensor t;
          archive.read(named[i].first, t);
          ema[i].copy_(t);
        }
      }
      if (fs::exists(fs::path(*found) / "rng.pt")) {
        torch::Tensor rng_state;
        torch::load(rng_state, (fs::path(*found) / "rng.pt").string());
        at::Generator generator = at::detail::getDefaultCPUGenerator();
        generator.set_state(rng_state);
      }
    } else if (run.rank0) {
      run.say("resume: no checkpoint in " + out_dir + " yet; starting from step 0");
    }
  }
  // Every rank must resume from the same step (checkpoints live on a shared filesystem).
  {
    auto check = torch::tensor({static_cast<double>(start_step), 1.0}, torch::kDouble);
    dist.allreduceSum(check);
    if (check[0].item<double>() != static_cast<double>(start_step * W)) {
      throw std::runtime_error("ranks found different checkpoints to resume from; output.dir must be on a "
                               "filesystem every rank sees");
    }
  }
  // Every rank starts from rank 0's weights (and EMA).
  dist.broadcastFromRank0(params);
  if (!ema.empty()) dist.broadcastFromRank0(ema);

  // ZeRO-2 reduce-scatters the gradients itself: GradSync then only accumulates the sliced steps' gradients.
  GradSync sync(dist, params, cfg.dist.bucket_mb, !zero || zero->wantsAllReducedGradients());
  const int threads = torch::get_num_threads();
  const SliceBackward::Plan slice_plan = device.is_cpu()
                                             ? SliceBackward::plan(static_cast<int>(cfg.train.slices), threads, B)
                                             : SliceBackward::Plan{1, threads};
  SliceBackward slicer(slice_plan);
  std::shared_ptr<const ClipSource> source = makeSource(cfg.data, static_cast<uint64_t>(cfg.train.seed));
  const bool distill = cfg.train.objective == "distillation" ||
                       (cfg.train.objective == "auto" && source->hasLatents());
  if (cfg.train.objective == "distillation" && !source->hasLatents()) {
    throw ConfigError("train.objective=distillation needs teacher latents for every item of data.source "
                      "(X.latents.safetensors beside each video or frame folder X)");
  }
  Loader::Layout layout{base_position, start_step, A, W, env.rank, B};
  Loader loader(source, cfg.data, static_cast<uint64_t>(cfg.train.seed), layout, cfg.data.prefetch);
  std::unique_ptr<EvalClips> eval_clips;
  if (cfg.eval.every > 0) eval_clips = std::make_unique<EvalClips>(cfg, static_cast<uint64_t>(cfg.train.seed));

  std::unique_ptr<TfEventsWriter> tb;
  std::ofstream metrics;
  if (run.rank0) {
    fs::create_directories(out_dir);
    if (cfg.log.tensorboard) tb = std::make_unique<TfEventsWriter>((fs::path(out_dir) / "tensorboard").string());
    // A resumed run logs again the steps after its checkpoint: drop those rows first, so no step is there twice.
    if (!resumed_from.empty()) trimMetrics((fs::path(out_dir) / "metrics.jsonl").string(), start_step);
    metrics.open(fs::path(out_dir) / "metrics.jsonl", std::ios::app);
    if (!metrics) throw OutputFileError("cannot open " + out_dir + "/metrics.jsonl for appending: " + std::strerror(errno));
    run.say("taehv-train: " + std::to_string(W) + " rank(s), backend " + dist.backendName() + ", device " +
            device.str() + ", " + std::to_string(threads) + " threads/rank" +
            (slice_plan.slices > 1 ? " (" + std::to_string(slice_plan.slices) + " batch slices x " +
                                         std::to_string(slice_plan.intra_threads) + ")"
                                   : std::string()) +
            ", model " +
            cfg.model.variant + " (" + std::to_string(n_params) + " parameters, " +
            std::to_string(sync.bucketCount()) + " gradient buckets), " +
            (zero ? "ZeRO stage " + std::to_string(zero->stage()) + " (AdamW state of " +
                        std::to_string(zero->shardEnd() - zero->shardBegin()) + " of " +
                        std::to_string(zero->flatNumel()) + " elements on rank 0)"
                  : std::string("ZeRO stage 0")) +
            ", objective " +
            (distill ? "distillation" : "reconstruction") + ", data " + cfg.data.source + " (" +
            std::to_string(source->size()) + " items)");
    run.say("effective config:\n" + cfg.toYaml());
    if (!resumed_from.empty()) run.say("resumed from " + resumed_from + " at step " + std::to_string(start_step));
  }

  auto saveAt = [&](int64_t step_done) {
    if (zero) zero->exportState(*adamw);  // collective: the full state, in stage 0's format, on rank 0
    if (!run.rank0) return std::string();
    const auto saved = saveCheckpoint(out_dir, step_done, cfg.checkpoint.keep, [&](const std::string& dir) {
      saveTensors(dir + "/model.pt", namedParams(model));
      {
        torch::serialize::OutputArchive archive;
        optimizer.save(archive);
        saveArchive(archive, dir + "/optimizer.pt");
      }
      if (!ema.empty()) {
        auto named = namedParams(model);
        std::vector<std::pair<std::string, torch::Tensor>> e;
        for (size_t i = 0; i < ema.size(); ++i) e.emplace_back(named[i].first, ema[i]);
        saveTensors(dir + "/ema.pt", e);
      }
      {
        std::ostringstream rng;
        torch::save(at::detail::getDefaultCPUGenerator().get_state(), rng);
        writeText(dir + "/rng.pt", rng.str());
      }
      nlohmann::json state;
      state["step"] = step_done;
      state["samples_consumed"] = base_position + (step_done - start_step) * A * W * B;
      state["world_size"] = W;
      state["batch_per_rank"] = B;
      state["grad_accum"] = A;
      state["seed"] = cfg.train.seed;
      state["data_skipped"] = skipped_before + loader.skipped();
      writeText(dir + "/state.json", state.dump(1) + "\n");
      writeText(dir + "/config.yaml", cfg.toYaml());
    });
    if (zero) ShardedAdamW::releaseExported(*adamw);
    return saved;
  };

  const auto run_start = Clock::now();
  double step_time_avg = 0;
  double data_wait_window = 0, step_time_window = 0, loss_window = 0, psnr_window = 0, optimizer_window = 0;
  int64_t window_steps = 0;
  int64_t last_saved = start_step;
  int64_t step = start_step;
  bool stopped_by_signal = false;
  g_in_step_loop = true;
  for (; step < cfg.train.steps; ++step) {
    const auto t0 = Clock::now();
    const double lr = learningRate(cfg.train, step);
    for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
    for (auto& p : params) p.mutable_grad().reset();
    double loss_sum = 0, psnr_sum = 0, data_wait = 0;
    Objective last;
    for (int64_t a = 0; a < A; ++a) {
      const auto w0 = Clock::now();
      Batch batch = loader.next();
      data_wait += seconds(Clock::now() - w0);
      sync.setSync(a == A - 1);
      const bool autocast = device.is_cuda() && cfg.train.bf16;
      if (autocast) {
        at::autocast::set_autocast_dtype(c10::DeviceType::CUDA, at::kBFloat16);
        at::autocast::set_autocast_enabled(c10::DeviceType::CUDA, true);
      }
      Objective obj;
      if (slicer.slices() > 1) {
        obj = slicedObjective(slicer, sync, model, params, batch, device, cfg.train.loss, distill,
                              1.0 / static_cast<double>(A));
      } else {
        obj = computeObjective(model, batch, device, cfg.train.loss, distill);
        if (autocast) at::autocast::set_autocast_enabled(c10::DeviceType::CUDA, false);
        (obj.loss / static_cast<double>(A)).backward();
      }
      loss_sum += obj.loss.item<double>();
      psnr_sum += psnr(obj.pred, obj.target);
      last = std::move(obj);
    }
    // optimizer_s: everything after the last backward (gradient communication left, clipping, the update and, at
    // ZeRO stages 1-2, the all-gather of the parameters), the part ZeRO changes.
    const auto update_start = Clock::now();
    double grad_norm = 0;
    if (zero) {
      sync.finish();
      zero->prepareGradients();
      if (cfg.train.grad_clip > 0) grad_norm = zero->clipGradNorm(cfg.train.grad_clip);
      zero->step(lr);
    } else {
      sync.finish();
      if (cfg.train.grad_clip > 0) {
        grad_norm = torch::nn::utils::clip_grad_norm_(params, cfg.train.grad_clip);
      }
      optimizer.step();
    }
    optimizer_window += seconds(Clock::now() - update_start);
    if (!ema.empty()) {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < ema.size(); ++i) ema[i].mul_(cfg.train.ema).add_(params[i].detach(), 1 - cfg.train.ema);
    }
    // One small all-reduce per step: loss and PSNR means for the log, and whether any rank must stop.
    const bool want_stop = g_stop_signal.load() != 0 || (options.stop_at_step > 0 && step + 1 >= options.stop_at_step);
    auto stats = torch::tensor({loss_sum / static_cast<double>(A), psnr_sum / static_cast<double>(A),
                                want_stop ? 1.0 : 0.0, static_cast<double>(loader.skipped())},
                               torch::kDouble);
    dist.allreduceSum(stats);
    const double loss_mean = stats[0].item<double>() / static_cast<double>(W);
    const double psnr_mean = stats[1].item<double>() / static_cast<double>(W);
    const bool stop = stats[2].item<double>() > 0;
    const auto skipped_total = static_cast<int64_t>(stats[3].item<double>()) + skipped_before;
    if (!std::isfinite(loss_mean)) {
      const std::string kept = last_saved > 0 ? "the last good checkpoint (step " + std::to_string(last_saved) +
                                                    ") in " + out_dir + " is kept: resume it with --resume latest and"
                                              : "no checkpoint was saved yet: start again with";
      throw std::runtime_error("the loss is " + std::to_string(loss_mean) + " at step " + std::to_string(step + 1) +
                               " (training diverged); stopped without saving these weights; " + kept +
                               " a lower train.lr or more train.warmup_steps");
    }

    const double step_s = seconds(Clock::now() - t0);
    step_time_avg = step == start_step ? step_s : 0.9 * step_time_avg + 0.1 * step_s;
    data_wait_window += data_wait;
    step_time_window += step_s;
    loss_window += loss_mean;
    psnr_window += psnr_mean;
    ++window_steps;
    const int64_t done = step + 1;
    const bool last_step = done == cfg.train.steps;
    if (run.rank0 && (done % cfg.log.every == 0 || last_step || stop || done == start_step + 1)) {
      const double step_mean = step_time_window / static_cast<double>(window_steps);
      const double wait_mean = data_wait_window / static_cast<double>(window_steps);
      // Loss and PSNR: means over the steps since the previous log line, over all ranks.
      const double loss_log = loss_window / static_cast<double>(window_steps);
      const double psnr_log = psnr_window / static_cast<double>(window_steps);
      const double fps = static_cast<double>(A * W * B * T) / step_mean;
      const double eta = step_time_avg * static_cast<double>(cfg.train.steps - done);
      char line[512];
      std::snprintf(line, sizeof line,
                    "step %lld/%lld | loss %.5f | PSNR %.2f dB | %.1f frames/s | step %.3f s | data-wait %.3f s | "
                    "lr %.2e | ETA %s",
                    static_cast<long long>(done), static_cast<long long>(cfg.train.steps), loss_log, psnr_log, fps,
                    step_mean, wait_mean, lr, formatDuration(eta).c_str());
      run.say(line);
      nlohmann::json m;
      m["step"] = done;
      m["loss"] = loss_log;
      m["psnr"] = psnr_log;
      m["lr"] = lr;
      m["frames_per_s"] = fps;
      m["step_s"] = step_mean;
      m["data_wait_s"] = wait_mean;
      m["optimizer_s"] = optimizer_window / static_cast<double>(window_steps);
      m["grad_norm"] = grad_norm;
      m["data_skipped"] = skipped_total;
      m["elapsed_s"] = seconds(Clock::now() - run_start);
      metrics << m.dump() << "\n" << std::flush;
      if (!metrics) {
        throw OutputFileError("cannot append to " + out_dir + "/metrics.jsonl (" + freeSpaceNote(out_dir) + ")");
      }
      if (tb) {
        tb->scalar("train/loss", done, loss_log);
        tb->scalar("train/psnr_db", done, psnr_log);
        tb->scalar("train/lr", done, lr);
        tb->scalar("train/frames_per_s", done, fps);
        tb->scalar("train/step_s", done, step_mean);
        tb->scalar("train/data_wait_s", done, wait_mean);
        tb->scalar("train/grad_norm", done, grad_norm);
      }
      data_wait_window = step_time_window = loss_window = psnr_window = optimizer_window = 0;
      window_steps = 0;
    } else if (run.rank0 && run.tty) {
      const int width = 30;
      const int filled = static_cast<int>(width * done / cfg.train.steps);
      std::printf("\r[%s%s] %lld/%lld loss %.5f", std::string(static_cast<size_t>(filled), '#').c_str(),
                  std::string(static_cast<size_t>(width - filled), '.').c_str(), static_cast<long long>(done),
                  static_cast<long long>(cfg.train.steps), loss_mean);
      std::fflush(stdout);
    }
    if (eval_clips && !stop && (done % cfg.eval.every == 0 || last_step)) {
      // Every rank evaluates its share (clips rank, rank + W, ...) with the EMA weights when EMA is on.
      const auto e0 = Clock::now();
      RgbImage eval_preview;
      EvalSums sums;
      {
        EmaWeights swap(params, ema);
        sums = evaluateClips(model, *eval_clips, device, env.rank, W, run.rank0 ? &eval_preview : nullptr);
      }
      auto totals = torch::tensor({sums.psnr, sums.ssim, static_cast<double>(sums.clips)}, torch::kDouble);
      dist.allreduceSum(totals);
      const auto n = static_cast<int64_t>(totals[2].item<double>());
      const double eval_s = seconds(Clock::now() - e0);
      if (run.rank0 && n > 0) {
        const double eval_psnr = totals[0].item<double>() / static_cast<double>(n);
        const double eval_ssim = totals[1].item<double>() / static_cast<double>(n);
        const std::string what = eval_clips->heldOut() ? "held-out" : "eval (not held out: file source)";
        char line[256];
        std::snprintf(line, sizeof line, "step %lld/%lld | %s PSNR %.2f dB | SSIM %.4f | %lld clips %lldx%lld | %.1f s",
                      static_cast<long long>(done), static_cast<long long>(cfg.train.steps), what.c_str(), eval_psnr,
                      eval_ssim, static_cast<long long>(n),
                      static_cast<long long>(cfg.eval.frames > 0 ? cfg.eval.frames : T),
                      static_cast<long long>(cfg.eval.size > 0 ? cfg.eval.size : cfg.data.size), eval_s);
        run.say(line);
        nlohmann::json m;
        m["step"] = done;
        m["eval_psnr"] = eval_psnr;
        m["eval_ssim"] = eval_ssim;
        m["eval_clips"] = n;
        m["eval_held_out"] = eval_clips->heldOut();
        m["eval_ema"] = !ema.empty();
        m["eval_s"] = eval_s;
        m["elapsed_s"] = seconds(Clock::now() - run_start);
        metrics << m.dump() << "\n" << std::flush;
        if (tb) {
          tb->scalar("eval/psnr_db", done, eval_psnr);
          tb->scalar("eval/ssim", done, eval_ssim);
        }
        if (eval_preview.width > 0 && cfg.log.preview_every > 0) {
          const auto png = encodePng(eval_preview);
          char name[64];
          std::snprintf(name, sizeof name, "eval-step-%07lld.png", static_cast<long long>(done));
          fs::create_directories(fs::path(out_dir) / "previews");
          writeFileBytes((fs::path(out_dir) / "previews" / name).string(), png);
          if (tb) tb->image("eval/input_top_reconstruction_bottom", done, png, eval_preview.width, eval_preview.height);
        }
      } else if (run.rank0) {
        run.say("step " + std::to_string(done) + ": no readable eval clip; evaluation skipped");
      }
    }
    if (run.rank0 && cfg.log.preview_every > 0 && (done % cfg.log.preview_every == 0 || last_step)) {
      const RgbImage img = previewImage(last.target, last.pred);
      const auto png = encodePng(img);
      char name[64];
      std::snprintf(name, sizeof name, "step-%07lld.png", static_cast<long long>(done));
      fs::create_directories(fs::path(out_dir) / "previews");
      writeFileBytes((fs::path(out_dir) / "previews" / name).string(), png);
      if (tb) tb->image("preview/input_top_reconstruction_bottom", done, png, img.width, img.height);
    }
    if ((cfg.checkpoint.every > 0 && done % cfg.checkpoint.every == 0) || last_step || stop) {
      const auto path = saveAt(done);
      last_saved = done;
      if (stop && run.rank0) {
        run.say("stopping after step " + std::to_string(done) + (g_stop_signal ? " (signal)" : " (--stop-at-step)") +
                "; checkpoint " + path + "; continue with --resume latest");
      }
    }
    if (stop) {
      stopped_by_signal = true;
      ++step;
      break;
    }
  }
  if (!stopped_by_signal && run.rank0 && cfg.checkpoint.export_safetensors) {
    // The exported weights are the EMA weights when EMA is on (the upstream recipe's weight averaging).
    {
      EmaWeights swap(params, ema);
      saveWeights(*model, (fs::path(out_dir) / "weights.safetensors").string(), torch::kFloat);
    }
    run.say("exported " + (fs::path(out_dir) / "weights.safetensors").string() +
            (ema.empty() ? "" : " (EMA weights)"));
  }
  dist.stopWatching();
  dist.barrier();
  if (run.rank0) {
    run.say("done: " + std::to_string(step) + "/" + std::to_string(cfg.train.steps) + " steps in " +
            formatDuration(seconds(Clock::now() - run_start)) + "; output in " + out_dir);
  }
  return 0;
}

/// Tells the other ranks, then abandons the process group without its destructor: that would wait for
/// collectives a dead or stuck peer never completes.
int failed(std::unique_ptr<Distributed>& dist, const std::string& reason, int status) {
  if (dist) {
    if (!reason.empty()) dist->announceFailure(reason);
    dist->stopWatching();
    (void)dist.release();
  }
  std::fflush(stdout);
  std::fflush(stderr);
  return status;
}

}  // namespace

int runTraining(const TrainOptions& options) {
  DistEnv env;
  try {
    env = DistEnv::fromEnvironment();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "taehv-train: %s\n", e.what());
    return 2;
  }
  g_stop_signal = 0;
  StopSignals signals;
  std::unique_ptr<Distributed> dist;
  try {
    options.config.validate();
    setThreads(options.config, env);
    checkCpuMemory(options.config, env);
    const torch::Device device = pickDevice(options.config, env);
    if (device.is_cuda()) torch::cuda::manual_seed_all(static_cast<uint64_t>(options.config.train.seed));
    // 0 = auto; trainCommand resolves it from the environment first, direct callers get the default.
    const double timeout_s = options.config.dist.timeout_s > 0 ? options.config.dist.timeout_s
                                                                : DistConfig::kDefaultTimeoutS;
    dist = std::make_unique<Distributed>(env, options.config.dist.backend,
                                         std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)),
                                         device);
    return train(options, *dist, env, device);
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "[rank %d] taehv-train: %s\n", env.rank, e.what());
    return failed(dist, e.what(), 2);
  } catch (const CheckpointError& e) {
    std::fprintf(stderr, "[rank %d] taehv-train: %s\n", env.rank, e.what());
    return failed(dist, e.what(), 2);
  } catch (const DataError& e) {
    std::fprintf(stderr, "[rank %d] taehv-train: data: %s\n", env.rank, e.what());
    return failed(dist, e.what(), 2);
  } catch (const std::exception& e) {
    if (dist && dist->aborted()) {
      std::fprintf(stderr, "[rank %d] taehv-train: stopped because another rank failed\n", env.rank);
      return failed(dist, "", kAbortExitCode);
    }
    std::fprintf(stderr, "[rank %d] taehv-train: error: %s\n", env.rank, e.what());
    return failed(dist, e.what(), 1);
  }
}

EvalResult runEval(const EvalOptions& options) {
  const Config& cfg = options.config;
  cfg.validate();
  DistEnv env;
  setThreads(cfg, env);
  const torch::Device device = pickDevice(cfg, env);
  TAEHV model(TAEHVOptions::forVariant(cfg.model.variant));
  std::string path = options.checkpoint;
  if (path.size() > 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0) {
    loadWeights(*model, path);
  } else {
    auto found = resolveResume(
        path, cfg.output.dir, [](const std::string& w) { std::fprintf(stderr, "warning: %s\n", w.c_str()); },
        "--checkpoint");
    if (!found) throw std::runtime_error("no checkpoint in " + cfg.output.dir + "; pass --checkpoint PATH");
    const bool use_ema = options.ema && fs::exists(fs::path(*found) / "ema.pt");
    torch::serialize::InputArchive archive;
    archive.load_from((fs::path(*found) / (use_ema ? "ema.pt" : "model.pt")).string());
    torch::NoGradGuard no_grad;
    for (auto& item : model->named_parameters()) {
      torch::Tensor t;
      archive.read(item.key(), t);
      item.value().copy_(t);
    }
    for (const auto& item : model->named_parameters()) {
      if (!torch::isfinite(item.value()).all().item<bool>()) {
        throw std::runtime_error("checkpoint " + *found + ": tensor '" + item.key() + "' holds NaN or infinite "
                                 "values (a diverged run?): evaluate an earlier checkpoint");
      }
    }
    std::fprintf(stderr, "eval: %s weights of %s\n", use_ema ? "EMA" : "model", found->c_str());
  }
  model->to(device);
  const EvalClips clips(cfg, static_cast<uint64_t>(cfg.train.seed));
  const EvalSums sums = evaluateClips(model, clips, device, 0, 1, nullptr);
  EvalResult result;
  result.psnr = sums.psnr;
  result.ssim = sums.ssim;
  result.clips = sums.clips;
  result.held_out = clips.heldOut();
  if (result.clips == 0) throw DataError("no readable clip to evaluate in " + cfg.data.source);
  result.psnr /= static_cast<double>(result.clips);
  result.ssim /= static_cast<double>(result.clips);
  return result;
}

}  // namespace taehv::train
