#include "taehv/train/trainer.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "checkpoint_transfer.h"
#include "evaluation.h"
#include "objective.h"
#include "phase_times.h"
#include "progress_report.h"
#include "run_setup.h"
#include "taehv/env.h"
#include "taehv/log.h"
#include "taehv/model/autocast.h"
#include "taehv/model/fused_adamw.h"
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

/// Every rank must resume from the same step (checkpoints on a shared filesystem, or node-local ones whose step the
/// node group agreed: TAEHV_RESUME_STEP).
void checkSameStart(Distributed& dist, int64_t start_step, int64_t world, bool node_local) {
  auto check = torch::tensor({static_cast<double>(start_step), 1.0}, torch::kDouble);
  dist.allreduceSum(check);
  if (check[0].item<double>() != static_cast<double>(start_step * world)) {
    throw std::runtime_error(
        node_local ? "ranks found different checkpoints to resume from in their node-local output.dir; run every "
                     "node's taehv-run with --rdzv-backend etcd --node-local-checkpoints OUTPUT_DIR, which agrees "
                     "on the step every node holds"
                   : "ranks found different checkpoints to resume from; output.dir must be on a filesystem every "
                     "rank sees (or use checkpoint.node_local with taehv-run --node-local-checkpoints)");
  }
}

/// The first line of a run: ranks, backend, device, threads, model, ZeRO, CPU precision and convolutions,
/// objective, data.
std::string runSummary(const Config& cfg, Distributed& dist, const torch::Device& device, const TrainState& state,
                       const GradSync& sync, const SliceBackward::Plan& slices, bool autocast, bool winograd,
                       bool distill, int64_t items) {
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
                                " (train.cpu_precision " + cfg.get("train.cpu_precision") + ")" +
                                (autocast ? std::string()
                                          : std::string(", convolutions ") + (winograd ? "winograd" : "direct") +
                                                " (train.cpu_conv " + cfg.get("train.cpu_conv") + ")")
                          : std::string()) +
         ", objective " + (distill ? "distillation" : "reconstruction") + ", data " + cfg.data.source + " (" +
         std::to_string(items) + " items)";
}

/// One rank's training run, cut into the steps of its procedure: the constructor prepares it (the state, the
/// checkpoint to resume, rank 0's weights everywhere, the step machinery, the data), `announce` opens the log and
/// says what runs, `step` is one optimizer step and what follows it, `finish` exports and says where it all went.
class TrainingRun {
 public:
  TrainingRun(const TrainOptions& options, Distributed& dist, const DistEnv& env, const torch::Device& device,
              ProgressReporter& progress)
      : options_(options),
        progress_(progress),
        cfg_(options.config),
        dist_(dist),
        env_(env),
        device_(device),
        rank0_(env.rank == 0),
        writer_(rank0_ || (options.config.checkpoint.node_local && env.local_rank == 0)),
        world_(env.world_size),
        batch_(cfg_.train.batch_per_rank),
        out_dir_(cfg_.output.dir),
        state_(makeTrainState(cfg_, dist, device)) {
    resume();
    startFromRank0Weights();
    prepareSteps();
    prepareData();
  }

  void announce();
  int64_t startStep() const { return start_step_; }
  /// How the run goes on after a step.
  enum class Next {
    kStep,       ///< the next step
    kStop,       ///< stopped early: a stop signal or --stop-at-step (a checkpoint to resume; no evaluation, no export)
    kOutOfTime,  ///< train.max_minutes: the next step would not fit, so this one ended the run as its last would
  };
  /// Optimizer step `step` (0-based), then its log line, evaluation, preview and checkpoint.
  Next step(int64_t step);
  /// True when a resumed checkpoint's training time already fills train.max_minutes (said in the log): no step runs.
  bool budgetSpentAtStart();
  /// After the last step (`step`: the steps done; `stopped_early`: by a signal or --stop-at-step).
  void finish(int64_t step, bool stopped_early);

