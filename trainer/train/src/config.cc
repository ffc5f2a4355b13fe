#include "taehv/train/config.h"

#include <yaml-cpp/eventhandler.h>
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
const Names<CpuConv> kCpuConvs = {
    {CpuConv::kDirect, "direct"}, {CpuConv::kWinograd, "winograd"}, {CpuConv::kAuto, "auto"}};
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

/// Integers and reals as the range messages and --print-config write them: integral values in full (1000000, not
/// 1e+06), others with up to 10 significant digits.
std::string formatNumber(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  std::ostringstream out;
  out.precision(10);
  out << v;
  return out.str();
}
std::string formatNumber(int64_t v) { return std::to_string(v); }

/// The valid values of a numeric key: lo to hi, each end closed unless it is open, and 0 besides when `zero` says
/// what 0 means for a key whose range starts above it. In the key table, so that set() checks a value against it
/// when it is set, validate() checks values assigned in code, and --print-config shows it.
template <typename T>
struct Range {
  T lo, hi;
  bool lo_open = false, hi_open = false;
  const char* zero = nullptr;  ///< what 0 means when it lies outside [lo, hi] ("auto", "= data.size")
  const char* note = nullptr;  ///< what the values mean or why the bound, for the refusal

  Range openBelow() const { return copy([](Range& r) { r.lo_open = true; }); }
  Range openAbove() const { return copy([](Range& r) { r.hi_open = true; }); }
  Range orZero(const char* meaning) const { return copy([&](Range& r) { r.zero = meaning; }); }
  Range because(const char* why) const { return copy([&](Range& r) { r.note = why; }); }

  bool contains(T v) const {
    if (zero != nullptr && v == 0) return true;
    return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);  // false for NaN
  }
  /// "[1, 4096]", "(0, 1]", "0 (auto) or [1, 1024]", "[0, 100] (0 = off)".
  std::string text() const { return (zero != nullptr ? "0 (" + std::string(zero) + ") or " : "") + interval(); }
  /// The refusal of `value` (as given) for `key`: "train.threads must be 0 (auto) or in [1, 1024], got 4294967297".
  ConfigError refusal(const std::string& key, const std::string& value) const {
    return ConfigError(key + " must be " + (zero != nullptr ? "0 (" + std::string(zero) + ") or in " : "in ") +
                       interval() + ", got " + value);
  }

 private:
  template <typename F>
  Range copy(F change) const {
    Range r = *this;
    change(r);
    return r;
  }
  std::string interval() const {
    std::string out;
    if constexpr (std::is_integral_v<T>) {
      if (lo == std::numeric_limits<T>::min() && hi == std::numeric_limits<T>::max()) out = "any 64-bit integer";
    }
    if (out.empty()) {
      out = (lo_open ? "(" : "[") + formatNumber(lo) + ", " + formatNumber(hi) + (hi_open ? ")" : "]");
    }
    return note != nullptr ? out + " (" + note + ")" : out;
  }
};

/// A numeric key: where its value lives and its range.
template <typename T>
struct Number {
  T* value;
  Range<T> range;
};

using Field = std::variant<Number<int64_t>, Number<double>, bool*, std::string*, DataSource*, Choice>;

/// dist.timeout_s when it is not 0 (auto), and TAEHV_COLLECTIVE_TIMEOUT_S: taehv-run's --collective-timeout range.
const Range<double> kTimeoutRange = Range<double>{1, 7 * 86400}.because("seconds");

struct Entry {
  std::string key;
  Field field;
  /// What each node has (its device, cores, memory): may differ between the ranks of a job. Every other key must be
  /// the same on every rank (Config::sharedSettings).
  bool per_rank = false;
};
constexpr bool kPerRank = true;

Field count(int64_t* value, Range<int64_t> range) { return Number<int64_t>{value, range}; }
Field real(double* value, Range<double> range) { return Number<double>{value, range}; }

