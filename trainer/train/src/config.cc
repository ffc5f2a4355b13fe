#include "taehv/train/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <variant>

#include "taehv/env.h"
#include "taehv/files/input_file.h"
#include "taehv/model/variants.h"
#include "taehv/parse.h"
#include "taehv/suggest.h"

namespace taehv::train {
namespace {

/// A key whose value is one of a few names, held as an enum (parsed here, once).
struct Choice {
  std::function<std::string()> text;                  ///< the value's name
  std::function<bool(const std::string&)> assign;     ///< false when the text names no value
  std::vector<std::string> names;                     ///< every name, in the order messages list them
};

template <typename E>
using Names = std::vector<std::pair<E, std::string>>;

const Names<OptimizerKind> kOptimizers = {{OptimizerKind::kAdamW, "adamw"}, {OptimizerKind::kSgd, "sgd"}};
const Names<LossKind> kLosses = {{LossKind::kMse, "mse"}, {LossKind::kL1, "l1"}, {LossKind::kMseL1, "mse+l1"}};
const Names<ObjectiveKind> kObjectives = {{ObjectiveKind::kAuto, "auto"},
                                          {ObjectiveKind::kReconstruction, "reconstruction"},
                                          {ObjectiveKind::kDistillation, "distillation"}};
const Names<CpuPrecision> kCpuPrecisions = {
    {CpuPrecision::kFp32, "fp32"}, {CpuPrecision::kBf16, "bf16"}, {CpuPrecision::kAuto, "auto"}};
const Names<DistBackend> kBackends = {{DistBackend::kAuto, "auto"}, {DistBackend::kGloo, "gloo"},
                                      {DistBackend::kNccl, "nccl"}};

template <typename E>
Choice choice(E* field, const Names<E>& names) {
  Choice c;
  for (const auto& entry : names) c.names.push_back(entry.second);
  c.text = [field, &names] {
    for (const auto& [value, name] : names) {
      if (value == *field) return name;
    }
    return std::string("?");
  };
  c.assign = [field, &names](const std::string& text) {
    for (const auto& [value, name] : names) {
      if (name == text) {
        *field = value;
        return true;
      }
    }
    return false;
  };
  return c;
}

using Field = std::variant<int64_t*, double*, bool*, std::string*, DataSource*, Choice>;

struct Entry {
  std::string key;
  Field field;
};

// The one table of keys: order here is the print order of toYaml().
std::vector<Entry> table(Config& c) {
  return {
      {"model.variant", &c.model.variant},
      {"model.init", &c.model.init},
      {"model.init_output_scale", &c.model.init_output_scale},
      {"train.steps", &c.train.steps},
      {"train.batch_per_rank", &c.train.batch_per_rank},
      {"train.grad_accum", &c.train.grad_accum},
      {"train.optimizer", choice(&c.train.optimizer, kOptimizers)},
      {"train.zero_stage", &c.train.zero_stage},
      {"train.lr", &c.train.lr},
      {"train.warmup_steps", &c.train.warmup_steps},
      {"train.min_lr_ratio", &c.train.min_lr_ratio},
      {"train.weight_decay", &c.train.weight_decay},
      {"train.beta1", &c.train.beta1},
      {"train.beta2", &c.train.beta2},
      {"train.grad_clip", &c.train.grad_clip},
      {"train.ema", &c.train.ema},
      {"train.seed", &c.train.seed},
      {"train.threads", &c.train.threads},
      {"train.slices", &c.train.slices},
      {"train.loss", choice(&c.train.loss, kLosses)},
      {"train.frame_diff_weight", &c.train.frame_diff_weight},
      {"train.edge_weight", &c.train.edge_weight},
      {"train.ssim_weight", &c.train.ssim_weight},
      {"train.ssim_from_step", &c.train.ssim_from_step},
      {"train.objective", choice(&c.train.objective, kObjectives)},
      {"train.device", &c.train.device},
      {"train.bf16", &c.train.bf16},
      {"train.cpu_precision", choice(&c.train.cpu_precision, kCpuPrecisions)},
      {"train.keep_global_batch", &c.train.keep_global_batch},
      {"data.source", &c.data.source},
      {"data.frames", &c.data.frames},
      {"data.size", &c.data.size},
      {"data.stride_max", &c.data.stride_max},
      {"data.crop_min", &c.data.crop_min},
      {"data.synthetic_clips", &c.data.synthetic_clips},
      {"data.synthetic_texture", &c.data.synthetic_texture},
      {"data.synthetic_shapes", &c.data.synthetic_shapes},
      {"data.synthetic_shape_scale", &c.data.synthetic_shape_scale},
      {"data.synthetic_flat_background", &c.data.synthetic_flat_background},
      {"data.synthetic_scene_size", &c.data.synthetic_scene_size},
      {"data.prefetch", &c.data.prefetch},
      {"dist.backend", choice(&c.dist.backend, kBackends)},
      {"dist.timeout_s", &c.dist.timeout_s},
      {"dist.bucket_mb", &c.dist.bucket_mb},
      {"checkpoint.every", &c.checkpoint.every},
      {"checkpoint.keep", &c.checkpoint.keep},
      {"checkpoint.export_safetensors", &c.checkpoint.export_safetensors},
      {"log.every", &c.log.every},
      {"log.preview_every", &c.log.preview_every},
      {"log.tensorboard", &c.log.tensorboard},
      {"output.dir", &c.output.dir},
      {"eval.clips", &c.eval.clips},
      {"eval.every", &c.eval.every},
      {"eval.size", &c.eval.size},
      {"eval.frames", &c.eval.frames},
  };
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string formatDouble(double v) {
  std::ostringstream out;
  out.precision(10);
  out << v;
  return out.str();
}

void flatten(const YAML::Node& node, const std::string& prefix, std::vector<std::pair<std::string, YAML::Node>>& out,
             const std::string& origin) {
  if (node.IsMap()) {
    for (const auto& kv : node) {
      const std::string key = kv.first.as<std::string>();
      flatten(kv.second, prefix.empty() ? key : prefix + "." + key, out, origin);
    }
  } else if (node.IsScalar() || node.IsNull()) {
    if (prefix.empty()) throw ConfigError(origin + ": expected a YAML mapping of sections (train:, data:, ...)");
    for (const auto& [key, earlier] : out) {
      if (key == prefix) {  // YAML forbids duplicate keys; yaml-cpp would silently keep the last one
        throw ConfigError(origin + ": key '" + prefix + "' is given twice (lines " +
                          std::to_string(earlier.Mark().line + 1) + " and " + std::to_string(node.Mark().line + 1) +
                          "); keep one");
      }
    }
    out.emplace_back(prefix, node);
  } else {
    throw ConfigError(origin + ": key '" + prefix + "' holds a list; every config value is a single scalar");
  }
}

std::string formatNumber(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

bool validDevice(const std::string& d) {
  if (d == "auto" || d == "cpu" || d == "cuda") return true;
  return d.rfind("cuda:", 0) == 0 && d.size() <= 8 && parseCount<int>(std::string_view(d).substr(5)).has_value();
}

/// "a", "a or b", "a, b or c".
std::string oneOf(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  }
  return out;
}

/// " (did you mean 'train.steps'?)" when a known key is close to `key`, or when its last part is the last part of
/// known keys or close to it ("lr" -> train.lr); "" when nothing is.
std::string keyHint(const std::string& key) {
  const std::vector<std::string> keys = Config::keys();
  if (std::string hint = didYouMean(key, keys); !hint.empty()) return hint;
  const auto leaf = [](const std::string& k) { return k.substr(k.rfind('.') + 1); };
  std::vector<std::string> exact, close;
  for (const auto& k : keys) {
    if (leaf(k) == leaf(key)) {
      exact.push_back(k);
    } else if (!closestNames(leaf(key), {leaf(k)}).empty()) {
      close.push_back(k);
    }
  }
  const std::vector<std::string>& named = exact.empty() ? close : exact;
  if (named.empty()) return "";
  return " (did you mean '" + named[0] + "'" + (named.size() > 1 ? " or '" + named[1] + "'" : "") + "?)";
}

}  // namespace

void Config::applyLauncherEnvironment(const Env& env) {
  if (dist.timeout_s == 0) {
    if (const std::optional<std::string> raw = envValue(env, "TAEHV_COLLECTIVE_TIMEOUT_S")) {
      const std::string value = trim(*raw);
      const std::optional<double> v = parseNumber(value);
      if (!v || !(*v > 0)) {
        throw ConfigError("TAEHV_COLLECTIVE_TIMEOUT_S='" + value +
                          "' is not a positive number of seconds; fix or unset it, or set dist.timeout_s");
      }
      dist.timeout_s = *v;
      origins["dist.timeout_s"] = "from TAEHV_COLLECTIVE_TIMEOUT_S (dist.timeout_s=0: auto)";
    } else {
      dist.timeout_s = DistConfig::kDefaultTimeoutS;
      origins["dist.timeout_s"] = "default (dist.timeout_s=0: auto, TAEHV_COLLECTIVE_TIMEOUT_S not set)";
    }
  }
  if (train.device == "auto") {
    if (const std::optional<std::string> raw = envValue(env, "TAEHV_DEVICE")) {
      const std::string value = trim(*raw);
      if (value == "auto" || !validDevice(value)) {
        throw ConfigError("TAEHV_DEVICE='" + value + "' is not cpu, cuda or cuda:N; fix or unset it, or set train.device");
      }
      train.device = value;
      origins["train.device"] = "from TAEHV_DEVICE (train.device: auto)";
    }
  }
}

std::vector<std::string> Config::keys() {
  Config c;
  std::vector<std::string> out;
  for (const auto& e : table(c)) out.push_back(e.key);
  return out;
}

void Config::set(const std::string& key, const std::string& raw) {
  auto entries = table(*this);
  auto it = std::find_if(entries.begin(), entries.end(), [&](const Entry& e) { return e.key == key; });
  if (it == entries.end()) {
    throw ConfigError("unknown config key '" + key + "'" + keyHint(key));
  }
  const std::string value = trim(raw);
  auto bad = [&](const char* what) {
    return ConfigError("config key '" + key + "': '" + value + "' is not " + what);
  };
  std::visit(
      [&](auto p) {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<decltype(p), Choice>) {
          if (!p.assign(value)) {
            throw ConfigError(key + " must be " + oneOf(p.names) + ", got '" + value + "'");
          }
        } else if constexpr (std::is_same_v<T, int64_t>) {
          const std::optional<int64_t> v = parseInteger<int64_t>(value);
          if (!v) throw bad("an integer");
          *p = *v;
        } else if constexpr (std::is_same_v<T, double>) {
          const std::optional<double> v = parseNumber(value);
          if (!v) throw bad("a number");
          *p = *v;
        } else if constexpr (std::is_same_v<T, bool>) {
          std::string v = value;
          std::transform(v.begin(), v.end(), v.begin(), [](unsigned char ch) { return std::tolower(ch); });
          if (v == "true" || v == "yes" || v == "on" || v == "1") {
            *p = true;
          } else if (v == "false" || v == "no" || v == "off" || v == "0") {
            *p = false;
          } else {
            throw bad("a boolean (true or false)");
          }
        } else {
          *p = value;  // std::string, DataSource
        }
      },
      it->field);
}

std::string Config::get(const std::string& key) const {
  auto entries = table(const_cast<Config&>(*this));
  for (const auto& e : entries) {
    if (e.key != key) continue;
    return std::visit(
        [](const auto& p) -> std::string {
          using T = std::remove_pointer_t<std::decay_t<decltype(p)>>;
          if constexpr (std::is_same_v<T, Choice>) {
            return p.text();
          } else if constexpr (std::is_same_v<T, int64_t>) {
            return std::to_string(*p);
          } else if constexpr (std::is_same_v<T, double>) {
            return formatDouble(*p);
          } else if constexpr (std::is_same_v<T, bool>) {
            return *p ? "true" : "false";
          } else if constexpr (std::is_same_v<T, DataSource>) {
            return p->text();
          } else {
            return *p;
          }
        },
        e.field);
  }
  throw ConfigError("unknown config key '" + key + "'" + keyHint(key));
}

void Config::mergeYamlText(const std::string& text, const std::string& origin) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(origin + ": not valid YAML: " + e.what());
  }
  if (root.IsNull()) return;
  std::vector<std::pair<std::string, YAML::Node>> flat;
  flatten(root, "", flat, origin);
  for (const auto& [key, node] : flat) {
    try {
      set(key, node.IsNull() ? std::string() : node.Scalar());
    } catch (const ConfigError& e) {
      throw ConfigError(origin + ": " + e.what());
    }
  }
}