 private:
  /// What the micro-steps of one optimizer step leave behind.
  struct MicroSteps {
    double loss_sum = 0, psnr_sum = 0, data_wait_s = 0;
    Objective last;  ///< the last micro-batch's prediction and target (for the preview)
  };
  /// What the update after the micro-steps measured.
  struct Update {
    double grad_norm = 0;
    double optimizer_s = 0;  ///< everything after the last backward (see applyUpdate)
    double update_s = 0;     ///< the AdamW arithmetic alone (what ZeRO divides by the world)
  };
  /// What every rank agrees on after a step.
  struct Agreed {
    double loss = 0, psnr = 0;  ///< means over the ranks
    bool stop = false;          ///< some rank was asked to stop
    bool out_of_time = false;   ///< some rank found that another step would not fit train.max_minutes
    int64_t data_skipped = 0;   ///< unreadable items skipped by every rank so far
  };

  void resume();
  void startFromRank0Weights();
  void prepareSteps();
  void prepareData();
  MicroSteps runMicroSteps(int64_t step, double lr);
  Update applyUpdate(int64_t step, double lr);
  Agreed agree(const MicroSteps& micro, int64_t step, double step_s);
  /// Seconds of training so far: the resumed checkpoint's and this run's since its first step.
  double trainedSeconds() const { return resumed_.train_seconds + seconds(Clock::now() - train_start_); }
  double budgetSeconds() const { return cfg_.train.max_minutes * 60.0; }
  void failIfDiverged(double loss, int64_t step) const;
  /// `end`: the run's last step (train.steps, or the last that fits train.max_minutes); `stop`: stopped early.
  void afterStep(int64_t done, bool end, bool stop, const Objective& last);
  std::string saveAt(int64_t step_done);

  const TrainOptions& options_;
  ProgressReporter& progress_;  ///< this rank's step and section, to taehv-run
  const Config& cfg_;
  Distributed& dist_;
  const DistEnv& env_;
  const torch::Device device_;
  const bool rank0_;
  const bool writer_;  ///< saves checkpoints: rank 0, and with checkpoint.node_local each node's local rank 0
  const int64_t world_;  ///< ranks
  const int64_t batch_;  ///< clips per rank and micro-step (train.batch_per_rank)
  const std::string out_dir_;
  TrainState state_;
  std::optional<std::string> found_;  ///< the checkpoint resumed
  CheckpointState resumed_;           ///< its state.json (step 0 when none)
  double load_s_ = 0;                 ///< seconds this rank took to load it (said with "resumed from": elastic restarts)
  int64_t start_step_ = 0;
  BatchShape shape_;
  int64_t accum_ = 1;     ///< micro-steps per optimizer step (shape_.grad_accum)
  TrainConfig schedule_;  ///< learningRate's input: train.lr times the linear-scaling factor, if any
  std::optional<GradSync> sync_;
  bool autocast_ = false;
  bool winograd_ = false;  ///< fp32 CPU convolutions as Winograd transforms (train.cpu_conv)
  SliceBackward::Plan slice_plan_;
  std::optional<SliceBackward> slicer_;
  std::shared_ptr<const ClipSource> source_;
  bool distill_ = false;
  std::optional<Loader> loader_;
  std::unique_ptr<EvalClips> eval_clips_;
  std::optional<TrainLog> log_;
  int64_t last_saved_ = 0;
  PhaseTimes phases_{cfg_.log.phase_times};  ///< since the last log line (log.phase_times)
  Clock::time_point train_start_ = Clock::now();  ///< this run's first step (set by announce)
  bool out_of_time_ = false;                      ///< the run ended at train.max_minutes
};