// The one table of keys: order here is the print order of toYaml(). Bounds far above any real run keep every
// product of counts from overflowing and turn a typo (extra zeros) into a message instead of an allocation failure.
std::vector<Entry> table(Config& c) {
  constexpr int64_t kSteps = Config::kMaxSteps;
  const Range<double> weight = Range<double>{0, 100}.because("0 = off");
  return {
      {"model.variant", &c.model.variant},
      {"model.init", &c.model.init},
      {"model.init_output_scale", real(&c.model.init_output_scale, {0, 10})},
      {"train.steps", count(&c.train.steps, {1, kSteps})},
      {"train.max_minutes", real(&c.train.max_minutes, Range<double>{0, 1e6}.because("0 = no time budget"))},
      {"train.batch_per_rank", count(&c.train.batch_per_rank, {1, Config::kMaxBatch})},
      {"train.grad_accum", count(&c.train.grad_accum, {1, Config::kMaxAccum})},
      {"train.optimizer", choice(&c.train.optimizer, kOptimizers)},
      {"train.zero_stage",
       count(&c.train.zero_stage, Range<int64_t>{0, 2}.because("parameter sharding, ZeRO-3, is not built: see "
                                                                "docs/zero.md"))},
      {"train.lr", real(&c.train.lr, Range<double>{0, 1}.openBelow())},
      {"train.warmup_steps", count(&c.train.warmup_steps, {0, kSteps})},
      {"train.min_lr_ratio", real(&c.train.min_lr_ratio, {0, 1})},
      {"train.weight_decay", real(&c.train.weight_decay, Range<double>{0, 1}.openAbove())},
      {"train.beta1", real(&c.train.beta1, Range<double>{0, 1}.openAbove())},
      {"train.beta2", real(&c.train.beta2, Range<double>{0, 1}.openAbove())},
      {"train.grad_clip", real(&c.train.grad_clip, Range<double>{0, 1e6}.because("0 = off"))},
      {"train.ema", real(&c.train.ema, Range<double>{0, 1}.openAbove().because("0 = off"))},
      {"train.seed", count(&c.train.seed, {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()})},
      {"train.threads", count(&c.train.threads, Range<int64_t>{1, Config::kMaxThreads}.orZero("auto")), kPerRank},
      {"train.slices", count(&c.train.slices, Range<int64_t>{1, Config::kMaxBatch}.orZero("auto"))},
      {"train.loss", choice(&c.train.loss, kLosses)},
      {"train.frame_diff_weight", real(&c.train.frame_diff_weight, weight)},
      {"train.edge_weight", real(&c.train.edge_weight, weight)},
      {"train.ssim_weight", real(&c.train.ssim_weight, weight)},
      {"train.ssim_from_step", count(&c.train.ssim_from_step, Range<int64_t>{0, kSteps}.because("0 = from the first"))},
      {"train.objective", choice(&c.train.objective, kObjectives)},
      {"train.device", &c.train.device, kPerRank},
      {"train.bf16", &c.train.bf16},
      {"train.cpu_precision", choice(&c.train.cpu_precision, kCpuPrecisions)},
      {"train.cpu_conv", choice(&c.train.cpu_conv, kCpuConvs), kPerRank},
      {"train.keep_global_batch", &c.train.keep_global_batch},
      {"data.source", &c.data.source},
      {"data.frames", count(&c.data.frames, {1, Config::kMaxFrames})},
      {"data.size", count(&c.data.size, {1, Config::kMaxSize})},
      {"data.stride_max", count(&c.data.stride_max, {1, 1000})},
      {"data.crop_min", real(&c.data.crop_min, Range<double>{0, 1}.openBelow())},
      {"data.synthetic_clips", count(&c.data.synthetic_clips, {1, kSteps})},
      {"data.synthetic_texture", &c.data.synthetic_texture},
      {"data.synthetic_shapes",
       count(&c.data.synthetic_shapes,
             Range<int64_t>{1, 5}.because("a scene draws 2-5 shapes and keeps at most this many"))},
      {"data.synthetic_shape_scale",
       real(&c.data.synthetic_shape_scale,
            Range<double>{0, 3}.openBelow().because("a multiplier of the shapes' radius 0.06-0.22"))},
      {"data.synthetic_flat_background", &c.data.synthetic_flat_background},
      {"data.synthetic_scene_size",
       count(&c.data.synthetic_scene_size, Range<int64_t>{1, Config::kMaxSize}.orZero("= data.size"))},
      {"data.prefetch",
       count(&c.data.prefetch, Range<int64_t>{1, 64}.because("batches decoded ahead, each train.batch_per_rank clips")),
       kPerRank},
      {"dist.backend", choice(&c.dist.backend, kBackends)},
      {"dist.timeout_s", real(&c.dist.timeout_s, kTimeoutRange.orZero("auto"))},
      {"dist.bucket_mb", real(&c.dist.bucket_mb, Range<double>{0, 1024}.openBelow())},
      {"checkpoint.every", count(&c.checkpoint.every, Range<int64_t>{0, kSteps}.because("0 = at the end and on a stop"))},
      {"checkpoint.keep", count(&c.checkpoint.keep, {1, 1'000'000})},
      {"checkpoint.export_safetensors", &c.checkpoint.export_safetensors},
      {"checkpoint.node_local", &c.checkpoint.node_local},
      {"log.every", count(&c.log.every, {1, kSteps})},
      {"log.preview_every", count(&c.log.preview_every, Range<int64_t>{0, kSteps}.because("0 = off"))},
      {"log.tensorboard", &c.log.tensorboard},
      {"log.phase_times", &c.log.phase_times},
      // A path on each node's own file system: nodes may mount their disk or the shared one at different paths (the
      // node-group tests run three nodes on one machine, each with its own folder).
      {"output.dir", &c.output.dir, kPerRank},
      {"eval.clips", count(&c.eval.clips, {1, 1'000'000})},
      {"eval.every", count(&c.eval.every, Range<int64_t>{0, kSteps}.because("0 = off"))},
      {"eval.size", count(&c.eval.size, Range<int64_t>{8, Config::kMaxSize}.orZero("= data.size"))},
      {"eval.frames", count(&c.eval.frames, Range<int64_t>{1, Config::kMaxFrames}.orZero("= data.frames"))},
  };
}

