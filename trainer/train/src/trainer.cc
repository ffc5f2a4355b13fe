#include "taehv/train/trainer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "evaluation.h"
#include "objective.h"
#include "run_setup.h"
#include "taehv/log.h"
#include "taehv/model/autocast.h"
#include "taehv/model/metrics.h"
#include "taehv/model/safetensors.h"
#include "taehv/model/slice_backward.h"
#include "taehv/train/checkpoint.h"
#include "taehv/train/data.h"
#include "taehv/train/dist.h"
#include "train_log.h"
#include "train_state.h"

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

/// torch::nn::utils::clip_grad_norm_ (L2) without its multiplication of every gradient by a coefficient clamped to
/// 1 when the norm is below max_norm (x * 1 == x, so the gradients and the returned norm are its own to the bit):
/// that pass over TAEHV's 43 MB of gradients took 1.9 ms of a step whose norm is ~0.05 against a max_norm of 1.
double clipGradNorm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads, norms;
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    grads.push_back(p.grad());
    norms.push_back(grads.back().norm(2.0));
  }
  if (grads.empty()) return 0.0;
  const torch::Tensor total = norms.size() == 1 ? norms[0] : torch::stack(norms).norm(2.0);
  const torch::Tensor coef = torch::clamp(max_norm / (total + 1e-6), std::nullopt, 1.0);
  if (!(coef.item<double>() == 1.0)) {  // NaN too: multiplied in, as torch does
    for (auto& g : grads) g.mul_(coef);
  }
  return total.item<double>();
}

/// Every rank must resume from the same step (checkpoints live on a shared filesystem).
void checkSameStart(Distributed& dist, int64_t start_step, int64_t world) {
  auto check = torch::tensor({static_cast<double>(start_step), 1.0}, torch::kDouble);
  dist.allreduceSum(check);
  if (check[0].item<double>() != static_cast<double>(start_step * world)) {
    throw std::runtime_error("ranks found different checkpoints to resume from; output.dir must be on a "
                             "filesystem every rank sees");
  }
}

/// The first line of a run: ranks, backend, device, threads, model, ZeRO, CPU precision, objective, data.
std::string runSummary(const Config& cfg, Distributed& dist, const torch::Device& device, const TrainState& state,
                       const GradSync& sync, const SliceBackward::Plan& slices, bool autocast, bool distill,
                       int64_t items) {
  const auto& zero = state.zero;
  return "taehv-train: " + std::to_string(dist.worldSize()) + " rank(s), backend " + dist.backendName() +
         ", device " + device.str() + ", " + std::to_string(torch::get_num_threads()) + " threads/rank" +
         (slices.slices > 1 ? " (" + std::to_string(slices.slices) + " batch slices x " +
                                  std::to_string(slices.intra_threads) + ")"
                            : std::string()) +
         ", model " + cfg.model.variant + " (" + std::to_string(state.parameterCount()) + " parameters, " +
         std::to_string(sync.bucketCount()) + " gradient buckets), " +
         (zero ? "ZeRO stage " + std::to_string(zero->stage()) + " (AdamW state of " +
                     std::to_string(zero->shardEnd() - zero->shardBegin()) + " of " +
                     std::to_string(zero->flatNumel()) + " elements on rank 0)"
               : std::string("ZeRO stage 0")) +
         (device.is_cpu() ? std::string(", CPU precision ") + (autocast ? "bf16" : "fp32") +
                                " (train.cpu_precision " + cfg.get("train.cpu_precision") + ")"
                          : std::string()) +
         ", objective " + (distill ? "distillation" : "reconstruction") + ", data " + cfg.data.source + " (" +
         std::to_string(items) + " items)";
}