/// The stale temporaries of a killed run removed, the checkpoint to resume loaded, the same start on every rank,
/// the batch shape and learning-rate schedule it takes on.
void TrainingRun::resume() {
  if (writer_) {
    for (const auto& stale : removeStaleTemporaries(out_dir_)) {
      log::info("removed " + stale + " (left by a killed run)");
    }
  }
  // The node group's agreed step (node-local checkpoints) replaces "latest": every node resumes the same step.
  const bool agreed = env_.resume_step >= 0 && options_.resume == "latest";
  if (agreed && cfg_.checkpoint.node_local) {
    const std::string received = receiveMissingCheckpoint(dist_, env_.resume_step, out_dir_, writer_);
    if (!received.empty()) log::info(received);
  }
  found_ = agreed ? agreedCheckpoint(env_.resume_step, out_dir_)
                  : checkpointToResume(options_.resume, out_dir_, [](const std::string& w) { log::warn(w); });
  if (agreed && env_.local_rank == 0) {
    log::info("resume: TAEHV_RESUME_STEP=" + std::to_string(env_.resume_step) + " (agreed by the node group): " +
              (found_ ? "resuming " + *found_ : std::string("no node holds a checkpoint, starting from step 0")));
  }
  if (found_) {
    requireSavedSettings(*found_, cfg_, {"model.variant", "train.optimizer"});
    const auto load_start = Clock::now();
    resumed_ = loadTrainState(*found_, state_, device_);
    load_s_ = seconds(Clock::now() - load_start);
  } else if (!options_.resume.empty() && rank0_) {
    log::info("resume: no checkpoint in " + out_dir_ + " yet; starting from step 0");
  }
  start_step_ = resumed_.step;
  last_saved_ = start_step_;
  checkSameStart(dist_, start_step_, world_, cfg_.checkpoint.node_local);
  if (cfg_.train.max_minutes > 0 && world_ > 1) {
    // Node-local checkpoints hold each node's own clock: every rank counts the budget from rank 0's, so that all
    // of them agree whether it is spent before the first step (budgetSpentAtStart).
    auto trained = torch::tensor({resumed_.train_seconds}, torch::kDouble);
    dist_.broadcastFromRank0({trained});
    resumed_.train_seconds = trained.item<double>();
  }
  // A resume at another world size keeps the global batch (elastic restarts): grad_accum, else lr, follows.
  shape_ = batchShape(cfg_.train, world_, found_ ? std::optional<CheckpointState>(resumed_) : std::nullopt);
  accum_ = shape_.grad_accum;
  schedule_ = cfg_.train;
  schedule_.lr *= shape_.lr_scale;
}

/// Every rank starts from rank 0's weights (and EMA).
void TrainingRun::startFromRank0Weights() {
  dist_.broadcastFromRank0(state_.params);
  if (!state_.ema.empty()) dist_.broadcastFromRank0(state_.ema);
}

/// The gradient buckets, the autocast decision and the CPU slices.
void TrainingRun::prepareSteps() {
  // ZeRO reduces the gradients itself (in GradSync's buckets): GradSync then only adds the sliced steps' gradients.
  sync_.emplace(dist_, state_.params, cfg_.dist.bucket_mb, !state_.zero);
  // bf16 autocast is per thread, so its steps are one pass.
  autocast_ = bf16Autocast(cfg_, device_);
  // bf16: activations in channels_last (NHWC), the layout of oneDNN's bf16 kernels on the CPU and of cuDNN's
  // tensor-core kernels on the GPU, so no layout change runs around each convolution. bench 4x12x32x32, 1 thread,
  // this host: 0.380 s a step against 0.407 s contiguous; 4x12x256x256 on an H100: 34-36 ms against 43-44 ms in each
  // of 13 steps (bench/gpu/RESULTS.md). Same math; fp32 on the CPU measured level (0.69-0.72 s both) and stays
  // contiguous, as does fp32 on the GPU (not measured).
  if (autocast_) state_.model->setChannelsLast(true);
  slice_plan_ = device_.is_cpu() && !autocast_
                    ? SliceBackward::plan(static_cast<int>(cfg_.train.slices), torch::get_num_threads(), batch_)
                    : SliceBackward::Plan{1, torch::get_num_threads()};
  // fp32 CPU steps: 3x3 convolutions as Winograd transforms where train.cpu_conv says so (bf16 steps never use them),
  // on one intra-op thread only (layers.cc): a slice of more, or a one-pass step of more, runs the direct ones.
  winograd_ = !autocast_ && cpuWinogradConv(cfg_, device_) && slice_plan_.intra_threads == 1;
  setCpuWinograd(winograd_);
  slicer_.emplace(slice_plan_);
}

