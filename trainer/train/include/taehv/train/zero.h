// ZeRO stages 1 and 2 (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
// Models") for AdamW: each rank keeps the AdamW moments of, and updates, one contiguous shard of the flattened
// parameters, then the updated shards are all-gathered into every rank's parameters.
//
// The flat order is the parameters' registration order (model->parameters()); the flat length N is padded to
// world_size x S with S = ceil(N / world_size), so shards differ by less than one element, and rank r owns the
// elements [r S, min(N, (r + 1) S)). The update is the formula of torch::optim::AdamW (decoupled weight decay,
// amsgrad off) in its tensor operations, on views of the parameters (in place), so a stage 1 or 2 run reaches
// stage 0's weights to rounding.
//
// Stage 1: GradSync all-reduces the gradients as at stage 0 (overlapping backward); step() reads this rank's
// pieces of them in place. Stage 2: GradSync does not communicate; prepareGradients() reduce-scatters the locally
// accumulated gradients so a rank only ever holds its shard's reduced gradients (backward still produces the
// full local ones first). step() releases the parameters' .grad. Collectives run in rounds of at most bucket_mb
// per rank, so the communication buffers stay small (world_size x round elements).
//
// Checkpoints stay in torch::optim::AdamW's format: exportState() gathers the full moments into rank 0's AdamW
// object, which optimizer.save() writes, importState() takes this rank's shard out of one optimizer.load() filled, so a
// checkpoint resumes at any world size and any stage (0, 1 or 2). Thread safety: one thread (the training
// thread); every rank calls every method in the same order (they are collectives).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "taehv/train/dist.h"

namespace taehv::train {

struct ShardedAdamWOptions {
  int stage = 1;  ///< 1 or 2
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;  ///< torch::optim::AdamWOptions' default, which stage 0 uses
  double weight_decay = 1e-2;
  double bucket_mb = 25;  ///< largest collective round, per rank
};

class ShardedAdamW {
 public:
  /// `params`: the model's parameters (contiguous, one dtype and device), in the same order on every rank.
  ShardedAdamW(Distributed& dist, std::vector<torch::Tensor> params, ShardedAdamWOptions options);

  int stage() const { return options_.stage; }
  /// Whether GradSync should all-reduce the last micro-step's gradients (stage 1) or leave them local (stage 2).
  bool wantsAllReducedGradients() const { return options_.stage == 1; }

  /// After the step's last backward (and, at stage 1, GradSync::finish()): stage 2 reduce-scatters this rank's
  /// shard of the averaged gradient and releases every parameter's .grad; stage 1 reads the all-reduced .grad in
  /// place at step(). A parameter without a gradient counts as zeros.
  void prepareGradients();
  /// Clips the global L2 norm of the averaged gradient to `max_norm` (as torch::nn::utils::clip_grad_norm_) and
  /// returns the norm before clipping. One small all-reduce.
  double clipGradNorm(double max_norm);
  /// One AdamW update of this rank's shard at learning rate `lr`, in place in the parameters, releases the
  /// gradients, then all-gathers the other ranks' shards into the parameters.
  void step(double lr);

  /// Collective (all-gathers both moments). On rank 0, writes the full state (moments and step count, every
  /// parameter) into `optimizer`'s state as its own step() would have left it; the caller saves it there and then
  /// calls releaseExported(). Other ranks hold the gathered copy only during the call.
  void exportState(torch::optim::AdamW& optimizer) const;
  /// Drops the state exportState() put into `optimizer` (it is a full copy, the memory ZeRO saves).
  static void releaseExported(torch::optim::AdamW& optimizer);
  /// Takes this rank's shard out of a full state loaded into `optimizer` (optimizer.load()), then drops it
  /// there. A parameter without state starts from zeros, as AdamW's own first step does.
  void importState(torch::optim::AdamW& optimizer);

  int64_t stepCount() const { return step_; }
  int64_t shardBegin() const { return shard_begin_; }
  int64_t shardEnd() const { return shard_end_; }
  int64_t flatNumel() const { return numel_; }
  /// Bytes of optimizer state this rank holds (both moments of its shard).
  int64_t stateBytes() const { return 2 * shard_size_ * exp_avg_.element_size(); }

 private:
  /// Calls fn(param index, element offset in the parameter, offset in [begin, end), length) for each piece of
  /// the flat range [begin, end) (clipped to N); pieces arrive in flat order.
  template <typename Fn>
  void forEachPiece(int64_t begin, int64_t end, Fn&& fn) const;
  /// Copies the flat range [begin, begin + dst.numel()) of the gradients (grads = true) or parameters into dst,
  /// zeros where there is none (padding, a parameter without a gradient).
  void readFlat(int64_t begin, torch::Tensor dst, bool grads) const;
  void writeParams(int64_t begin, const torch::Tensor& src);
  /// This rank's shard as pieces of parameters: the parameter's elements (a view), their averaged gradient (a
  /// view of .grad at stage 1, of grad_ at stage 2) and where they sit in the shard.
  struct Piece {
    torch::Tensor param, grad;
    int64_t in_shard = 0, len = 0;
  };
  std::vector<Piece> shardPieces() const;
  void updatePiece(const Piece& piece, double lr);
  int64_t roundElements() const;

  Distributed& dist_;
  std::vector<torch::Tensor> params_;
  std::vector<int64_t> offsets_;  ///< flat offset of each parameter; offsets_.back() = N
  ShardedAdamWOptions options_;
  int64_t numel_ = 0;       ///< N
  int64_t shard_size_ = 0;  ///< S (padded)
  int64_t shard_begin_ = 0, shard_end_ = 0;
  torch::Tensor exp_avg_, exp_avg_sq_;  ///< [S] each
  torch::Tensor grad_;                  ///< [S], stage 2: this rank's averaged gradient between prepare and step
  bool prepared_ = false;
  int64_t step_ = 0;
};

}  // namespace taehv::train
