// The trainer's configuration: every knob, read from YAML (yaml-cpp) and `--set a.b=value` overrides.
// Keys are dotted paths ("train.lr"); an unknown key is a ConfigError naming the close valid keys, if any.
// A key with a few possible values is an enum here, parsed once from its name when it is set (its YAML and
// --print-config text are the names). No libtorch here, so the config can be parsed and tested without it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "taehv/plugin_api.h"  // Env

namespace taehv::train {

/// Bad configuration input; the message says what was wrong and how to fix it.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// train.optimizer: adamw (the recipe) | sgd (plain, for exactness checks).
enum class OptimizerKind { kAdamW, kSgd };
/// train.loss, the reconstruction term: mse | l1 | mse+l1.
enum class LossKind { kMse, kL1, kMseL1 };
/// train.objective: auto (distillation when every item has teacher latents) | reconstruction | distillation.
enum class ObjectiveKind { kAuto, kReconstruction, kDistillation };
/// train.cpu_precision: fp32 | bf16 | auto (see TrainConfig::cpu_precision).
enum class CpuPrecision { kFp32, kBf16, kAuto };
/// train.cpu_conv: direct | winograd | auto (see TrainConfig::cpu_conv).
enum class CpuConv { kDirect, kWinograd, kAuto };
/// dist.backend: auto (nccl on a GPU, else gloo) | gloo | nccl.
enum class DistBackend { kAuto, kGloo, kNccl };
/// What data.source names: the built-in synthetic scenes, or files (a video file, a frame folder, or a folder of
/// either).
enum class SourceKind { kSynthetic, kFiles };

/// data.source as given ("synthetic" or a path), its kind decided once when it is set. Converts from and to its
/// text, so that a path is assigned, passed and put into messages as a string.
class DataSource {
 public:
  static constexpr const char* kSynthetic = "synthetic";
  DataSource(std::string text = kSynthetic)  // NOLINT(google-explicit-constructor): a path is a source
      : text_(std::move(text)), kind_(text_ == kSynthetic ? SourceKind::kSynthetic : SourceKind::kFiles) {}
  DataSource(const char* text) : DataSource(std::string(text)) {}  // NOLINT(google-explicit-constructor)

  SourceKind kind() const { return kind_; }
  /// "synthetic" or the path, as given.
  const std::string& text() const { return text_; }
  operator const std::string&() const { return text_; }  // NOLINT(google-explicit-constructor): the path

  friend std::string operator+(const std::string& a, const DataSource& b) { return a + b.text_; }
  friend std::string operator+(const DataSource& a, const std::string& b) { return a.text_ + b; }
  friend std::ostream& operator<<(std::ostream& out, const DataSource& s) { return out << s.text_; }