/// The source, the objective it allows, this rank's loader from the resumed position, the evaluation clips.
void TrainingRun::prepareData() {
  const auto seed = static_cast<uint64_t>(cfg_.train.seed);
  source_ = makeSource(cfg_.data, seed);
  distill_ = cfg_.train.objective == ObjectiveKind::kDistillation ||
             (cfg_.train.objective == ObjectiveKind::kAuto && source_->hasLatents());
  if (cfg_.train.objective == ObjectiveKind::kDistillation && !source_->hasLatents()) {
    throw ConfigError("train.objective=distillation needs teacher latents for every item of data.source "
                      "(X.latents.safetensors beside each video or frame folder X)");
  }
  const Loader::Layout layout{resumed_.samples_consumed, start_step_, accum_, world_, env_.rank, batch_};
  loader_.emplace(source_, cfg_.data, seed, layout, cfg_.data.prefetch);
  if (cfg_.eval.every > 0) eval_clips_ = std::make_unique<EvalClips>(cfg_, seed);
}

/// Opens the log (rank 0: metrics.jsonl, TensorBoard) and says what runs, from where.
void TrainingRun::announce() {
  log_.emplace(cfg_, rank0_, start_step_, found_.has_value(), accum_ * world_ * batch_ * cfg_.data.frames);
  log_->say(runSummary(cfg_, dist_, device_, state_, *sync_, slice_plan_, autocast_, winograd_, distill_,
                       source_->size()));
  log_->say("effective config:\n" + cfg_.toYaml());
  if (found_) {
    log_->say("resumed from " + *found_ + " at step " + std::to_string(start_step_) +
              log::format(" (checkpoint loaded in %.2f s)", load_s_));
  }
  if (!shape_.note.empty()) log_->say("resume: " + shape_.note);
  phases_.start();
  train_start_ = Clock::now();
}

bool TrainingRun::budgetSpentAtStart() {
  // The same on every rank: the same checkpoint (checkSameStart) and the same settings (Config::sharedSettings).
  if (cfg_.train.max_minutes <= 0 || resumed_.train_seconds < budgetSeconds()) return false;
  log_->say(log::format("train.max_minutes=%g is spent: the checkpoint of step %lld holds %s of training; no step "
                        "runs (raise train.max_minutes to train on)",
                        cfg_.train.max_minutes, static_cast<long long>(start_step_),
                        formatDuration(resumed_.train_seconds).c_str()));
  out_of_time_ = true;
  return true;
}

TrainingRun::Next TrainingRun::step(int64_t step) {
  phases_.mark(Phase::kLog);  // the previous step's log line, evaluation, preview and checkpoint
  const auto t0 = Clock::now();
  const double lr = learningRate(schedule_, step);
  const MicroSteps micro = runMicroSteps(step, lr);
  progress_.report(step, process::Section::kExchange);  // the gradients' communication left, then the update
  const Update update = applyUpdate(step, lr);
  progress_.report(step, process::Section::kExchange);  // the step's small all-reduce
  const Agreed agreed = agree(micro, step, seconds(Clock::now() - t0));
  phases_.mark(Phase::kAgree);
  failIfDiverged(agreed.loss, step);
  const int64_t done = step + 1;
  out_of_time_ = agreed.out_of_time && !agreed.stop && done < cfg_.train.steps;
  const bool end = done == cfg_.train.steps || out_of_time_;
  TrainLog::Step figures;
  figures.done = done;
  figures.loss = agreed.loss;
  figures.psnr = agreed.psnr;
  figures.lr = lr;
  figures.step_s = seconds(Clock::now() - t0);
  figures.data_wait_s = micro.data_wait_s;
  figures.optimizer_s = update.optimizer_s;
  figures.update_s = update.update_s;
  figures.grad_norm = update.grad_norm;
  figures.data_skipped = agreed.data_skipped;
  figures.phases = &phases_;
  if (cfg_.train.max_minutes > 0) figures.time_left_s = std::max(0.0, budgetSeconds() - trainedSeconds());
  log_->step(figures, end || agreed.stop);
  if (out_of_time_) {
    log_->say(log::format("train.max_minutes=%g: %s of training after step %lld, and another step would not fit; "
                          "the run ends here as at its last step",
                          cfg_.train.max_minutes, formatDuration(trainedSeconds()).c_str(),
                          static_cast<long long>(done)));
  }
  afterStep(done, end, agreed.stop, micro.last);
  return agreed.stop ? Next::kStop : out_of_time_ ? Next::kOutOfTime : Next::kStep;
}

