// ZeRO stages 1 and 2 (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
// Models") for AdamW: each rank keeps the AdamW moments of, and updates, one contiguous shard of the flattened
// parameters, then the updated shards are all-gathered into every rank's parameters.
//
// Flat buffers. The constructor moves the parameters into one flat buffer (their .data becomes a view of it), in
// reverse registration order (the order backward produces their gradients), padded to W x S elements with
// S = ceil(N / W): rank r owns the elements [r S, (r + 1) S), so shards differ by less than one element and a
// shard is one slice. The AdamW moments exist for that slice only ([S] each), the update is torch::optim::AdamW's
// formula (decoupled weight decay, amsgrad off) as eight tensor operations on the slice, and the all-gather writes
// every rank's slice straight into the flat buffer, so the parameters need no copy in or out.
//
// Gradients are averaged in the buckets GradSync uses (gradientBuckets(): the same parameters, laid out in the
// same order), each launched from the parameters' post-accumulate hooks as soon as backward has accumulated its
// last gradient, so the communication overlaps the rest of backward.
// Stage 1: every .grad is a view of one flat gradient buffer (kept between steps, zeroed at each step's start);
// a bucket's all-reduce runs in place on its slice of it, so the sums are bitwise those of stage 0.
// Stage 2: no gradient memory between steps. A bucket's buffer is made when backward reaches the bucket's first
// parameter (its .grad then views of it, so backward accumulates in place); once the bucket is complete it is
// reduce-scattered, point to point (each other rank gets its part; c10d's Gloo has no reduce-scatter, its
// _reduce_scatter_base is an all-reduce of a clone), and only this rank's shard of the sum is kept, from the
// end of backward to the update. Half an all-reduce's bytes; at 2 ranks the sums are bitwise stage 0's, from 3
// on they add the same terms in rank order instead of Gloo's ring order (a few ulp apart).
//
// Checkpoints are sharded (zero_checkpoint.h): every rank's moments go to rank 0 one chunk at a time
// (sendShardToRank0 / receiveShard), which writes one file per rank, so no rank ever holds more than its shard
// plus one chunk (nothing gathers the moments any more); a resume reads its own pieces (importPieces), at any world
// size and stage. An old full-format checkpoint (optimizer.pt, still stage 0's) loads through importState(), which
// takes this rank's shard out of one optimizer.load() filled. Thread safety: one thread (the training thread, and
// backward's hooks on it); every rank calls every method in the same order (they are collectives).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "taehv/train/config.h"
#include "taehv/train/dist.h"

namespace taehv::train {

struct ShardedAdamWOptions {
  int stage = 1;  ///< 1 or 2
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;  ///< torch::optim::AdamWOptions' default, which stage 0 uses
  double weight_decay = 1e-2;
  double bucket_mb = DistConfig::kDefaultBucketMb;  ///< gradient bucket size, as GradSync's (dist.bucket_mb)
};

class ShardedAdamW {
 public:
  /// `params`: the model's parameters (contiguous, one dtype and device, leaves), in the same order on every
  /// rank. Their data moves into the flat buffer (the tensors, their TensorImpls and values stay the same).
  ShardedAdamW(Distributed& dist, std::vector<torch::Tensor> params, ShardedAdamWOptions options);
  ~ShardedAdamW();
  ShardedAdamW(const ShardedAdamW&) = delete;
  ShardedAdamW& operator=(const ShardedAdamW&) = delete;

  int stage() const { return options_.stage; }
  int rank() const { return dist_.rank(); }
  int worldSize() const { return dist_.worldSize(); }

  /// At each step's start, instead of resetting the parameters' .grad: stage 1 zeros the flat gradient buffer
  /// (every .grad a view of it), stage 2 releases the .grad tensors and the bucket buffers.
  void zeroGrad();
  /// Whether the coming backward is the step's last micro-step: only then do the buckets communicate (as
  /// GradSync::setSync). Gradients added by GradSync::addGrads (the sliced CPU step) are sent at prepare time.
  void setSync(bool sync) { sync_ = sync; }
  /// After the step's last backward: launches the buckets not launched yet, waits for all, keeps this rank's
  /// shard of the averaged gradient in shardGradient(). A parameter without a gradient counts as zeros.
  void prepareGradients();
  /// Clips the global L2 norm of the averaged gradient to `max_norm` (as torch::nn::utils::clip_grad_norm_) and
  /// returns the norm before clipping. One small all-reduce.
  double clipGradNorm(double max_norm);
  /// One AdamW update of this rank's shard at learning rate `lr`, in place in the flat parameters, then
  /// all-gathers every rank's shard into them. Stage 2 releases its shard gradient.
  void step(double lr);

  /// Takes this rank's shard out of a full state loaded into `optimizer` (optimizer.load()), then drops it
  /// there. A parameter without state starts from zeros, as AdamW's own first step does.
  void importState(torch::optim::AdamW& optimizer);

