#include "train_state.h"

#include <chrono>
#include <filesystem>
#include <limits>
#include <sstream>
#include <utility>

#include "run_setup.h"
#include "taehv/files/input_file.h"
#include "taehv/log.h"
#include "taehv/model/output_file.h"
#include "zero_checkpoint.h"

namespace taehv::train {
namespace fs = std::filesystem;
namespace {

void saveArchive(torch::serialize::OutputArchive& archive, const std::string& path) {
  std::ostringstream bytes;
  archive.save_to(bytes);
  writeText(path, bytes.str());
}

void saveTensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  torch::serialize::OutputArchive archive;
  for (const auto& [name, t] : tensors) archive.write(name, t.detach().to(torch::kCPU));
  saveArchive(archive, path);
}

/// `path`, a file of a checkpoint folder, checked to be a regular file before libtorch opens it by name (a FIFO
/// there would block its open: taehv/files/input_file.h). Throws CheckpointError.
std::string checkpointFile(const std::string& path) {
  if (Status regular = files::checkInputFile(path, "checkpoint file", files::Role::kOther); !regular.ok()) {
    throw CheckpointError(regular.error);
  }
  return path;
}

/// The parameters' names, in the optimizer's order (named_parameters() is parameters()' order).
std::vector<std::string> paramNames(TAEHV& model) {
  std::vector<std::string> names;
  for (const auto& [name, t] : namedParams(model)) names.push_back(name);
  return names;
}

/// Elements per transfer of a sharded save: one gradient bucket's (dist.bucket_mb), the memory it may add.
int64_t shardChunk(const Config& cfg) {
  return std::max<int64_t>(1, static_cast<int64_t>(cfg.dist.bucket_mb * (1 << 20) / sizeof(float)));
}

}  // namespace

void writeText(const std::string& path, const std::string& text) {
  writeFileAtomically(path, [&](int fd) { return writeAllBytes(fd, text.data(), text.size()); });
}

void loadTensors(const std::string& path, TAEHV& model, const std::vector<torch::Tensor>& into,
                 const torch::Device& device) {
  torch::serialize::InputArchive archive;
  archive.load_from(checkpointFile(path), device);
  torch::NoGradGuard no_grad;
  const auto named = namedParams(model);
  const auto shape = [](c10::IntArrayRef sizes) { return c10::str(sizes); };
  for (size_t i = 0; i < into.size(); ++i) {
    torch::Tensor t;
    if (!archive.try_read(named[i].first, t)) {
      throw CheckpointError(path + " has no tensor '" + named[i].first + "' of this run's model: it holds another "
                            "model.variant's weights (see config.yaml beside it)");
    }
    if (t.sizes() != into[i].sizes()) {
      throw CheckpointError(path + ": tensor '" + named[i].first + "' has shape " + shape(t.sizes()) +
                            ", this run's model has " + shape(into[i].sizes()) +
                            ": it holds another model.variant's weights (see config.yaml beside it)");
    }
    into[i].copy_(t);
  }
}

void requireSavedSettings(const std::string& dir, const Config& cfg, const std::vector<std::string>& keys) {
  const fs::path file = fs::path(dir) / "config.yaml";
  if (!fs::exists(file)) return;  // a checkpoint of an older version: its tensors are checked as they are read
  Config saved;
  try {
    saved.mergeYamlFile(file.string());
  } catch (const ConfigError& e) {
    log::warn("cannot compare checkpoint " + dir + " with this run's config (" + e.what() +
              "); its tensors are checked as they are read");
    return;
  }
  for (const std::string& key : keys) {
    if (saved.get(key) == cfg.get(key)) continue;
    throw CheckpointError("checkpoint " + dir + " was saved by a run with " + key + "=" + saved.get(key) +
                          "; this run has " + key + "=" + cfg.get(key) + ": run with --set " + key + "=" +
                          saved.get(key) + " to use this checkpoint");
  }
}

int64_t TrainState::parameterCount() const {
  int64_t n = 0;
  for (const auto& p : params) n += p.numel();
  return n;
}

TrainState makeTrainState(const Config& cfg, Distributed& dist, const torch::Device& device) {
  TrainState state;
  state.model = makeModel(cfg, device);
  state.params = state.model->parameters();
  if (cfg.train.optimizer == OptimizerKind::kSgd) {
    state.optimizer = std::make_unique<torch::optim::SGD>(
        state.params, torch::optim::SGDOptions(cfg.train.lr).weight_decay(cfg.train.weight_decay));
  } else {
    state.optimizer = std::make_unique<torch::optim::AdamW>(
        state.params, torch::optim::AdamWOptions(cfg.train.lr)
                          .betas({cfg.train.beta1, cfg.train.beta2})
                          .weight_decay(cfg.train.weight_decay));
  }
  if (cfg.train.zero_stage > 0) {
    ShardedAdamWOptions zero_options;
    zero_options.stage = static_cast<int>(cfg.train.zero_stage);
    zero_options.beta1 = cfg.train.beta1;
    zero_options.beta2 = cfg.train.beta2;
    zero_options.weight_decay = cfg.train.weight_decay;
    zero_options.bucket_mb = cfg.dist.bucket_mb;
    state.zero = std::make_unique<ShardedAdamW>(dist, state.params, zero_options);
  }
  if (cfg.train.ema > 0) {
    for (const auto& p : state.params) state.ema.push_back(p.detach().clone());
  }
  return state;
}