/// The learning rate set, the gradients cleared, and the grad_accum micro-batches' forward and backward passes
/// (whole, or as slices on the CPU), the last one synchronising the gradients.
TrainingRun::MicroSteps TrainingRun::runMicroSteps(int64_t step, double lr) {
  for (auto& group : state_.optimizer->param_groups()) group.options().set_lr(lr);
  if (state_.zero) {
    state_.zero->zeroGrad();  // stage 1's .grad are views of its flat buffer: zeroed, not released
  } else {
    for (auto& p : state_.params) p.mutable_grad().reset();
  }
  MicroSteps out;
  const TrainConfig terms = lossTermsAt(cfg_.train, step);
  for (int64_t a = 0; a < accum_; ++a) {
    progress_.report(step, process::Section::kData);
    const auto w0 = Clock::now();
    Batch batch = loader_->next();
    phases_.mark(Phase::kData);
    progress_.report(step, process::Section::kForwardBackward);
    out.data_wait_s += seconds(Clock::now() - w0);
    sync_->setSync(a == accum_ - 1);
    if (state_.zero) state_.zero->setSync(a == accum_ - 1);
    Objective obj;
    if (slicer_->slices() > 1) {  // never with autocast (slice_plan_)
      obj = slicedObjective(*slicer_, *sync_, state_.model, state_.params, batch, device_, terms, distill_,
                            1.0 / static_cast<double>(accum_));
    } else {
      {
        Bf16Autocast forward(device_.type(), autocast_);
        obj = computeObjective(state_.model, batch, device_, terms, distill_);
      }
      phases_.mark(Phase::kForward);
      (obj.loss / static_cast<double>(accum_)).backward();
    }
    phases_.mark(Phase::kBackward);  // sliced: forward and backward both
    out.loss_sum += obj.loss.item<double>();
    out.psnr_sum += psnr(obj.pred, obj.target);
    phases_.mark(Phase::kStats);
    out.last = std::move(obj);
  }
  return out;
}

/// The gradients' communication finished, clipped, the optimizer's update (ZeRO's at stages 1-2), the EMA.
TrainingRun::Update TrainingRun::applyUpdate(int64_t step, double lr) {
  // optimizer_s: everything after the last backward (gradient communication left, clipping, the update and, at
  // ZeRO stages 1-2, the all-gather of the parameters), the part ZeRO changes.
  const auto update_start = Clock::now();
  Update out;
  sync_->finish();
  phases_.mark(Phase::kExchange);
  progress_.report(step, process::Section::kOptimizer);
  if (state_.zero) {
    state_.zero->prepareGradients();
    if (cfg_.train.grad_clip > 0) out.grad_norm = state_.zero->clipGradNorm(cfg_.train.grad_clip);
    phases_.mark(Phase::kClip);
    state_.zero->step(lr);
    out.update_s = state_.zero->lastUpdateSeconds();
  } else {
    if (cfg_.train.grad_clip > 0) out.grad_norm = clipGradNorm(state_.params, cfg_.train.grad_clip);
    phases_.mark(Phase::kClip);
    const auto arithmetic_start = Clock::now();
    // AdamW in one fused pass on the optimizer's own state (a GPU: ATen's multi-tensor kernel; the CPU: the same
    // per-element loop as ZeRO's shard update, so ZeRO stage 1 stays bitwise stage 0); SGD is torch's step.
    auto* adamw = dynamic_cast<torch::optim::AdamW*>(state_.optimizer.get());
    if (!(adamw && stepAdamWFused(*adamw))) state_.optimizer->step();
    out.update_s = seconds(Clock::now() - arithmetic_start);
  }
  out.optimizer_s = seconds(Clock::now() - update_start);
  phases_.mark(Phase::kUpdate);
  if (!state_.ema.empty()) {
    torch::NoGradGuard no_grad;
    // ema = ema * d + p * (1 - d): two multi-tensor operations (the same per-tensor arithmetic as mul_ then add_).
    at::_foreach_mul_(state_.ema, cfg_.train.ema);
    at::_foreach_add_(state_.ema, state_.params, 1 - cfg_.train.ema);
  }
  phases_.mark(Phase::kEma);
  return out;
}