  /// Sharded checkpoints (zero_checkpoint.h). Collective with receiveShard on rank 0: ranks 1.. send their two
  /// moments' real elements ([shardBegin(), shardEnd()), exp_avg first) in chunks of `chunk` elements, one at a
  /// time (each waits for rank 0's receive). Allocates nothing. Rank 0 does nothing here.
  void sendShardToRank0(int64_t chunk) const;
  /// Rank 0: hands rank `rank`'s exp_avg then exp_avg_sq, `chunk` elements at a time in flat order, to `consume`
  /// (a contiguous tensor on the training device, valid during the call): its own moments' slices for rank 0, else
  /// received into one buffer of `chunk` elements. Every chunk is received even when `consume` throws (the sender
  /// would wait for ever); the first exception is rethrown at the end.
  void receiveShard(int rank, int64_t chunk, const std::function<void(const torch::Tensor&)>& consume) const;
  /// Sets this rank's moments from a checkpoint piece by piece: zeros first, then `fill(param index, offset in the
  /// parameter, exp_avg piece, exp_avg_sq piece)` for each piece of this rank's shard (views into the moments, to
  /// be written); the AdamW step count becomes `step`.
  void importPieces(int64_t step,
                    const std::function<void(size_t param, int64_t in_param, torch::Tensor m, torch::Tensor v)>& fill);
  /// The first and one-past-last element of rank `rank`'s shard in the unpadded flat parameters.
  std::pair<int64_t, int64_t> shardRange(int rank) const;
  /// Parameter `param`'s first element in the flat parameters (the order is reverse registration order).
  int64_t flatOffset(size_t param) const { return flat_offset_[param]; }
  /// The gradient buckets as flat ranges [begin, end), in flat order.
  std::vector<std::pair<int64_t, int64_t>> bucketRanges() const;
  /// AdamW steps taken (the bias correction's t).
  int64_t stepCount() const { return step_; }
  /// The element type of the moments.
  torch::ScalarType dtype() const { return exp_avg_.scalar_type(); }

  /// This rank's elements of the unpadded flat parameters: [shardBegin(), shardEnd()) of flatNumel().
  int64_t shardBegin() const { return shard_begin_; }
  int64_t shardEnd() const { return shard_end_; }
  int64_t flatNumel() const { return numel_; }
  /// Seconds spent in the AdamW arithmetic of the last step() (the part that divides by the world size;
  /// without the all-gather).
  double lastUpdateSeconds() const { return last_update_s_; }

 private:
  struct Bucket {
    int64_t begin = 0, end = 0;  ///< flat range
    std::vector<size_t> params;  ///< indices into params_, in flat order
    size_t ready = 0;
    bool launched = false;
    torch::Tensor buffer;  ///< stage 2: the bucket's gradients, from its first gradient to its harvest
    torch::Tensor extra;   ///< stage 2, 3+ ranks: other ranks' copies of this rank's part, beyond the first
    std::unique_ptr<PendingCollective> pending;
  };
  class AccumulatingHook;
  class AccumulatedHook;
  /// Stage 2: bucket `index`'s buffer, made (zeros, every .grad of the bucket a view of it) if it does not exist.
  torch::Tensor bucketBuffer(size_t index);
  /// This rank's [S] slice of the averaged gradient (stage 1: of the flat buffer; stage 2: shard_grad_).
  torch::Tensor shardGradient() const;
  /// Stage 2: waits for the bucket's transfers, sums this rank's part into shard_grad_, releases the buffers.
  /// Does nothing the second time.
  void harvest(Bucket& b);
  void onAccumulated(size_t param);
  void launchReady();
  void launch(Bucket& bucket);
  /// Calls fn(param index, element offset in the parameter, offset in [begin, end), length) for each piece of
  /// the flat range [begin, end) (clipped to N); pieces arrive in flat order.
  template <typename Fn>
  void forEachPiece(int64_t begin, int64_t end, Fn&& fn) const;

  Distributed& dist_;
  std::vector<torch::Tensor> params_;
  ShardedAdamWOptions options_;
  std::vector<size_t> order_;          ///< parameter index at each flat position (reverse registration order)
  std::vector<int64_t> flat_offset_;   ///< per parameter index: its first element in the flat buffer
  std::vector<int64_t> sorted_offset_; ///< flat_offset_ in flat order, then N
  int64_t numel_ = 0;                  ///< N
  int64_t shard_size_ = 0;             ///< S (padded)
  int64_t shard_begin_ = 0, shard_end_ = 0;
  torch::Tensor flat_params_;           ///< [W S], the parameters' storage
  torch::Tensor flat_grads_;            ///< stage 1: [W S], the .grad views' storage
  torch::Tensor shard_grad_;            ///< stage 2: [S], from the first bucket's launch to the update
  torch::Tensor exp_avg_, exp_avg_sq_;  ///< [S] each
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  ///< per parameter index
  std::vector<bool> reported_;     ///< per parameter index: its gradient is final in this synchronising pass
  size_t next_launch_ = 0;
  /// Kept alive: they hold the hooks. The pointer type is libtorch's (std::shared_ptr up to 2.11, c10::intrusive_ptr
  /// from 2.12 on).
  using NodePtr = decltype(torch::autograd::impl::grad_accumulator(std::declval<const torch::Tensor&>()));
  std::vector<NodePtr> accumulators_;
  std::vector<uintptr_t> hook_keys_;
  bool sync_ = true;
  bool prepared_ = false;
  int64_t step_ = 0;
  double last_update_s_ = 0;
};

}  // namespace taehv::train
