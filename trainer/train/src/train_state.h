// What training changes and a checkpoint keeps, side by side: the weights, the optimizer (its state sharded in
// ShardedAdamW at ZeRO stages 1-2), the EMA weights, the CPU generator and state.json. Saving and loading live
// together here so the files a checkpoint holds are written and read in one place. Private to taehv::train.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "taehv/model/taehv.h"
#include "taehv/train/checkpoint.h"
#include "taehv/train/config.h"
#include "taehv/train/dist.h"
#include "taehv/train/zero.h"

namespace taehv::train {

struct TrainState {
  TAEHV model{nullptr};
  std::vector<torch::Tensor> params;                   ///< model->parameters()
  std::unique_ptr<torch::optim::Optimizer> optimizer;  ///< AdamW or SGD; at ZeRO 1-2 only a carrier for checkpoints
  std::unique_ptr<ShardedAdamW> zero;                  ///< ZeRO stages 1-2; null at stage 0
  std::vector<torch::Tensor> ema;                      ///< empty without train.ema

  int64_t parameterCount() const;
};

/// The model (makeModel), its optimizer as train.optimizer / train.zero_stage say, and the EMA copy.
TrainState makeTrainState(const Config& cfg, Distributed& dist, const torch::Device& device);

/// The checkpoint `--resume` names (nullopt: start at step 0; `warn` hears why a newer one was passed over).
/// Without --resume, an output folder that already holds checkpoints is refused: a new run would overwrite them.
std::optional<std::string> checkpointToResume(const std::string& resume, const std::string& out_dir,
                                              const std::function<void(const std::string&)>& warn);

/// TAEHV_RESUME_STEP (node-local checkpoints): the folder checkpoint-<step> in `out_dir`, verified (nullopt for
/// step 0: no node holds one). Throws CheckpointError, one line, when this node's copy is missing or damaged: the
/// node group agreed every node holds it, and resuming from another step would split the ranks.
std::optional<std::string> agreedCheckpoint(int64_t step, const std::string& out_dir);

/// Loads checkpoint folder `dir` into `state` (at ZeRO 1-2 this rank's shard of the optimizer state, whatever the
/// world size and stage it was saved at) and the CPU generator; returns its state.json.
CheckpointState loadTrainState(const std::string& dir, TrainState& state, const torch::Device& device);

/// The shape a run takes on: the config's, or on a resume at another shape (TrainConfig::keep_global_batch) the
/// checkpoint's global batch kept by a new grad_accum, or else the config's shape with lr scaled linearly.
struct BatchShape {
  int64_t grad_accum = 1;
  double lr_scale = 1;
  int64_t global_batch = 0;  ///< the reference global batch to save (CheckpointState::global_batch)
  std::string note;          ///< "" when the config's shape is taken as it is; else what changed and why
};
BatchShape batchShape(const TrainConfig& train, int64_t world, const std::optional<CheckpointState>& resumed);

/// Saves checkpoint-<saved.step> under `out_dir` keeping the newest `keep`. Collective at ZeRO stages 1-2 (every
/// rank calls it); only a rank with `rank0` writes (rank 0; with checkpoint.node_local, at ZeRO stage 0, also each
/// node's local rank 0, into its own out_dir). Returns the folder where written, "" elsewhere.
std::string saveTrainState(const std::string& out_dir, int64_t keep, TrainState& state, const CheckpointState& saved,
                           const Config& cfg, bool rank0);

/// `taehv-train checkpoint consolidate`: loads checkpoint folder `dir` (any format, with its config.yaml) at one rank
/// and stage 0 and saves it in the full format (optimizer.pt) as checkpoint-STEP under `out_dir` (the folder holding
/// `dir` replaces it atomically). Returns the folder written. Throws CheckpointError for a damaged `dir`.
std::string consolidateCheckpoint(const std::string& dir, const std::string& out_dir);

/// Refuses checkpoint folder `dir` (CheckpointError naming both values) when its config.yaml gives any of `keys`
/// (model.variant, train.optimizer: what its files' layout follows) another value than `cfg`. Called before its
/// tensors are loaded, which would otherwise fail inside libtorch. A checkpoint without config.yaml passes.
void requireSavedSettings(const std::string& dir, const Config& cfg, const std::vector<std::string>& keys);

/// Reads the tensors named as the model's parameters from checkpoint file `path` (model.pt, ema.pt) into `into`
/// (the model's parameters or their EMA copies, in named_parameters() order). A tensor missing or of another shape
/// is a CheckpointError naming it.
void loadTensors(const std::string& path, TAEHV& model, const std::vector<torch::Tensor>& into,
                 const torch::Device& device);

/// The file writes of a checkpoint, also used for weights outside one: written in memory first, then by
/// writeFileAtomically (libtorch's file writer throws from its destructor when the disk is full: std::terminate).
void writeText(const std::string& path, const std::string& text);

}  // namespace taehv::train