/// One small all-reduce per step: loss and PSNR means for the log, whether any rank must stop, and whether another
/// step (as long as this one, `step_s`) would overrun train.max_minutes on any rank's clock.
TrainingRun::Agreed TrainingRun::agree(const MicroSteps& micro, int64_t step, double step_s) {
  const bool want_stop =
      g_stop_signal.load() != 0 || (options_.stop_at_step > 0 && step + 1 >= options_.stop_at_step);
  const bool out_of_time = cfg_.train.max_minutes > 0 && trainedSeconds() + step_s > budgetSeconds();
  const auto accum = static_cast<double>(accum_), world = static_cast<double>(world_);
  auto stats = torch::tensor({micro.loss_sum / accum, micro.psnr_sum / accum, want_stop ? 1.0 : 0.0,
                              static_cast<double>(loader_->skipped()), out_of_time ? 1.0 : 0.0},
                             torch::kDouble);
  dist_.allreduceSum(stats);
  Agreed out;
  out.loss = stats[0].item<double>() / world;
  out.stop = stats[2].item<double>() > 0;
  out.psnr = stats[1].item<double>() / world;
  out.data_skipped = static_cast<int64_t>(stats[3].item<double>()) + resumed_.data_skipped;
  out.out_of_time = stats[4].item<double>() > 0;
  return out;
}

void TrainingRun::failIfDiverged(double loss, int64_t step) const {
  if (std::isfinite(loss)) return;
  const std::string kept = last_saved_ > 0 ? "the last good checkpoint (step " + std::to_string(last_saved_) +
                                                 ") in " + out_dir_ + " is kept: resume it with --resume latest and"
                                           : "no checkpoint was saved yet: start again with";
  throw std::runtime_error("the loss is " + std::to_string(loss) + " at step " + std::to_string(step + 1) +
                           " (training diverged); stopped without saving these weights; " + kept +
                           " a lower train.lr or more train.warmup_steps");
}

/// After step `done`: the evaluation, the preview and the checkpoint that are due; the stop line.
void TrainingRun::afterStep(int64_t done, bool end, bool stop, const Objective& last) {
  if (eval_clips_ && !stop && (done % cfg_.eval.every == 0 || end)) {
    progress_.report(done - 1, process::Section::kEval);
    log_->eval(done,
               evaluateAcrossRanks(state_.model, state_.params, state_.ema, *eval_clips_, device_, dist_, env_.rank,
                                   static_cast<int>(world_), rank0_),
               eval_clips_->heldOut(), !state_.ema.empty());
  }
  if (rank0_ && cfg_.log.preview_every > 0 && (done % cfg_.log.preview_every == 0 || end)) {
    log_->preview(done, previewImage(last.target, last.pred));
  }
  if ((cfg_.checkpoint.every > 0 && done % cfg_.checkpoint.every == 0) || end || stop) {
    progress_.report(done - 1, process::Section::kCheckpoint);
    const auto path = saveAt(done);
    last_saved_ = done;
    if (stop) {
      log_->say("stopping after step " + std::to_string(done) + (g_stop_signal ? " (signal)" : " (--stop-at-step)") +
                "; checkpoint " + path + "; continue with --resume latest");
    }
  }
}