/// The entry of `key`; nullptr when there is none.
const Entry* find(const std::vector<Entry>& entries, const std::string& key) {
  const auto it = std::find_if(entries.begin(), entries.end(), [&](const Entry& e) { return e.key == key; });
  return it == entries.end() ? nullptr : &*it;
}

/// The sections (the part of each key before its dot), in table order.
std::vector<std::string> sections() {
  std::vector<std::string> out;
  for (const std::string& key : Config::keys()) {
    const std::string section = key.substr(0, key.find('.'));
    if (std::find(out.begin(), out.end(), section) == out.end()) out.push_back(section);
  }
  return out;
}

bool isSection(const std::string& name) {
  const std::vector<std::string> all = sections();
  return std::find(all.begin(), all.end(), name) != all.end();
}

/// "'train' is a section, not a value: ..." with the keys it holds.
ConfigError sectionGivenAValue(const std::string& section) {
  std::string leaves;
  for (const std::string& key : Config::keys()) {
    if (key.rfind(section + ".", 0) == 0) leaves += (leaves.empty() ? "" : ", ") + key.substr(section.size() + 1);
  }
  const std::string first = leaves.substr(0, leaves.find(','));
  return ConfigError("'" + section + "' is a section, not a value: give one of its keys, e.g. --set " + section + "." +
                     first + "=..., or in YAML '" + first + ": ...' indented under '" + section + ":'; it holds " +
                     leaves);
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
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

/// "line N: " of a YAML node, or "" when yaml-cpp has no position for it.
std::string lineOf(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  return mark.is_null() ? std::string() : "line " + std::to_string(mark.line + 1) + ": ";
}

/// "a list", "a mapping", "empty".
std::string kindOf(const YAML::Node& node) {
  if (node.IsNull() || (node.IsScalar() && node.Scalar().empty())) return "empty";
  return node.IsSequence() ? "a list" : node.IsMap() ? "a mapping" : "a value";
}

/// The name a mapping key gives; a key that is a list, a mapping or nothing is refused at its line.
std::string keyName(const YAML::Node& key) {
  if (!key.IsScalar() || key.Scalar().empty()) {
    throw ConfigError(lineOf(key) + "a key that is " + kindOf(key) +
                      " is not a plain name; keys are names, such as 'train:' or 'steps:'");
  }
  return key.Scalar();
}

/// Counts the YAML documents of a text (parser events only: no node is built, no alias expanded). yaml-cpp's LoadAll
/// never ends on a ',' outside [...] or {...} (jbeder/yaml-cpp#1040, fixed after 0.8.0): the parser hands out an empty
/// document there again and again without reading on, and the list of them grew until memory ran out. A document
/// that starts where the one before it started is that ',': refused at its place, as yaml-cpp refuses other text.
class DocumentCounter : public YAML::EventHandler {
 public:
  /// The number of documents; throws YAML::ParserException for text yaml-cpp refuses and for the stuck ','.
  static std::size_t count(const std::string& text) {
    std::istringstream in(text);
    YAML::Parser parser(in);
    DocumentCounter counter;
    while (parser.HandleNextDocument(counter)) {
      const auto& s = counter.starts_;
      if (s.size() > 1 && s[s.size() - 1].pos == s[s.size() - 2].pos) {
        throw YAML::ParserException(s.back(), "a ',' outside [...] or {...} starts no value");
      }
    }
    return counter.starts_.size();
  }

  void OnDocumentStart(const YAML::Mark& mark) override { starts_.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

 private:
  std::vector<YAML::Mark> starts_;
};

/// Reads a YAML document as the config is shaped: a mapping of sections, each a mapping of keys to single values,
/// setting each value as it is read. The work is bounded by the keys there are: an alias is read where it is used, one
/// level deep, and the first name that is no section or key ends the read (a walk of every path first went on for
/// ever through nested aliases of mappings). Throws ConfigError (without the file's name).
class YamlReader {
 public:
  explicit YamlReader(Config& config) : config_(config) {}

  void read(const YAML::Node& root) {
    if (!root.IsMap()) throw ConfigError("expected a YAML mapping of sections (train:, data:, ...)");
    for (const auto& section : root) {
      const std::string name = keyName(section.first);
      const YAML::Node& body = section.second;
      if (body.IsMap()) {
        for (const auto& key : body) value(name + "." + keyName(key.first), key.second);
      } else if (!(body.IsNull() && isSection(name))) {  // an empty section sets nothing
        value(name, body);  // `lr: 1`, `train: 5`: set() says what is wrong with the name
      }
    }
  }

 private:
  void value(const std::string& key, const YAML::Node& node) {
    if (node.IsSequence() || node.IsMap()) {
      throw ConfigError(lineOf(node) + "key '" + key + "' holds " + kindOf(node) +
                        "; every config value is a single scalar");
    }
    const int line = node.Mark().line + 1;
    if (const auto [earlier, fresh] = lines_.emplace(key, line); !fresh) {
      // YAML forbids duplicate keys; yaml-cpp would silently keep the last one.
      throw ConfigError("key '" + key + "' is given twice (lines " + std::to_string(earlier->second) + " and " +
                        std::to_string(line) + "); keep one");
    }
    config_.set(key, node.IsNull() ? std::string() : node.Scalar());
  }

  Config& config_;
  std::map<std::string, int> lines_;  ///< key -> the line it was given on
};

/// A numeric value in its range, or the refusal naming the key, the value and the range.
template <typename T>
void checkRange(const std::string& key, const Number<T>& number, const std::string& given) {
  if (!number.range.contains(*number.value)) throw number.range.refusal(key, given);
}

/// sharedSettings() escapes a value's backslashes and line ends, so that each setting is one line.
std::string escapeLine(const std::string& text) {
  std::string out;
  for (const char ch : text) {
    if (ch == '\\') {
      out += "\\\\";
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else {
      out.push_back(ch);
    }
  }
  return out;
}

/// key -> value of sharedSettings() text.
std::map<std::string, std::string> settingsMap(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

}  // namespace

void Config::applyLauncherEnvironment(const Env& env) {
  if (dist.timeout_s == 0) {
    if (const std::optional<std::string> raw = envValue(env, "TAEHV_COLLECTIVE_TIMEOUT_S")) {
      const std::string value = trim(*raw);
      const std::optional<double> v = parseNumber(value);
      if (!v || !kTimeoutRange.contains(*v)) {
        throw ConfigError("TAEHV_COLLECTIVE_TIMEOUT_S='" + value + "' is not a number of seconds in " +
                          kTimeoutRange.text() + "; fix or unset it, or set dist.timeout_s");
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
  const std::vector<Entry> entries = table(*this);
  const Entry* entry = find(entries, key);
  if (entry == nullptr) {
    if (isSection(key)) throw sectionGivenAValue(key);
    throw ConfigError("unknown config key '" + key + "'" + keyHint(key));
  }
  const std::string value = trim(raw);
  auto bad = [&](const std::string& what) {
    return ConfigError("config key '" + key + "': '" + value + "' is not " + what);
  };
  std::visit(
      [&](auto p) {
        using F = decltype(p);
        if constexpr (std::is_same_v<F, Choice>) {
          if (!p.assign(value)) {
            throw ConfigError(key + " must be " + oneOf(p.names) + ", got '" + value + "'");
          }
        } else if constexpr (std::is_same_v<F, Number<int64_t>>) {
          const std::optional<int64_t> v = parseInteger<int64_t>(value);
          if (!v) throw bad("an integer in " + p.range.text());
          if (!p.range.contains(*v)) throw p.range.refusal(key, value);
          *p.value = *v;
        } else if constexpr (std::is_same_v<F, Number<double>>) {
          const std::optional<double> v = parseNumber(value);
          if (!v) throw bad("a number in " + p.range.text());
          if (!p.range.contains(*v)) throw p.range.refusal(key, value);
          *p.value = *v;
        } else if constexpr (std::is_same_v<F, bool*>) {
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
      entry->field);
}

namespace {

/// The text of one entry's value (get, toYaml, sharedSettings).
std::string valueText(const Entry& entry) {
  return std::visit(
      [](const auto& p) -> std::string {
        using F = std::decay_t<decltype(p)>;
        if constexpr (std::is_same_v<F, Choice>) {
          return p.text();
        } else if constexpr (std::is_same_v<F, Number<int64_t>> || std::is_same_v<F, Number<double>>) {
          return formatNumber(*p.value);
        } else if constexpr (std::is_same_v<F, bool*>) {
          return *p ? "true" : "false";
        } else if constexpr (std::is_same_v<F, DataSource*>) {
          return p->text();
        } else {
          return *p;
        }
      },
      entry.field);
}

/// The range of a numeric entry as --print-config shows it; "" for the others.
std::string rangeText(const Entry& entry) {
  if (const auto* n = std::get_if<Number<int64_t>>(&entry.field)) return n->range.text();
  if (const auto* n = std::get_if<Number<double>>(&entry.field)) return n->range.text();
  return "";
}

}  // namespace

std::string Config::get(const std::string& key) const {
  const std::vector<Entry> entries = table(const_cast<Config&>(*this));
  const Entry* entry = find(entries, key);
  if (entry == nullptr) throw ConfigError("unknown config key '" + key + "'" + keyHint(key));
  return valueText(*entry);
}

void Config::mergeYamlText(const std::string& text, const std::string& origin) {
  std::size_t documents = 0;
  YAML::Node document;
  try {
    documents = DocumentCounter::count(text);  // (not YAML::LoadAll: see DocumentCounter)
    if (documents == 1) document = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(origin + ": not valid YAML: " + e.what());
  }
  if (documents > 1) {
    // Only the first was read before: a file that starts with '---', a comment and another '---' trained on the
    // defaults.
    throw ConfigError(origin + ": holds " + std::to_string(documents) +
                      " YAML documents (a line '---' starts each); a config is one document: remove the extra '---' "
                      "lines");
  }
  if (documents == 0 || document.IsNull()) return;
  try {
    YamlReader(*this).read(document);
  } catch (const ConfigError& e) {
    throw ConfigError(origin + ": " + e.what());
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
  // Every numeric value in its range: set() refuses one as it is set; this catches values assigned in code.
  for (const Entry& e : table(const_cast<Config&>(*this))) {
    if (const auto* n = std::get_if<Number<int64_t>>(&e.field)) checkRange(e.key, *n, valueText(e));
    if (const auto* n = std::get_if<Number<double>>(&e.field)) checkRange(e.key, *n, valueText(e));
  }
  // What depends on more than one value.
  if (train.cpu_precision != CpuPrecision::kFp32 && train.slices > 1) {
    fail("train.slices " + std::to_string(train.slices) + " slices fp32 CPU steps; a bf16 step runs as one pass: "
         "use train.slices=0 or 1, or train.cpu_precision=fp32");
  }
  if (train.cpu_precision == CpuPrecision::kBf16 && train.cpu_conv == CpuConv::kWinograd) {
    fail("train.cpu_conv winograd is for fp32 CPU steps; train.cpu_precision bf16 runs oneDNN's bf16 convolutions: "
         "use train.cpu_conv=auto or direct, or train.cpu_precision=fp32 or auto");
  }
  if (train.zero_stage > 0 && train.optimizer != OptimizerKind::kAdamW) {
    fail("train.zero_stage " + std::to_string(train.zero_stage) + " shards AdamW's state; train.optimizer=" +
         get("train.optimizer") + " has none to shard: use train.zero_stage=0");
  }
  if (checkpoint.node_local && train.zero_stage > 0) {
    fail("checkpoint.node_local saves the full state on each node, but train.zero_stage " +
         std::to_string(train.zero_stage) + " shards AdamW's state over the ranks: use train.zero_stage=0, or "
         "checkpoint.node_local=false with output.dir on storage every node reads");
  }
  if (!validDevice(train.device)) {
    fail("train.device must be auto, cpu, cuda or cuda:N, got '" + train.device + "'");
  }
  const VariantSpec* variant = findVariant(model.variant);
  if (variant == nullptr) fail("model.variant: " + unknownVariantMessage(model.variant));
  const int64_t frame_multiple = variant->clipFrameMultiple();
  const std::string frames_why =
      variant->time_layout == TimeLayout::kH3
          ? std::string("H3 encodes chunks of 17 frames")
          : "the model encodes " + std::to_string(frame_multiple) + " frames per latent";
  if (data.frames % frame_multiple != 0) {
    fail("data.frames must be a positive multiple of " + std::to_string(frame_multiple) + " for model.variant " +
         variant->name + " (" + frames_why + "), got " + std::to_string(data.frames));
  }
  const int64_t size_multiple = variant->sizeMultiple();
  const std::string size_why =
      "the model downsamples 8x after patches of " + std::to_string(variant->patch_size);
  if (data.size % size_multiple != 0) {
    fail("data.size must be a positive multiple of " + std::to_string(size_multiple) + " for model.variant " +
         variant->name + " (" + size_why + "), got " + std::to_string(data.size));
  }
  if (eval.size % size_multiple != 0) {
    fail("eval.size must be 0 (= data.size) or a positive multiple of " + std::to_string(size_multiple) +
         " for model.variant " + variant->name + " (" + size_why + "), got " + std::to_string(eval.size));
  }
  if (eval.frames % frame_multiple != 0) {
    fail("eval.frames must be 0 (= data.frames) or a positive multiple of " + std::to_string(frame_multiple) +
         " for model.variant " + variant->name + " (" + frames_why + "), got " + std::to_string(eval.frames));
  }
  if (data.synthetic_scene_size != 0 && data.synthetic_scene_size < data.size) {
    fail("data.synthetic_scene_size must be 0 (= data.size) or >= data.size=" + std::to_string(data.size) +
         " (the clip is a data.size window of a scene this many pixels across), got " +
         std::to_string(data.synthetic_scene_size));
  }
  if (data.source.text().empty()) fail("data.source must be 'synthetic' or a path");
  if (output.dir.empty()) fail("output.dir must not be empty");
}

std::string Config::sharedSettings() const {
  std::string out;
  for (const Entry& e : table(const_cast<Config&>(*this))) {
    if (!e.per_rank) out += e.key + "=" + escapeLine(valueText(e)) + "\n";
  }
  return out;
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

std::string Config::toYaml(YamlComments comments) const {
  // Grouped by section, in table order; strings are quoted by yaml-cpp where needed.
  YAML::Emitter out;
  out << YAML::BeginMap;
  std::string section;
  const std::vector<Entry> entries = table(const_cast<Config&>(*this));
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
      out << YAML::DoubleQuoted << valueText(e);
    } else {
      out << valueText(e);
    }
    std::string comment;
    if (auto o = origins.find(e.key); o != origins.end()) comment = o->second;
    if (const std::string range = rangeText(e); comments == YamlComments::kOriginsAndRanges && !range.empty()) {
      comment += (comment.empty() ? "" : "; ") + range;
    }
    if (!comment.empty()) out << YAML::Comment(comment);
  }
  if (!section.empty()) out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::string settingsDifference(const std::string& a, int rank_a, const std::string& b, int rank_b) {
  constexpr std::size_t kNamed = 5;  // keys named in full; the rest are counted
  const std::map<std::string, std::string> in_a = settingsMap(a), in_b = settingsMap(b);
  std::vector<std::string> keys;
  for (const std::string& key : Config::keys()) {  // table order
    const auto x = in_a.find(key), y = in_b.find(key);
    if ((x == in_a.end()) != (y == in_b.end()) || (x != in_a.end() && x->second != y->second)) keys.push_back(key);
  }
  std::string out;
  for (std::size_t i = 0; i < keys.size() && i < kNamed; ++i) {
    const auto value = [&](const std::map<std::string, std::string>& m) {
      const auto it = m.find(keys[i]);
      return it == m.end() ? std::string("(none)") : it->second;
    };
    out += (i == 0 ? "" : ", ") + keys[i] + " (" + value(in_a) + " on rank " + std::to_string(rank_a) + ", " +
           value(in_b) + " on rank " + std::to_string(rank_b) + ")";
  }
  if (keys.size() > kNamed) out += " and " + std::to_string(keys.size() - kNamed) + " more";
  return out.empty() ? "no key (the texts differ: another taehv-train version?)" : out;
}

}  // namespace taehv::train
