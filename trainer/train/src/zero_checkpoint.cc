#include "zero_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "taehv/files/input_file.h"
#include "taehv/model/output_file.h"
#include "taehv/model/safetensors.h"
#include "taehv/train/checkpoint.h"

namespace taehv::train {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFormat = "taehv-zero-shards-1";
constexpr const char* kExpAvg = "exp_avg";
constexpr const char* kExpAvgSq = "exp_avg_sq";
/// Bounds for a hostile layout: more ranks or parameters than any run has.
constexpr int64_t kMaxWorld = 1 << 20;
constexpr size_t kMaxParams = 1 << 20;

bool plainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

/// A shard file opened and checked against its layout entry: exp_avg and exp_avg_sq, F32, end - begin elements.
struct ShardFile {
  SafetensorsFile file;
  const SafetensorsEntry* moment[2] = {nullptr, nullptr};
};

/// Reads ranges of the saved flat order out of the shard files, opening each on first use.
class ShardReader {
 public:
  ShardReader(std::string dir, const ZeroLayout& layout) : dir_(std::move(dir)), layout_(layout) {
    files_.resize(layout_.shards.size());
  }

  /// Elements [at, at + length) of moment `which` (0 exp_avg, 1 exp_avg_sq) into `out` (CPU float32, contiguous).
  void read(int which, int64_t at, int64_t length, float* out) {
    while (length > 0) {
      // The shard holding `at`: the last whose begin <= at (shards tile [0, N), checked when parsed).
      const auto it = std::upper_bound(layout_.shards.begin(), layout_.shards.end(), at,
                                       [](int64_t v, const ZeroLayout::Shard& s) { return v < s.begin; });
      const size_t index = static_cast<size_t>(it - layout_.shards.begin()) - 1;
      const auto& shard = layout_.shards[index];
      const int64_t n = std::min(length, shard.end - at);
      const ShardFile& file = open(index);
      try {
        file.file.read(*file.moment[which], static_cast<uint64_t>(at - shard.begin) * sizeof(float),
                       static_cast<uint64_t>(n) * sizeof(float), out);
      } catch (const SafetensorsError& e) {
        throw CheckpointError(std::string("checkpoint ") + dir_ + ": " + e.what());
      }
      at += n;
      length -= n;
      out += n;
    }
  }

 private:
  const ShardFile& open(size_t index) {
    if (files_[index]) return *files_[index];
    const auto& shard = layout_.shards[index];
    const std::string path = (fs::path(dir_) / shard.file).string();
    auto opened = std::make_unique<ShardFile>();
    try {
      opened->file = openSafetensors(path);
    } catch (const SafetensorsError& e) {
      throw CheckpointError("optimizer shard " + path + " is missing or damaged (" + e.what() +
                            "): restore it, or resume from another checkpoint");
    }
    const char* names[2] = {kExpAvg, kExpAvgSq};
    for (int m = 0; m < 2; ++m) {
      for (const auto& entry : opened->file.header.entries) {
        if (entry.name == names[m]) opened->moment[m] = &entry;
      }
      const auto* entry = opened->moment[m];
      if (entry == nullptr || entry->dtype != SafetensorsDtype::kF32 || entry->shape.size() != 1 ||
          entry->shape[0] != shard.end - shard.begin) {
        throw CheckpointError("optimizer shard " + path + " has no F32 tensor '" + names[m] + "' of " +
                              std::to_string(shard.end - shard.begin) + " elements (" + kZeroLayoutFile +
                              " says it holds [" + std::to_string(shard.begin) + ", " + std::to_string(shard.end) +
                              ")): restore it, or resume from another checkpoint");
      }
    }
    files_[index] = std::move(opened);
    return *files_[index];
  }

  std::string dir_;
  const ZeroLayout& layout_;
  std::vector<std::unique_ptr<ShardFile>> files_;
};

/// The saved parameter of name `name` and `numel` elements; CheckpointError when there is none.
const ZeroLayout::Param& savedParam(const std::map<std::string, const ZeroLayout::Param*>& by_name,
                                    const std::string& name, int64_t numel, const std::string& dir) {
  const auto found = by_name.find(name);
  if (found == by_name.end()) {
    throw CheckpointError("checkpoint " + dir + ": " + kZeroLayoutFile + " has no parameter '" + name +
                          "' of this run's model: it holds another model.variant's state (see config.yaml beside it)");
  }
  if (found->second->numel != numel) {
    throw CheckpointError("checkpoint " + dir + ": parameter '" + name + "' has " +
                          std::to_string(found->second->numel) + " elements in " + kZeroLayoutFile +
                          ", this run's model has " + std::to_string(numel));
  }
  return *found->second;
}

/// `target` (any device, float32) filled from saved elements [at, at + numel) of moment `which`.
void readInto(ShardReader& reader, int which, int64_t at, torch::Tensor target) {
  if (target.is_cpu() && target.is_contiguous()) {
    reader.read(which, at, target.numel(), target.data_ptr<float>());
    return;
  }
  auto staging = torch::empty({target.numel()}, torch::kFloat);
  reader.read(which, at, target.numel(), staging.data_ptr<float>());
  target.copy_(staging.view(target.sizes()));
}

}  // namespace