std::string TrainingRun::saveAt(int64_t step_done) {
  CheckpointState saved;
  saved.step = step_done;
  saved.samples_consumed = resumed_.samples_consumed + (step_done - start_step_) * accum_ * world_ * batch_;
  saved.data_skipped = resumed_.data_skipped + loader_->skipped();
  saved.world_size = world_;
  saved.batch_per_rank = batch_;
  saved.grad_accum = accum_;
  saved.seed = cfg_.train.seed;
  saved.global_batch = shape_.global_batch;
  saved.train_seconds = trainedSeconds();
  return saveTrainState(out_dir_, cfg_.checkpoint.keep, state_, saved, cfg_, writer_);
}

void TrainingRun::finish(int64_t step, bool stopped_early) {
  if (!stopped_early && rank0_ && cfg_.checkpoint.export_safetensors) {
    // The exported weights are the EMA weights when EMA is on (the upstream recipe's weight averaging).
    {
      EmaWeights swap(state_.params, state_.ema);
      saveWeights(*state_.model, (fs::path(out_dir_) / "weights.safetensors").string(), torch::kFloat);
    }
    log_->say("exported " + (fs::path(out_dir_) / "weights.safetensors").string() +
              (state_.ema.empty() ? "" : " (EMA weights)"));
  }
  dist_.stopWatching();
  dist_.barrier();
  log_->say("done: " + std::to_string(step) + "/" + std::to_string(cfg_.train.steps) + " steps" +
            (out_of_time_ ? log::format(" (the train.max_minutes=%g budget)", cfg_.train.max_minutes) : "") +
            " in " + formatDuration(log_->elapsed()) + "; output in " + out_dir_);
}

int train(const TrainOptions& options, Distributed& dist, const DistEnv& env, const torch::Device& device,
          ProgressReporter& progress) {
  TrainingRun run(options, dist, env, device, progress);
  run.announce();
  int64_t step = run.startStep();
  bool stopped_early = false;  // by a signal or --stop-at-step
  g_in_step_loop = true;
  const int64_t steps = run.budgetSpentAtStart() ? step : options.config.train.steps;
  for (; step < steps; ++step) {
    const auto next = run.step(step);
    if (next != TrainingRun::Next::kStep) {
      stopped_early = next == TrainingRun::Next::kStop;
      ++step;
      break;
    }
  }
  run.finish(step, stopped_early);
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

std::string errorMessage(const std::exception& e) {
  // libtorch's errors carry a C++ backtrace of ~20 frames after the message: the user gets the message.
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  std::string text = torch_error != nullptr ? torch_error->what_without_backtrace() : e.what();
  if (text.find("Duplicate GPU detected") != std::string::npos) {
    text += " (NCCL takes one GPU per rank: start one process per GPU, e.g. taehv-run --nproc-per-node auto, or "
            "share a GPU over Gloo with dist.backend=gloo)";
  }
  return text;
}

int reportRunError(const std::exception& e) {
  log::error((dynamic_cast<const DataError*>(&e) != nullptr ? "data: " : "") + errorMessage(e));
  return isBadInput(e) ? 2 : 1;
}

int runTraining(const TrainOptions& options) {
  DistEnv env;
  try {
    env = DistEnv::fromEnvironment(processEnvironment());
  } catch (const std::exception& e) {
    log::error(e.what());
    return 2;
  }
  g_stop_signal = 0;
  StopSignals signals;
  std::unique_ptr<Distributed> dist;
  try {
    ProgressReporter progress(processEnvironment(), env.rank);
    progress.report(0, process::Section::kStartup);
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
                                         device, options.config.sharedSettings());
    return train(options, *dist, env, device, progress);
  } catch (const std::exception& e) {
    if (dist && dist->aborted() && !isBadInput(e)) {
      log::error("stopped because another rank failed");
      return failed(dist, "", kAbortExitCode);
    }
    return failed(dist, errorMessage(e), reportRunError(e));
  }
}

}  // namespace taehv::train