std::optional<std::string> checkpointToResume(const std::string& resume, const std::string& out_dir,
                                              const std::function<void(const std::string&)>& warn) {
  if (resume.empty()) {
    const auto existing = listCheckpoints(out_dir);
    if (!existing.empty()) {
      throw CheckpointError("output.dir " + out_dir + " already holds checkpoints of an earlier run (newest: " +
                            existing.front().second + "); training from step 0 would overwrite them. Continue that "
                            "run with --resume latest, or give another output.dir (--set output.dir=...)");
    }
    return std::nullopt;
  }
  return resolveResume(resume, out_dir, warn);
}

std::optional<std::string> agreedCheckpoint(int64_t step, const std::string& out_dir) {
  if (step == 0) return std::nullopt;
  const std::string dir = (fs::path(out_dir) / ("checkpoint-" + std::to_string(step))).string();
  std::string why;
  if (!fs::is_directory(dir)) why = "it is missing";
  else if (!verifyCheckpoint(dir, &why)) why = "it is damaged: " + why;
  if (why.empty()) return dir;
  throw CheckpointError("TAEHV_RESUME_STEP=" + std::to_string(step) + " (the step taehv-run's node group agreed "
                        "every node holds) but this node's copy " + dir + " cannot be resumed: " + why +
                        "; restore it, or remove it so that the next formation agrees on an older step");
}

BatchShape batchShape(const TrainConfig& train, int64_t world, const std::optional<CheckpointState>& resumed) {
  BatchShape shape;
  shape.grad_accum = train.grad_accum;
  const int64_t per_step = world * train.batch_per_rank;
  shape.global_batch = per_step * train.grad_accum;
  if (!resumed) return shape;
  // The reference: what the checkpoint says, else (older checkpoints) the shape it was saved at.
  const int64_t reference = resumed->global_batch > 0 ? resumed->global_batch
                            : resumed->world_size > 0 && resumed->batch_per_rank > 0 && resumed->grad_accum > 0
                                ? resumed->world_size * resumed->batch_per_rank * resumed->grad_accum
                                : 0;
  if (reference == 0 || reference == shape.global_batch || !train.keep_global_batch) {
    if (reference > 0 && reference != shape.global_batch) {
      shape.note = "global batch " + std::to_string(shape.global_batch) + " (the checkpoint's was " +
                   std::to_string(reference) + "): train.keep_global_batch=false takes the config as it is";
    }
    return shape;
  }
  const std::string was = "the checkpoint's global batch " + std::to_string(reference) + " (saved at " +
                          std::to_string(resumed->world_size) + " ranks)";
  if (reference % per_step == 0 && reference / per_step <= Config::kMaxAccum) {
    shape.grad_accum = reference / per_step;
    shape.global_batch = reference;
    shape.note = "keeping " + was + ": grad_accum " + std::to_string(train.grad_accum) + " -> " +
                 std::to_string(shape.grad_accum) + " at " + std::to_string(world) + " ranks x batch_per_rank " +
                 std::to_string(train.batch_per_rank);
    return shape;
  }
  shape.lr_scale = static_cast<double>(shape.global_batch) / static_cast<double>(reference);
  shape.global_batch = reference;  // the lr stays meant for it: a later resume scales from it again
  shape.note = std::to_string(world) + " ranks x batch_per_rank " + std::to_string(train.batch_per_rank) +
               " cannot divide " + was + ": global batch " + std::to_string(per_step * train.grad_accum) +
               ", lr scaled by " + std::to_string(shape.lr_scale) + " (linear scaling rule)";
  return shape;
}