void Config::mergeYamlFile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    std::string files;
    for (const auto& e : std::filesystem::directory_iterator(path, ec)) {
      if (e.path().extension() == ".yaml" || e.path().extension() == ".yml") {
        files += (files.empty() ? "" : ", ") + e.path().filename().string();
      }
    }
    throw ConfigError("--config " + path + " is a folder; taehv-train takes one YAML file" +
                      (files.empty() ? std::string() : " (this folder has: " + files + ")") +
                      ". (taehv-run --config takes a folder of profiles and picks the file for the job's size.)");
  }
  // Type checked before the open, size bounded (taehv/files/input_file.h): a FIFO or /dev/zero is one line.
  const Checked<std::string> text = files::readInputFile(path, "--config", files::Role::kInput);
  if (!text.ok()) throw ConfigError(text.error);
  mergeYamlText(text.value, path);
}

void Config::applyOverride(const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError("--set expects key=value (e.g. --set train.lr=1e-4), got '" + assignment + "'");
  }
  set(trim(assignment.substr(0, eq)), assignment.substr(eq + 1));
}

void Config::validate() const {
  auto fail = [](const std::string& m) { throw ConfigError(m); };
  if (train.steps < 1) fail("train.steps must be >= 1");
  if (train.batch_per_rank < 1) fail("train.batch_per_rank must be >= 1");
  if (train.grad_accum < 1) fail("train.grad_accum must be >= 1");
  // Ranges: what the optimizer and data can use. Counts are bounded far above any real run, so that no product of
  // them overflows and a typo (an extra 0s) is an error here rather than an allocation failure later.
  auto in = [&](double v, double lo, double hi, bool hi_open, const std::string& key, const std::string& range) {
    if (!std::isfinite(v) || v < lo || v > hi || (hi_open && v == hi)) {
      fail(key + " must be in " + range + ", got " + formatNumber(v));
    }
  };
  if (train.steps > kMaxSteps) fail("train.steps must be <= " + std::to_string(kMaxSteps));
  if (train.batch_per_rank > kMaxBatch) fail("train.batch_per_rank must be <= " + std::to_string(kMaxBatch));
  if (train.grad_accum > kMaxAccum) fail("train.grad_accum must be <= " + std::to_string(kMaxAccum));
  if (data.frames > kMaxFrames) {
    fail("data.frames must be <= " + std::to_string(kMaxFrames) + ", got " + std::to_string(data.frames));
  }
  if (data.size > kMaxSize) fail("data.size must be <= " + std::to_string(kMaxSize) + ", got " + std::to_string(data.size));
  in(model.init_output_scale, 0, 10, false, "model.init_output_scale", "[0, 10]");
  in(train.lr, 0, 1, false, "train.lr", "(0, 1]");
  if (!(train.lr > 0)) fail("train.lr must be > 0");
  in(train.min_lr_ratio, 0, 1, false, "train.min_lr_ratio", "[0, 1]");
  in(train.weight_decay, 0, 1, true, "train.weight_decay", "[0, 1)");
  in(train.beta1, 0, 1, true, "train.beta1", "[0, 1)");
  in(train.beta2, 0, 1, true, "train.beta2", "[0, 1)");
  in(train.grad_clip, 0, 1e6, false, "train.grad_clip", "[0, 1e6] (0 = off)");
  if (train.warmup_steps < 0) fail("train.warmup_steps must be >= 0");
  if (train.ssim_from_step < 0) fail("train.ssim_from_step must be >= 0 (0 = from the first step)");
  if (train.threads < 0) fail("train.threads must be >= 0 (0 = auto)");
  if (train.slices < 0) fail("train.slices must be >= 0 (0 = auto, 1 = one pass)");
  if (train.cpu_precision != CpuPrecision::kFp32 && train.slices > 1) {
    fail("train.slices " + std::to_string(train.slices) + " slices fp32 CPU steps; a bf16 step runs as one pass: "
         "use train.slices=0 or 1, or train.cpu_precision=fp32");
  }
  if (train.zero_stage < 0 || train.zero_stage > 2) {
    fail("train.zero_stage must be 0, 1 or 2, got " + std::to_string(train.zero_stage) +
         " (parameter sharding, ZeRO-3, is not built: see docs/zero.md)");
  }
  if (train.zero_stage > 0 && train.optimizer != OptimizerKind::kAdamW) {
    fail("train.zero_stage " + std::to_string(train.zero_stage) + " shards AdamW's state; train.optimizer=" +
         get("train.optimizer") + " has none to shard: use train.zero_stage=0");
  }
  if (train.ema < 0 || train.ema >= 1) fail("train.ema must be in [0, 1) (0 = off)");
  in(train.frame_diff_weight, 0, 100, false, "train.frame_diff_weight", "[0, 100]");
  in(train.edge_weight, 0, 100, false, "train.edge_weight", "[0, 100]");
  in(train.ssim_weight, 0, 100, false, "train.ssim_weight", "[0, 100]");
  if (!validDevice(train.device)) {
    fail("train.device must be auto, cpu, cuda or cuda:N, got '" + train.device + "'");
  }
  const VariantSpec* variant = findVariant(model.variant);
  if (variant == nullptr) fail("model.variant: " + unknownVariantMessage(model.variant));
  const int64_t frame_multiple = variant->clipFrameMultiple();
  if (data.frames < frame_multiple || data.frames % frame_multiple != 0) {
    fail("data.frames must be a positive multiple of " + std::to_string(frame_multiple) + " for model.variant " +
         variant->name + " (" +
         (variant->time_layout == TimeLayout::kH3 ? std::string("H3 encodes chunks of 17 frames")
                                                  : "the model encodes " + std::to_string(frame_multiple) +
                                                        " frames per latent") +
         "), got " + std::to_string(data.frames));
  }
  const int64_t size_multiple = variant->sizeMultiple();
  if (data.size < size_multiple || data.size % size_multiple != 0) {
    fail("data.size must be a positive multiple of " + std::to_string(size_multiple) + " for model.variant " +
         variant->name + " (the model downsamples 8x after patches of " + std::to_string(variant->patch_size) +
         "), got " + std::to_string(data.size));
  }
  if (data.stride_max < 1) fail("data.stride_max must be >= 1");
  if (data.crop_min <= 0 || data.crop_min > 1) fail("data.crop_min must be in (0, 1]");
  if (data.synthetic_clips < 1) fail("data.synthetic_clips must be >= 1");
  if (data.synthetic_shapes < 1 || data.synthetic_shapes > 5) {
    fail("data.synthetic_shapes must be in [1, 5] (a scene draws 2-5 shapes and keeps at most this many), got " +
         std::to_string(data.synthetic_shapes));
  }
  if (!(data.synthetic_shape_scale > 0 && data.synthetic_shape_scale <= 3)) {
    fail("data.synthetic_shape_scale must be in (0, 3] (a multiplier of the shapes' radius 0.06-0.22), got " +
         formatNumber(data.synthetic_shape_scale));
  }
  if (data.synthetic_scene_size != 0 && data.synthetic_scene_size < data.size) {
    fail("data.synthetic_scene_size must be 0 (= data.size) or >= data.size=" + std::to_string(data.size) +
         " (the clip is a data.size window of a scene this many pixels across), got " +
         std::to_string(data.synthetic_scene_size));
  }
  if (data.prefetch < 1) fail("data.prefetch must be >= 1");
  if (data.source.text().empty()) fail("data.source must be 'synthetic' or a path");
  if (!(dist.timeout_s >= 0)) fail("dist.timeout_s must be > 0 (seconds), or 0 for auto");
  if (!(dist.bucket_mb > 0)) fail("dist.bucket_mb must be > 0");
  if (checkpoint.every < 0) fail("checkpoint.every must be >= 0");
  if (checkpoint.keep < 1) fail("checkpoint.keep must be >= 1");
  if (log.every < 1) fail("log.every must be >= 1");
  if (log.preview_every < 0) fail("log.preview_every must be >= 0");
  if (output.dir.empty()) fail("output.dir must not be empty");
  if (eval.clips < 1) fail("eval.clips must be >= 1");
  if (eval.every < 0) fail("eval.every must be >= 0 (0 = no evaluation during training)");
  if (eval.size != 0 && (eval.size < 8 || eval.size % 8 != 0)) {
    fail("eval.size must be 0 (= data.size) or a positive multiple of 8, got " + std::to_string(eval.size));
  }
  if (eval.frames != 0 && (eval.frames < 4 || eval.frames % 4 != 0)) {
    fail("eval.frames must be 0 (= data.frames) or a positive multiple of 4, got " + std::to_string(eval.frames));
  }
}