 private:
  std::string text_;
  SourceKind kind_;
};

struct ModelConfig {
  std::string variant = "taehv";  ///< TAEHVOptions::forVariant name
  std::string init;               ///< safetensors weights to start from; empty = random init (seeded)
  /// Random init only: the final decoder conv's weights are this x their variance-preserving draw (its bias is 0.5,
  /// so the first outputs are mid-grey plus this much of the features). 0.1 (the init the defaults keep) holds every
  /// other layer's effect on the output down until that conv grows: on the quickstart 1 ended its first plateau
  /// 150-350 steps sooner (bench/recipe/RESULTS.md).
  double init_output_scale = 0.1;
};

struct TrainConfig {
  int64_t steps = 300;          ///< optimizer steps in total
  /// A time budget in minutes of training (0 = none): the run ends, as at its last step (final evaluation, checkpoint,
  /// exported weights), after the last step that fits, the ranks agreeing; resumes count the checkpoint's time.
  double max_minutes = 0;
  int64_t batch_per_rank = 1;   ///< clips per rank per micro-step
  int64_t grad_accum = 1;       ///< micro-steps per optimizer step (only the last one communicates)
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  /// ZeRO stage of the AdamW state: 0 = every rank holds it all (plain data parallel); 1 = each rank keeps and
  /// updates one contiguous shard of the flattened parameters (gradients all-reduced, parameters all-gathered);
  /// 2 = as 1, with gradients reduce-scattered so a rank only holds its shard's reduced gradients (zero.h).
  int64_t zero_stage = 0;
  double lr = 3e-4;             ///< peak learning rate
  int64_t warmup_steps = 20;    ///< linear warmup from 0 to lr
  double min_lr_ratio = 0.1;    ///< cosine decays to lr * min_lr_ratio at the last step
  double weight_decay = 0.01;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double grad_clip = 1.0;       ///< max global gradient L2 norm; 0 = off
  double ema = 0.0;             ///< EMA decay of the weights (e.g. 0.999); 0 = off
  int64_t seed = 0;             ///< model init, data order and augmentation derive from it
  int64_t threads = 0;          ///< intra-op CPU threads per rank; 0 = OMP_NUM_THREADS, else cores / local ranks
  /// CPU only: each micro-batch runs as this many slices on as many threads (threads / slices intra-op threads
  /// each; see taehv/model/slice_backward.h); 0 = auto (min(threads, batch_per_rank)); 1 = one pass.
  int64_t slices = 0;
  LossKind loss = LossKind::kMse;  ///< the reconstruction term
  double frame_diff_weight = 0;  ///< + this x MSE of the frame-to-frame changes (reconstruction vs input); 0 = off
  double edge_weight = 0;  ///< + this x MSE of neighbouring pixels' differences (reconstruction vs input); 0 = off
  double ssim_weight = 0;  ///< + this x (1 - SSIM) of the reconstruction against the input; 0 = off
  int64_t ssim_from_step = 0;  ///< the SSIM term counts from this step on (0 = from the first; before: left out)
  ObjectiveKind objective = ObjectiveKind::kAuto;
  /// auto | cpu | cuda | cuda:N. auto = TAEHV_DEVICE from the launcher when set (see
  /// Config::applyLauncherEnvironment), else cuda:LOCAL_RANK when CUDA is usable, else cpu.
  std::string device = "auto";
  bool bf16 = true;             ///< bf16 autocast on GPU (on the CPU: cpu_precision)
  /// The CPU step's precision: fp32 | bf16 (autocast: weights, optimizer and loss stay fp32; the step runs as one
  /// pass, train.slices 1) | auto (bf16 where the CPU computes it natively, AVX512-BF16 or AMX-BF16, else fp32).
  /// Measured on 2 Zen cores with AVX512-BF16: 1.5x faster steps (bench/recipe/RESULTS.md); emulated, it is slower.
  CpuPrecision cpu_precision = CpuPrecision::kFp32;
  /// fp32 3x3 convolutions on the CPU: direct (oneDNN's kernels) | winograd (NNPACK's Winograd transforms, built into
  /// libtorch, forward and input gradient, where they run: >= 16 channels in and out, frames >= 16x16, one intra-op
  /// thread; see taehv::setCpuWinograd) | auto (winograd where the CPU has no AVX-512, else direct). Measured on AVX2
  /// (Zen 3): the main job's fp32 step ~8% faster (bench/model/RESULTS.md). Rounding differs by ~1e-5 relative.
  CpuConv cpu_conv = CpuConv::kDirect;
  /// On a resume at another shape (world size, batch, accumulation; e.g. an elastic restart with fewer nodes):
  /// keep the checkpoint's global batch by scaling grad_accum where world x batch_per_rank divides it, else keep
  /// the per-rank batch and scale lr linearly with the global batch. false: take the config's shape and lr as given.
  bool keep_global_batch = true;
};

struct DataConfig {
  DataSource source;                 ///< "synthetic" or a path: video file, frame folder, or folder of either
  int64_t frames = 12;               ///< T frames per clip (a multiple of 4)
  int64_t size = 64;                 ///< square training size in pixels (a multiple of 8)
  int64_t stride_max = 5;            ///< random frame stride in [1, stride_max]
  double crop_min = 0.6;             ///< random square crop side in [crop_min, 1] of the short side
  int64_t synthetic_clips = 10000;   ///< clips per epoch of the synthetic source
  bool synthetic_texture = true;     ///< synthetic: stripes/checkers (true) or smooth colour fields only (false)
  /// synthetic: at most this many shapes per scene (1-5; each scene draws 2-5 and keeps its first ones)
  int64_t synthetic_shapes = 5;
  double synthetic_shape_scale = 1;  ///< synthetic: shape radius multiplier, (0, 3] (1: radius 0.06-0.22 of the view)
  bool synthetic_flat_background = false;  ///< synthetic: one colour behind the shapes (no gradient, wave, texture)
  /// synthetic: pixels across the whole scene (at crop 1), 0 = data.size; above data.size each clip is a data.size
  /// window of the scene at that scale (shapes as many pixels across as in a clip this size, at data.size^2 pixels'
  /// cost). The evaluation always renders whole scenes at the eval size.
  int64_t synthetic_scene_size = 0;
  int64_t prefetch = 4;              ///< batches decoded ahead by the background thread
};

struct DistConfig {
  DistBackend backend = DistBackend::kAuto;
  /// Collective and store timeout in seconds. 0 = auto: TAEHV_COLLECTIVE_TIMEOUT_S from the launcher
  /// (chosen by node count) when set, else kDefaultTimeoutS. Any value > 0 wins over the environment.
  double timeout_s = 0;
  static constexpr double kDefaultTimeoutS = 300;
  /// Gradient all-reduce bucket size in MB. 4, not DDP's 25: the bucket launched last waits for the end of backward
  /// (it holds the encoder's first layers), so its all-reduce is not hidden. TAEHV, 2 CPU ranks on one machine
  /// (Gloo, loopback), 2 x 12 x 64x64, from the end of backward to the update (the buckets' wait and clipping):
  /// 0.036 s at 25 MB (2 buckets), 0.021 at 8, 0.015-0.017 at 4 (11 buckets), 0.021-0.025 at 2.
  double bucket_mb = kDefaultBucketMb;
  static constexpr double kDefaultBucketMb = 4;
};

struct CheckpointConfig {
  int64_t every = 100;   ///< save every N steps (and at the end, and on SIGTERM); 0 = only those
  int64_t keep = 3;      ///< keep the last K checkpoints
  bool export_safetensors = true;  ///< also write weights.safetensors (upstream names) at the end
  /// Each node's local rank 0 also saves the full checkpoint into its own output.dir (a node-local disk), so any
  /// node may be lost (taehv-run --rdzv-backend etcd --node-local-checkpoints agrees on the step to resume from).
  /// ZeRO stage 0 only: at stages 1-2 no node holds the whole optimizer state.
  bool node_local = false;
};

struct LogConfig {
  int64_t every = 10;          ///< log line / metrics.jsonl every N steps
  int64_t preview_every = 100; ///< preview PNG + TensorBoard image every N steps; 0 = off
  bool tensorboard = true;
  bool phase_times = false;    ///< metrics.jsonl rows carry each step phase's wall and CPU seconds (phase_*_s)
};

struct OutputConfig {
  std::string dir = "runs/taehv";
};

/// Evaluation on held-out clips (see EvalClips in data.h): by `taehv-train eval`, and during training when
/// `every` > 0 (rank-sharded, with the EMA weights when EMA is on; metrics.jsonl rows with eval_psnr).
struct EvalConfig {
  int64_t clips = 16;  ///< clips per evaluation
  int64_t every = 0;   ///< during training: every N steps and after the last step; 0 = off
  int64_t size = 0;    ///< clip side in pixels (a multiple of 8); 0 = data.size (the model is fully convolutional)
  int64_t frames = 0;  ///< frames per clip (a multiple of 4); 0 = data.frames
};

/// The complete configuration.
struct Config {
  ModelConfig model;
  TrainConfig train;
  DataConfig data;
  DistConfig dist;
  CheckpointConfig checkpoint;
  LogConfig log;
  OutputConfig output;
  EvalConfig eval;