CheckpointState loadTrainState(const std::string& dir, TrainState& state, const torch::Device& device) {
  const Checked<std::string> text =
      files::readInputFile((fs::path(dir) / "state.json").string(), "checkpoint file", files::Role::kOther);
  if (!text.ok()) throw CheckpointError(text.error);
  const CheckpointState saved = parseCheckpointState(text.value);
  loadTensors((fs::path(dir) / "model.pt").string(), state.model, state.params, device);
  if (fs::exists(fs::symlink_status(fs::path(dir) / kZeroLayoutFile))) {
    // Sharded (ZeRO 1-2): this rank's pieces, or at stage 0 every parameter's state.
    auto* adamw = dynamic_cast<torch::optim::AdamW*>(state.optimizer.get());
    if (adamw == nullptr) {
      throw CheckpointError("checkpoint " + dir + " holds sharded AdamW state (ZeRO); this run's train.optimizer is "
                            "not adamw: resume with train.optimizer=adamw");
    }
    loadZeroShards(dir, state.params, paramNames(state.model), state.zero.get(), state.zero ? nullptr : adamw);
  } else {
    torch::serialize::InputArchive archive;
    archive.load_from(checkpointFile((fs::path(dir) / "optimizer.pt").string()), device);
    try {
      state.optimizer->load(archive);
    } catch (const c10::Error& e) {  // another optimizer's state: libtorch asserts ("report a bug to PyTorch")
      const std::string what = e.what_without_backtrace();
      throw CheckpointError("checkpoint " + dir + ": optimizer.pt does not hold this run's train.optimizer state (" +
                            what.substr(0, what.find('\n')) + "): resume with the optimizer it was saved with");
    }
    // This rank's shard, at any earlier world size and stage.
    if (state.zero) state.zero->importState(dynamic_cast<torch::optim::AdamW&>(*state.optimizer));
  }
  if (!state.ema.empty() && fs::exists(fs::path(dir) / "ema.pt")) {
    loadTensors((fs::path(dir) / "ema.pt").string(), state.model, state.ema, device);
  }
  if (fs::exists(fs::path(dir) / "rng.pt")) {
    torch::Tensor rng_state;
    torch::load(rng_state, checkpointFile((fs::path(dir) / "rng.pt").string()));
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    generator.set_state(rng_state);
  }
  return saved;
}

std::string saveTrainState(const std::string& out_dir, int64_t keep, TrainState& state, const CheckpointState& saved,
                           const Config& cfg, bool rank0) {
  // ZeRO 1-2: every rank's shard of the moments to rank 0, a chunk at a time, into a file per rank (never gathered).
  const int64_t chunk = shardChunk(cfg);
  if (!rank0) {
    if (state.zero) saveZeroShards("", *state.zero, {}, chunk);
    return std::string();
  }
  bool shards_done = false;
  std::string path;
  try {
    path = saveCheckpoint(out_dir, saved.step, keep, [&](const std::string& dir) {
      const auto named = namedParams(state.model);
      if (state.zero) {  // first: the other ranks wait in it
        shards_done = true;
        saveZeroShards(dir, *state.zero, paramNames(state.model), chunk);
      }
      saveTensors(dir + "/model.pt", named);
      if (!state.zero) {
        torch::serialize::OutputArchive archive;
        state.optimizer->save(archive);
        saveArchive(archive, dir + "/optimizer.pt");
      }
      if (!state.ema.empty()) {
        std::vector<std::pair<std::string, torch::Tensor>> ema;
        for (size_t i = 0; i < state.ema.size(); ++i) ema.emplace_back(named[i].first, state.ema[i]);
        saveTensors(dir + "/ema.pt", ema);
      }
      {
        std::ostringstream rng;
        torch::save(at::detail::getDefaultCPUGenerator().get_state(), rng);
        writeText(dir + "/rng.pt", rng.str());
      }
      writeText(dir + "/state.json", formatCheckpointState(saved));
      writeText(dir + "/config.yaml", cfg.toYaml());
    });
  } catch (...) {
    if (state.zero && !shards_done) drainZeroShards(*state.zero, chunk);  // the others wait for rank 0
    throw;
  }
  return path;
}

std::string consolidateCheckpoint(const std::string& dir, const std::string& out_dir) {
  std::string why;
  if (!verifyCheckpoint(dir, &why)) {
    throw CheckpointError("checkpoint " + dir + " is damaged (" + why + "); nothing was written");
  }
  const fs::path yaml = fs::path(dir) / "config.yaml";
  if (!fs::exists(fs::symlink_status(yaml))) {
    throw CheckpointError("checkpoint " + dir + " has no config.yaml (the model and optimizer it was saved with); "
                          "nothing was written");
  }
  Config cfg;
  try {
    cfg.mergeYamlFile(yaml.string());
  } catch (const ConfigError& e) {
    throw CheckpointError("checkpoint " + dir + ": " + e.what());
  }
  Config full = cfg;  // one rank, stage 0: the full state in torch::optim's format
  full.train.zero_stage = 0;
  Distributed alone(DistEnv{}, DistBackend::kGloo, std::chrono::milliseconds(1000), torch::kCPU, "");
  TrainState state = makeTrainState(full, alone, torch::kCPU);
  const CheckpointState saved = loadTrainState(dir, state, torch::kCPU);
  return saveTrainState(out_dir, std::numeric_limits<int64_t>::max(), state, saved, cfg, true);
}

}  // namespace taehv::train