uint64_t Config::cpuStepMemoryEstimate(int world_size) const {
  // At validate()'s limits the product exceeds 64 bits (4,096 x 4,096 x 8,192^2 x 3 KiB): saturate.
  const uint64_t factors[] = {static_cast<uint64_t>(train.batch_per_rank), static_cast<uint64_t>(data.frames),
                              static_cast<uint64_t>(data.size), static_cast<uint64_t>(data.size), kBytesPerFramePixel};
  uint64_t bytes = 1;
  for (const uint64_t f : factors) {
    bytes = (f != 0 && bytes > std::numeric_limits<uint64_t>::max() / f) ? std::numeric_limits<uint64_t>::max()
                                                                         : bytes * f;
  }
  uint64_t base = kProcessBaseBytes;
  if (train.zero_stage > 0 && world_size > 1) {  // ZeRO: the other ranks hold the rest of the AdamW state
    base -= kAdamWStateBytes - kAdamWStateBytes / static_cast<uint64_t>(world_size);
  }
  return bytes > std::numeric_limits<uint64_t>::max() - base ? bytes : bytes + base;
}

std::string Config::memoryCheck(uint64_t available_bytes, int local_ranks, int world_size) const {
  const uint64_t per_rank = cpuStepMemoryEstimate(world_size);
  const uint64_t ranks = static_cast<uint64_t>(std::max(local_ranks, 1));
  const bool fits = per_rank <= available_bytes / ranks;
  if (fits) return "";
  auto gib = [](uint64_t b) {
    std::ostringstream out;
    out.precision(b >= (100ull << 30) ? 0 : 1);
    out << std::fixed << static_cast<double>(b) / static_cast<double>(1ull << 30) << " GiB";
    return out.str();
  };
  return "one training step needs about " + gib(per_rank) + " per process (estimate for train.batch_per_rank=" +
         std::to_string(train.batch_per_rank) + " x data.frames=" + std::to_string(data.frames) + " x data.size=" +
         std::to_string(data.size) + "^2" +
         (train.zero_stage > 0 && world_size > 1
              ? ", train.zero_stage=" + std::to_string(train.zero_stage) + " over " + std::to_string(world_size) +
                    " ranks"
              : std::string()) +
         "), " + std::to_string(ranks) + " process(es) on this machine, which has " +
         gib(available_bytes) + " available: lower data.frames, data.size or train.batch_per_rank (train.grad_accum "
         "keeps the batch per optimizer step without the memory)";
}

std::string Config::toYaml() const {
  // Grouped by section, in table order; strings are quoted by yaml-cpp where needed.
  YAML::Emitter out;
  out << YAML::BeginMap;
  std::string section;
  auto entries = table(const_cast<Config&>(*this));
  for (const auto& e : entries) {
    const auto dot = e.key.find('.');
    const std::string s = e.key.substr(0, dot);
    if (s != section) {
      if (!section.empty()) out << YAML::EndMap;
      out << YAML::Key << s << YAML::Value << YAML::BeginMap;
      section = s;
    }
    out << YAML::Key << e.key.substr(dot + 1) << YAML::Value;
    // Text values (names, paths, choices) quoted, so that they load back as the same text.
    const bool text = std::holds_alternative<std::string*>(e.field) || std::holds_alternative<DataSource*>(e.field) ||
                      std::holds_alternative<Choice>(e.field);
    if (text) {
      out << YAML::DoubleQuoted << get(e.key);
    } else {
      out << get(e.key);
    }
    if (auto o = origins.find(e.key); o != origins.end()) out << YAML::Comment(o->second);
  }
  if (!section.empty()) out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace taehv::train