std::string zeroShardFileName(int rank, int world_size) {
  return "optimizer_shard_rank" + std::to_string(rank) + "_of" + std::to_string(world_size) + ".safetensors";
}

ZeroLayout zeroLayoutOf(const ShardedAdamW& zero, const std::vector<std::string>& names) {
  const int world_size = zero.worldSize();
  ZeroLayout layout;
  layout.world_size = world_size;
  layout.stage = zero.stage();
  layout.numel = zero.flatNumel();
  layout.step = zero.stepCount();
  for (size_t k = 0; k < names.size(); ++k) layout.params.push_back({names[k], zero.flatOffset(k), 0});
  // numel: the distance to the next offset in flat order.
  std::vector<size_t> order(names.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return layout.params[a].offset < layout.params[b].offset; });
  std::vector<ZeroLayout::Param> sorted;
  for (size_t i = 0; i < order.size(); ++i) {
    auto p = layout.params[order[i]];
    p.numel = (i + 1 < order.size() ? layout.params[order[i + 1]].offset : layout.numel) - p.offset;
    sorted.push_back(p);
  }
  layout.params = std::move(sorted);
  layout.buckets = zero.bucketRanges();
  for (int r = 0; r < world_size; ++r) {
    const auto [begin, end] = zero.shardRange(r);
    layout.shards.push_back({zeroShardFileName(r, world_size), begin, end});
  }
  return layout;
}

std::string formatZeroLayout(const ZeroLayout& layout) {
  nlohmann::json json = {{"format", kFormat},      {"world_size", layout.world_size}, {"stage", layout.stage},
                         {"numel", layout.numel},   {"step", layout.step},              {"dtype", "F32"}};
  nlohmann::json params = nlohmann::json::array();
  for (const auto& p : layout.params) params.push_back({{"name", p.name}, {"offset", p.offset}, {"numel", p.numel}});
  json["params"] = params;
  nlohmann::json buckets = nlohmann::json::array();
  for (const auto& [begin, end] : layout.buckets) buckets.push_back({begin, end});
  json["buckets"] = buckets;
  nlohmann::json shards = nlohmann::json::array();
  for (size_t r = 0; r < layout.shards.size(); ++r) {
    const auto& s = layout.shards[r];
    shards.push_back({{"rank", r}, {"file", s.file}, {"begin", s.begin}, {"end", s.end}});
  }
  json["shards"] = shards;
  return json.dump(1) + "\n";
}