  // Limits of counts that more than one key or file shares (docs/trainer.md); every numeric key's range is in the key
  // table (config.cc), checked when the value is set and shown by --print-config. Far above any real run, they keep
  // every product of counts from overflowing and turn a typo (extra zeros) into a message instead of an allocation
  // failure.
  static constexpr int64_t kMaxSteps = 1'000'000'000;
  static constexpr int64_t kMaxBatch = 4096;
  static constexpr int64_t kMaxAccum = 65536;
  static constexpr int64_t kMaxFrames = 4096;
  static constexpr int64_t kMaxSize = 8192;
  static constexpr int64_t kMaxThreads = 1024;  ///< train.threads: intra-op threads of one rank

  /// Where a value came from when it is not the config file / --set / default (key -> origin, e.g.
  /// "dist.timeout_s" -> "from TAEHV_COLLECTIVE_TIMEOUT_S"); toYaml prints it as a comment.
  std::map<std::string, std::string> origins;

  /// Resolves the values left on auto from what the launcher (taehv-run) gives every worker:
  /// dist.timeout_s == 0 -> TAEHV_COLLECTIVE_TIMEOUT_S (seconds) or kDefaultTimeoutS;
  /// train.device == auto -> TAEHV_DEVICE ("cpu" or "cuda:N") when set (else stays auto).
  /// Explicit config values win. `env`: the process's (processEnvironment() in taehv/env.h). Throws ConfigError on a
  /// bad variable.
  void applyLauncherEnvironment(const Env& env);
  /// Every valid dotted key, in print order.
  static std::vector<std::string> keys();
  /// Sets `key` from its text form. Throws ConfigError (unknown key -> names the close ones; a section ("train") ->
  /// the keys it holds; a number outside the key's range -> "train.threads must be 0 (auto) or in [1, 1024], got
  /// 4294967297"; a name that is none of an enum key's: "train.loss must be mse, l1 or mse+l1, got 'x'").
  void set(const std::string& key, const std::string& value);
  /// Text form of `key`'s value.
  std::string get(const std::string& key) const;
  /// Merges a YAML document (sections of keys: `train:` then `steps: 5` indented under it) into this config, each
  /// value set() as it is read. Throws ConfigError naming the file: not YAML, more than one document, a key that is
  /// not a plain name, a value that is a list or a mapping, a key given twice, or what set() refuses.
  void mergeYamlFile(const std::string& path);
  void mergeYamlText(const std::string& text, const std::string& origin = "<text>");
  /// Applies "a.b=value".
  void applyOverride(const std::string& assignment);
  /// Checks every numeric value's range again (for values assigned in code; set() checks what it sets) and the
  /// constraints between values (data.frames a multiple of the variant's frames per latent, ...). Throws ConfigError.
  void validate() const;
  /// The settings every rank of a job must share, "key=value" lines in table order: every key but those that
  /// follow what each node has (train.device, train.threads, data.prefetch). The ranks compare a hash of it at
  /// start (Distributed), and name the keys that differ with settingsDifference().
  std::string sharedSettings() const;
  /// Peak memory of one CPU training process with this config, estimated as kProcessBaseBytes (libtorch, the model,
  /// AdamW state) + kBytesPerFramePixel x batch_per_rank x frames x size x size (activations kept for the backward
  /// pass). Measured with libtorch 2.13, bf16 autocast, 1 thread (peak RSS): 654 MB at 1x4x32x32, 736 at
  /// 1x12x64x64, 844 at 2x12x64x64, 1,080 at 1x12x128x128, 1,656 at 1x24x128x128; the slope is 2.2-2.9 KB per
  /// frame pixel, so 3 KiB errs high.
  /// At train.zero_stage 1 or 2 over `world_size` ranks, a rank holds 1/world_size of the AdamW state: the
  /// estimate is lower by kAdamWStateBytes x (1 - 1/world_size) (measured peaks: zero_bench.py, RESULTS.md).
  uint64_t cpuStepMemoryEstimate(int world_size = 1) const;
  static constexpr uint64_t kProcessBaseBytes = 650ull << 20;
  static constexpr uint64_t kBytesPerFramePixel = 3ull << 10;
  /// The AdamW state within kProcessBaseBytes: two fp32 moments of taehv's 11.3M parameters.
  static constexpr uint64_t kAdamWStateBytes = 90ull * 1000 * 1000;
  /// "" when `local_ranks` processes of cpuStepMemoryEstimate(world_size) fit in `available_bytes`; else the
  /// message.
  std::string memoryCheck(uint64_t available_bytes, int local_ranks, int world_size = 1) const;
  /// What toYaml writes as comments after the values: where a value came from (origins), and for --print-config
  /// also each numeric key's range.
  enum class YamlComments { kOrigins, kOriginsAndRanges };
  /// The effective config as YAML (nested), loadable by mergeYamlText.
  std::string toYaml(YamlComments comments = YamlComments::kOrigins) const;
};

/// The keys whose values differ between two ranks' Config::sharedSettings() texts, for a message:
/// "train.steps (3 on rank 0, 5 on rank 1)", at most 5 keys named, then how many more.
std::string settingsDifference(const std::string& a, int rank_a, const std::string& b, int rank_b);

}  // namespace taehv::train