int train(const TrainOptions& options, Distributed& dist, const DistEnv& env, const torch::Device& device) {
  const Config& cfg = options.config;
  const bool rank0 = env.rank == 0;
  const int64_t W = env.world_size, B = cfg.train.batch_per_rank, T = cfg.data.frames;
  const std::string out_dir = cfg.output.dir;

  TrainState state = makeTrainState(cfg, dist, device);
  TAEHV& model = state.model;
  std::vector<torch::Tensor>& params = state.params;

  // Resume.
  if (rank0) {
    for (const auto& stale : removeStaleTemporaries(out_dir)) {
      log::info("removed " + stale + " (left by a killed run)");
    }
  }
  CheckpointState resumed;
  const auto found = checkpointToResume(options.resume, out_dir, [](const std::string& w) { log::warn(w); });
  if (found) {
    resumed = loadTrainState(*found, state, device);
  } else if (!options.resume.empty() && rank0) {
    log::info("resume: no checkpoint in " + out_dir + " yet; starting from step 0");
  }
  const int64_t start_step = resumed.step;
  checkSameStart(dist, start_step, W);
  // A resume at another world size keeps the global batch (elastic restarts): grad_accum, else lr, follows.
  const BatchShape shape = batchShape(cfg.train, W, found ? std::optional<CheckpointState>(resumed) : std::nullopt);
  const int64_t A = shape.grad_accum;
  TrainConfig schedule = cfg.train;  // learningRate's input: train.lr times the linear-scaling factor, if any
  schedule.lr *= shape.lr_scale;
  // Every rank starts from rank 0's weights (and EMA).
  dist.broadcastFromRank0(params);
  if (!state.ema.empty()) dist.broadcastFromRank0(state.ema);

  // ZeRO reduces the gradients itself (in GradSync's buckets): GradSync then only adds the sliced steps' gradients.
  GradSync sync(dist, params, cfg.dist.bucket_mb, !state.zero);
  // bf16 autocast is per thread, so its steps are one pass.
  const bool autocast = bf16Autocast(cfg, device);
  const SliceBackward::Plan slice_plan = device.is_cpu() && !autocast
                                             ? SliceBackward::plan(static_cast<int>(cfg.train.slices),
                                                                   torch::get_num_threads(), B)
                                             : SliceBackward::Plan{1, torch::get_num_threads()};
  SliceBackward slicer(slice_plan);
  std::shared_ptr<const ClipSource> source = makeSource(cfg.data, static_cast<uint64_t>(cfg.train.seed));
  const bool distill = cfg.train.objective == ObjectiveKind::kDistillation ||
                       (cfg.train.objective == ObjectiveKind::kAuto && source->hasLatents());
  if (cfg.train.objective == ObjectiveKind::kDistillation && !source->hasLatents()) {
    throw ConfigError("train.objective=distillation needs teacher latents for every item of data.source "
                      "(X.latents.safetensors beside each video or frame folder X)");
  }
  Loader::Layout layout{resumed.samples_consumed, start_step, A, W, env.rank, B};
  Loader loader(source, cfg.data, static_cast<uint64_t>(cfg.train.seed), layout, cfg.data.prefetch);
  std::unique_ptr<EvalClips> eval_clips;
  if (cfg.eval.every > 0) eval_clips = std::make_unique<EvalClips>(cfg, static_cast<uint64_t>(cfg.train.seed));

  TrainLog log(cfg, rank0, start_step, found.has_value(), A * W * B * T);
  log.say(runSummary(cfg, dist, device, state, sync, slice_plan, autocast, distill, source->size()));
  log.say("effective config:\n" + cfg.toYaml());
  if (found) log.say("resumed from " + *found + " at step " + std::to_string(start_step));
  if (!shape.note.empty()) log.say("resume: " + shape.note);

  auto saveAt = [&](int64_t step_done) {
    CheckpointState saved;
    saved.step = step_done;
    saved.samples_consumed = resumed.samples_consumed + (step_done - start_step) * A * W * B;
    saved.data_skipped = resumed.data_skipped + loader.skipped();
    saved.world_size = W;
    saved.batch_per_rank = B;
    saved.grad_accum = A;
    saved.seed = cfg.train.seed;
    saved.global_batch = shape.global_batch;
    return saveTrainState(out_dir, cfg.checkpoint.keep, state, saved, cfg, rank0);
  };

  int64_t last_saved = start_step;
  int64_t step = start_step;
  bool stopped_early = false;  // by a signal or --stop-at-step
  g_in_step_loop = true;
  for (; step < cfg.train.steps; ++step) {
    const auto t0 = Clock::now();
    const double lr = learningRate(schedule, step);
    for (auto& group : state.optimizer->param_groups()) group.options().set_lr(lr);
    if (state.zero) {
      state.zero->zeroGrad();  // stage 1's .grad are views of its flat buffer: zeroed, not released
    } else {
      for (auto& p : params) p.mutable_grad().reset();
    }
    double loss_sum = 0, psnr_sum = 0, data_wait = 0;
    const TrainConfig terms = lossTermsAt(cfg.train, step);
    Objective last;
    for (int64_t a = 0; a < A; ++a) {
      const auto w0 = Clock::now();
      Batch batch = loader.next();
      data_wait += seconds(Clock::now() - w0);
      sync.setSync(a == A - 1);
      if (state.zero) state.zero->setSync(a == A - 1);
      Objective obj;
      if (slicer.slices() > 1) {  // never with autocast (slice_plan)
        obj = slicedObjective(slicer, sync, model, params, batch, device, terms, distill,
                              1.0 / static_cast<double>(A));
      } else {
        {
          Bf16Autocast forward(device.type(), autocast);
          obj = computeObjective(model, batch, device, terms, distill);
        }
        (obj.loss / static_cast<double>(A)).backward();
      }
      loss_sum += obj.loss.item<double>();
      psnr_sum += psnr(obj.pred, obj.target);
      last = std::move(obj);
    }
    // optimizer_s: everything after the last backward (gradient communication left, clipping, the update and, at
    // ZeRO stages 1-2, the all-gather of the parameters), the part ZeRO changes.
    const auto update_start = Clock::now();
    double grad_norm = 0, update_s = 0;  // update_s: the AdamW arithmetic alone (what ZeRO divides by the world)
    sync.finish();
    if (state.zero) {
      state.zero->prepareGradients();
      if (cfg.train.grad_clip > 0) grad_norm = state.zero->clipGradNorm(cfg.train.grad_clip);
      state.zero->step(lr);
      update_s = state.zero->lastUpdateSeconds();
    } else {
      if (cfg.train.grad_clip > 0) grad_norm = clipGradNorm(params, cfg.train.grad_clip);
      const auto arithmetic_start = Clock::now();
      state.optimizer->step();
      update_s = seconds(Clock::now() - arithmetic_start);
    }
    const double optimizer_s = seconds(Clock::now() - update_start);
    if (!state.ema.empty()) {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < state.ema.size(); ++i) {
        state.ema[i].mul_(cfg.train.ema).add_(params[i].detach(), 1 - cfg.train.ema);
      }
    }
    // One small all-reduce per step: loss and PSNR means for the log, and whether any rank must stop.
    const bool want_stop = g_stop_signal.load() != 0 || (options.stop_at_step > 0 && step + 1 >= options.stop_at_step);
    auto stats = torch::tensor({loss_sum / static_cast<double>(A), psnr_sum / static_cast<double>(A),
                                want_stop ? 1.0 : 0.0, static_cast<double>(loader.skipped())},
                               torch::kDouble);
    dist.allreduceSum(stats);
    const double loss_mean = stats[0].item<double>() / static_cast<double>(W);
    const bool stop = stats[2].item<double>() > 0;
    if (!std::isfinite(loss_mean)) {
      const std::string kept = last_saved > 0 ? "the last good checkpoint (step " + std::to_string(last_saved) +
                                                    ") in " + out_dir + " is kept: resume it with --resume latest and"
                                              : "no checkpoint was saved yet: start again with";
      throw std::runtime_error("the loss is " + std::to_string(loss_mean) + " at step " + std::to_string(step + 1) +
                               " (training diverged); stopped without saving these weights; " + kept +
                               " a lower train.lr or more train.warmup_steps");
    }

    const int64_t done = step + 1;
    const bool last_step = done == cfg.train.steps;
    TrainLog::Step figures;
    figures.done = done;
    figures.loss = loss_mean;
    figures.psnr = stats[1].item<double>() / static_cast<double>(W);
    figures.lr = lr;
    figures.step_s = seconds(Clock::now() - t0);
    figures.data_wait_s = data_wait;
    figures.optimizer_s = optimizer_s;
    figures.update_s = update_s;
    figures.grad_norm = grad_norm;
    figures.data_skipped = static_cast<int64_t>(stats[3].item<double>()) + resumed.data_skipped;
    log.step(figures, last_step || stop);
    if (eval_clips && !stop && (done % cfg.eval.every == 0 || last_step)) {
      log.eval(done,
               evaluateAcrossRanks(model, params, state.ema, *eval_clips, device, dist, env.rank,
                                   static_cast<int>(W), rank0),
               eval_clips->heldOut(), !state.ema.empty());
    }
    if (rank0 && cfg.log.preview_every > 0 && (done % cfg.log.preview_every == 0 || last_step)) {
      log.preview(done, previewImage(last.target, last.pred));
    }
    if ((cfg.checkpoint.every > 0 && done % cfg.checkpoint.every == 0) || last_step || stop) {
      const auto path = saveAt(done);
      last_saved = done;
      if (stop) {
        log.say("stopping after step " + std::to_string(done) + (g_stop_signal ? " (signal)" : " (--stop-at-step)") +
                "; checkpoint " + path + "; continue with --resume latest");
      }
    }
    if (stop) {
      stopped_early = true;
      ++step;
      break;
    }
  }
  if (!stopped_early && rank0 && cfg.checkpoint.export_safetensors) {
    // The exported weights are the EMA weights when EMA is on (the upstream recipe's weight averaging).
    {
      EmaWeights swap(params, state.ema);
      saveWeights(*model, (fs::path(out_dir) / "weights.safetensors").string(), torch::kFloat);
    }
    log.say("exported " + (fs::path(out_dir) / "weights.safetensors").string() +
            (state.ema.empty() ? "" : " (EMA weights)"));
  }
  dist.stopWatching();
  dist.barrier();
  log.say("done: " + std::to_string(step) + "/" + std::to_string(cfg.train.steps) + " steps in " +
          formatDuration(log.elapsed()) + "; output in " + out_dir);
  return 0;
}

/// The configuration, the data or a checkpoint: what the user can fix.
bool isBadInput(const std::exception& e) {
  return dynamic_cast<const ConfigError*>(&e) != nullptr || dynamic_cast<const CheckpointError*>(&e) != nullptr ||
         dynamic_cast<const DataError*>(&e) != nullptr;
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

int reportRunError(const std::exception& e) {
  log::error((dynamic_cast<const DataError*>(&e) != nullptr ? "data: " : "") + std::string(e.what()));
  return isBadInput(e) ? 2 : 1;
}

int runTraining(const TrainOptions& options) {
  DistEnv env;
  try {
    env = DistEnv::fromEnvironment();
  } catch (const std::exception& e) {
    log::error(e.what());
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
  } catch (const std::exception& e) {
    if (dist && dist->aborted() && !isBadInput(e)) {
      log::error("stopped because another rank failed");
      return failed(dist, "", kAbortExitCode);
    }
    return failed(dist, e.what(), reportRunError(e));
  }
}

}  // namespace taehv::train