ZeroLayout parseZeroLayout(const std::string& text, const std::string& file) {
  const auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  const auto bad = [&](const std::string& what) { return CheckpointError(file + ": " + what); };
  if (!json.is_object()) throw bad("not a JSON object");
  if (!json.contains("format") || json["format"] != kFormat) {
    throw bad(std::string("not a layout of format ") + kFormat + " (written by another version?)");
  }
  const auto count = [&](const nlohmann::json& object, const char* key, int64_t max) -> int64_t {
    if (!object.contains(key) || !object[key].is_number_integer() || object[key].get<int64_t>() < 0 ||
        object[key].get<int64_t>() > max) {
      throw bad(std::string(key) + " must be a whole number in [0, " + std::to_string(max) + "]");
    }
    return object[key].get<int64_t>();
  };
  constexpr int64_t kMaxCount = std::numeric_limits<int64_t>::max() / 8;  // element counts stay byte-countable
  ZeroLayout layout;
  layout.world_size = count(json, "world_size", kMaxWorld);
  layout.stage = count(json, "stage", 2);
  layout.numel = count(json, "numel", kMaxCount);
  layout.step = count(json, "step", kMaxCount);
  if (layout.world_size < 1 || layout.stage < 1) throw bad("world_size must be >= 1 and stage 1 or 2");
  if (!json.contains("dtype") || json["dtype"] != "F32") throw bad("dtype must be F32");
  if (!json.contains("params") || !json["params"].is_array() || json["params"].size() > kMaxParams) {
    throw bad("params must be a list of at most " + std::to_string(kMaxParams) + " parameters");
  }
  int64_t next = 0;
  for (const auto& p : json["params"]) {
    if (!p.is_object() || !p.contains("name") || !p["name"].is_string()) throw bad("a parameter has no name");
    ZeroLayout::Param param{p["name"].get<std::string>(), count(p, "offset", kMaxCount), count(p, "numel", kMaxCount)};
    if (param.offset != next) throw bad("parameter '" + param.name + "' does not start where the one before it ends");
    next = param.offset + param.numel;
    layout.params.push_back(std::move(param));
  }
  if (next != layout.numel) throw bad("the parameters do not cover numel elements");
  if (json.contains("buckets") && json["buckets"].is_array()) {
    for (const auto& b : json["buckets"]) {
      if (b.is_array() && b.size() == 2 && b[0].is_number_integer() && b[1].is_number_integer()) {
        layout.buckets.emplace_back(b[0].get<int64_t>(), b[1].get<int64_t>());
      }
    }
  }
  if (!json.contains("shards") || !json["shards"].is_array() ||
      json["shards"].size() != static_cast<size_t>(layout.world_size)) {
    throw bad("shards must list world_size shards");
  }
  next = 0;
  for (const auto& s : json["shards"]) {
    if (!s.is_object() || !s.contains("file") || !s["file"].is_string() ||
        !plainFileName(s["file"].get<std::string>())) {
      throw bad("a shard has no file name (a name in the folder, never a path)");
    }
    ZeroLayout::Shard shard{s["file"].get<std::string>(), count(s, "begin", kMaxCount), count(s, "end", kMaxCount)};
    if (shard.begin != next || shard.end < shard.begin) {
      throw bad("shard " + shard.file + " does not start where the one before it ends");
    }
    next = shard.end;
    layout.shards.push_back(std::move(shard));
  }
  if (next != layout.numel) throw bad("the shards do not cover numel elements");
  return layout;
}

ZeroLayout readZeroLayout(const std::string& dir) {
  const std::string path = (fs::path(dir) / kZeroLayoutFile).string();
  const Checked<std::string> text = files::readInputFile(path, "checkpoint file", files::Role::kOther, 64ull << 20);
  if (!text.ok()) throw CheckpointError(text.error);
  return parseZeroLayout(text.value, path);
}

void saveZeroShards(const std::string& dir, const ShardedAdamW& zero, const std::vector<std::string>& names,
                    int64_t chunk) {
  const int world_size = zero.worldSize();
  if (zero.rank() != 0) {
    zero.sendShardToRank0(chunk);
    return;
  }
  TORCH_CHECK(zero.dtype() == torch::kFloat, "sharded checkpoints hold float32 moments");
  const ZeroLayout layout = zeroLayoutOf(zero, names);
  for (int r = 0; r < world_size; ++r) {
    const auto& shard = layout.shards[static_cast<size_t>(r)];
    const auto bytes = static_cast<uint64_t>(shard.end - shard.begin) * sizeof(float);
    const std::vector<SafetensorsEntry> entries = {
        {kExpAvg, SafetensorsDtype::kF32, {shard.end - shard.begin}, 0, bytes},
        {kExpAvgSq, SafetensorsDtype::kF32, {shard.end - shard.begin}, bytes, 2 * bytes}};
    const std::string header = serializeSafetensorsHeader(
        entries, {{"rank", std::to_string(r)}, {"world_size", std::to_string(world_size)},
                  {"begin", std::to_string(shard.begin)}, {"end", std::to_string(shard.end)}});
    bool received = false;
    try {
      writeFileAtomically((fs::path(dir) / shard.file).string(), [&](int fd) {
        bool ok = writeAllBytes(fd, header.data(), header.size());
        int saved_errno = 0;
        received = true;
        zero.receiveShard(r, chunk, [&](const torch::Tensor& piece) {
          if (!ok) return;  // still received: rank r waits for every send
          const torch::Tensor cpu = piece.is_cpu() ? piece : piece.to(torch::kCPU);
          ok = writeAllBytes(fd, cpu.data_ptr(), static_cast<size_t>(cpu.numel()) * sizeof(float));
          if (!ok) saved_errno = errno;
        });
        errno = saved_errno;
        return ok;
      });
    } catch (...) {
      // Refused before the fill ran (the path): the other ranks' shards are still to be received.
      if (!received) zero.receiveShard(r, chunk, [](const torch::Tensor&) {});
      for (int later = r + 1; later < world_size; ++later) zero.receiveShard(later, chunk, [](const torch::Tensor&) {});
      throw;
    }
  }
  const std::string text = formatZeroLayout(layout);
  writeFileAtomically((fs::path(dir) / kZeroLayoutFile).string(),
                      [&](int fd) { return writeAllBytes(fd, text.data(), text.size()); });
}

void drainZeroShards(const ShardedAdamW& zero, int64_t chunk) {
  for (int r = 1; r < zero.worldSize(); ++r) zero.receiveShard(r, chunk, [](const torch::Tensor&) {});
}

void loadZeroShards(const std::string& dir, const std::vector<torch::Tensor>& params,
                    const std::vector<std::string>& names, ShardedAdamW* zero, torch::optim::AdamW* adamw) {
  const ZeroLayout layout = readZeroLayout(dir);
  std::map<std::string, const ZeroLayout::Param*> by_name;
  for (const auto& p : layout.params) by_name[p.name] = &p;
  // Every parameter checked before anything is read, so a mismatch is found before a byte moves.
  std::vector<int64_t> saved_offset(params.size());
  for (size_t k = 0; k < params.size(); ++k) saved_offset[k] = savedParam(by_name, names[k], params[k].numel(), dir).offset;
  ShardReader reader(dir, layout);
  torch::NoGradGuard no_grad;
  if (zero != nullptr) {
    zero->importPieces(layout.step, [&](size_t k, int64_t in_param, torch::Tensor m, torch::Tensor v) {
      if (layout.step == 0) return;
      readInto(reader, 0, saved_offset[k] + in_param, m);
      readInto(reader, 1, saved_offset[k] + in_param, v);
    });
    return;
  }
  TORCH_CHECK(adamw != nullptr, "loadZeroShards: no optimizer to load into");
  auto& states = adamw->state();
  states.clear();
  if (layout.step == 0) return;  // AdamW creates its state at its first step
  for (size_t k = 0; k < params.size(); ++k) {
    auto state = std::make_unique<torch::optim::AdamWParamState>();
    state->step(layout.step);
    auto m = torch::empty_like(params[k], params[k].options().dtype(torch::kFloat));
    auto v = torch::empty_like(m);
    readInto(reader, 0, saved_offset[k], m);
    readInto(reader, 1, saved_offset[k], v);
    state->exp_avg(m.to(params[k].scalar_type()));
    state->exp_avg_sq(v.to(params[k].scalar_type()));
    states[params[k].unsafeGetTensorImpl()] = std::move(state);
  }
}

std::vector<std::string> describeCheckpoint(const std::string& dir) {
  std::string why;
  if (!verifyCheckpoint(dir, &why)) throw CheckpointError("checkpoint " + dir + " is damaged: " + why);
  const Checked<std::string> text =
      files::readInputFile((fs::path(dir) / "manifest.json").string(), "checkpoint manifest", files::Role::kOther);
  if (!text.ok()) throw CheckpointError(text.error);
  const CheckpointManifest manifest = parseCheckpointManifest(text.value);
  std::map<std::string, CheckpointManifest::File> by_name;
  for (const auto& f : manifest.files) by_name[f.name] = f;
  std::vector<std::string> lines;
  lines.push_back("checkpoint " + dir + ": step " + std::to_string(manifest.step) + ", " +
                  std::to_string(manifest.files.size()) + " files (sizes and CRC-32C verified)");
  const auto fileLine = [&](const std::string& name, const std::string& what) {
    const auto& f = by_name.at(name);
    char crc[16];
    std::snprintf(crc, sizeof crc, "%08x", f.crc32c);
    return "  " + name + ": " + what + files::byteCountText(f.size) + ", crc32c " + crc;
  };
  if (!by_name.count(kZeroLayoutFile)) {
    lines.push_back("optimizer: full format (optimizer.pt, torch::optim's; any world size and stage resumes it)");
  } else {
    const ZeroLayout layout = readZeroLayout(dir);
    lines.push_back("optimizer: sharded, written by " + std::to_string(layout.world_size) + " rank(s) at ZeRO stage " +
                    std::to_string(layout.stage) + "; AdamW step " + std::to_string(layout.step) + ", " +
                    std::to_string(layout.numel) + " elements in " + std::to_string(layout.params.size()) +
                    " parameters, " + std::to_string(layout.buckets.size()) + " gradient buckets");
    for (size_t r = 0; r < layout.shards.size(); ++r) {
      const auto& s = layout.shards[r];
      if (!by_name.count(s.file)) throw CheckpointError("checkpoint " + dir + ": shard " + s.file + " is not in its manifest");
      lines.push_back(fileLine(s.file, "rank " + std::to_string(r) + ", elements [" + std::to_string(s.begin) + ", " +
                                           std::to_string(s.end) + "), "));
    }
  }
  for (const auto& f : manifest.files) {
    if (f.name.rfind("optimizer_shard_", 0) == 0) continue;
    lines.push_back(fileLine(f.name, ""));
  }
  return lines;
}

}  // namespace taehv::train
