#include "taehv/train/zero.h"

#include "taehv/model/fused_adamw.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace taehv::train {
namespace {
/// Tag of stage 2's reduce-scatter transfers (Distributed::allGather's are 1).
constexpr int kReduceScatterTag = 2;
/// Tag of a sharded checkpoint's transfers to rank 0 (sendShardToRank0 / receiveShard).
constexpr int kShardSaveTag = 3;
}  // namespace

/// Stage 2: runs before AccumulateGrad adds a backward pass's gradient, and makes the parameter's bucket buffer
/// (every .grad of the bucket a view of it) on the bucket's first gradient of the step, so backward accumulates
/// in place and no gradient is copied into a bucket buffer. Not run by autograd::grad (no AccumulateGrad there).
class ShardedAdamW::AccumulatingHook : public torch::autograd::FunctionPreHook {
 public:
  AccumulatingHook(ShardedAdamW& owner, size_t param) : owner_(owner), param_(param) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    owner_.bucketBuffer(owner_.bucket_of_[param_]);
    return grads;
  }

 private:
  ShardedAdamW& owner_;
  size_t param_;
};

/// Runs after AccumulateGrad has added a backward pass's gradient into the parameter's .grad (DDP's reducer
/// hooks the same place). autograd::grad (the sliced CPU step) does not run AccumulateGrad, so not this either.
class ShardedAdamW::AccumulatedHook : public torch::autograd::FunctionPostHook {
 public:
  AccumulatedHook(ShardedAdamW& owner, size_t param) : owner_(owner), param_(param) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    owner_.onAccumulated(param_);
    return outputs;
  }

 private:
  ShardedAdamW& owner_;
  size_t param_;
};

ShardedAdamW::ShardedAdamW(Distributed& dist, std::vector<torch::Tensor> params, ShardedAdamWOptions options)
    : dist_(dist), params_(std::move(params)), options_(options) {
  TORCH_CHECK(options_.stage == 1 || options_.stage == 2, "ShardedAdamW: stage must be 1 or 2");
  TORCH_CHECK(!params_.empty(), "ShardedAdamW: no parameters");
  for (const auto& p : params_) {
    TORCH_CHECK(p.is_leaf() && p.is_contiguous() && p.scalar_type() == params_.front().scalar_type() &&
                    p.device() == params_.front().device(),
                "ShardedAdamW: parameters must be contiguous leaves of one dtype on one device");
  }
  torch::NoGradGuard no_grad;
  // The flat layout: GradSync's buckets one after the other, each in its own order, so a bucket is one slice.
  const auto members = gradientBuckets(params_, options_.bucket_mb);
  flat_offset_.assign(params_.size(), 0);
  bucket_of_.assign(params_.size(), 0);
  for (const auto& bucket_members : members) {
    Bucket& b = buckets_.emplace_back();
    b.begin = numel_;
    for (const size_t k : bucket_members) {
      order_.push_back(k);
      flat_offset_[k] = numel_;
      sorted_offset_.push_back(numel_);
      bucket_of_[k] = buckets_.size() - 1;
      b.params.push_back(k);
      numel_ += params_[k].numel();
    }
    b.end = numel_;
  }
  sorted_offset_.push_back(numel_);
  reported_.assign(params_.size(), false);

  const int64_t W = dist_.worldSize();
  shard_size_ = (numel_ + W - 1) / W;
  shard_begin_ = std::min(numel_, dist_.rank() * shard_size_);
  shard_end_ = std::min(numel_, shard_begin_ + shard_size_);
  const auto opts = params_.front().options().requires_grad(false);
  flat_params_ = torch::zeros({W * shard_size_}, opts);
  for (size_t k = 0; k < params_.size(); ++k) {
    auto view = flat_params_.narrow(0, flat_offset_[k], params_[k].numel()).view(params_[k].sizes());
    view.copy_(params_[k].detach());
    params_[k].set_data(view);  // same TensorImpl (checkpoint and optimizer keys stay valid), new storage
  }
  if (options_.stage == 1) {
    flat_grads_ = torch::zeros({W * shard_size_}, opts);
    for (size_t k = 0; k < params_.size(); ++k) {
      params_[k].mutable_grad() = flat_grads_.narrow(0, flat_offset_[k], params_[k].numel()).view(params_[k].sizes());
    }
  }
  exp_avg_ = torch::zeros({shard_size_}, opts);
  exp_avg_sq_ = torch::zeros({shard_size_}, opts);
  for (size_t k = 0; k < params_.size(); ++k) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params_[k]);
    TORCH_CHECK(accumulator, "ShardedAdamW: a parameter has no gradient accumulator (requires_grad off?)");
    hook_keys_.push_back(accumulator->add_post_hook(std::make_unique<AccumulatedHook>(*this, k)));
    if (options_.stage == 2) accumulator->add_pre_hook(std::make_unique<AccumulatingHook>(*this, k));
    accumulators_.push_back(std::move(accumulator));
  }
}

ShardedAdamW::~ShardedAdamW() {
  for (size_t k = 0; k < accumulators_.size(); ++k) accumulators_[k]->del_post_hook(hook_keys_[k]);
  for (auto& accumulator : accumulators_) {  // ours are the only pre-hooks of these nodes we hold alive
    auto& hooks = accumulator->pre_hooks();
    hooks.erase(std::remove_if(hooks.begin(), hooks.end(),
                               [](const auto& h) { return dynamic_cast<AccumulatingHook*>(h.get()) != nullptr; }),
                hooks.end());
  }
  for (auto& b : buckets_) {
    if (!b.pending) continue;
    try {
      b.pending->wait();
    } catch (const std::exception&) {
    }
  }
}

template <typename Fn>
void ShardedAdamW::forEachPiece(int64_t begin, int64_t end, Fn&& fn) const {
  end = std::min(end, numel_);
  if (begin >= end) return;
  // The flat position holding `begin`: the last offset <= begin.
  auto i = static_cast<size_t>(std::upper_bound(sorted_offset_.begin(), sorted_offset_.end(), begin) -
                               sorted_offset_.begin() - 1);
  for (int64_t at = begin; at < end; ++i) {
    const int64_t piece_end = std::min(end, sorted_offset_[i + 1]);
    if (piece_end > at) fn(order_[i], at - sorted_offset_[i], at - begin, piece_end - at);
    at = std::max(at, piece_end);
  }
}

void ShardedAdamW::zeroGrad() {
  torch::NoGradGuard no_grad;
  if (options_.stage == 2) {
    for (auto& p : params_) p.mutable_grad().reset();
    for (auto& b : buckets_) b.buffer = torch::Tensor();
    shard_grad_ = torch::Tensor();
    return;
  }
  flat_grads_.zero_();
  for (size_t k = 0; k < params_.size(); ++k) {  // a .grad someone replaced becomes our view again
    auto slot = flat_grads_.narrow(0, flat_offset_[k], params_[k].numel());
    auto& grad = params_[k].mutable_grad();
    if (!grad.defined() || grad.data_ptr() != slot.data_ptr()) grad = slot.view(params_[k].sizes());
  }
}

void ShardedAdamW::onAccumulated(size_t k) {
  if (!sync_ || reported_[k]) return;
  reported_[k] = true;
  Bucket& b = buckets_[bucket_of_[k]];
  if (++b.ready == b.params.size()) launchReady();
}

void ShardedAdamW::launchReady() {
  // Strictly in bucket order, so every rank issues the same collectives in the same sequence.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].ready == buckets_[next_launch_].params.size()) {
    launch(buckets_[next_launch_++]);
  }
}

torch::Tensor ShardedAdamW::bucketBuffer(size_t index) {
  Bucket& b = buckets_[index];
  if (!b.buffer.defined()) {
    torch::NoGradGuard no_grad;
    b.buffer = torch::zeros({b.end - b.begin}, flat_params_.options());
    for (const size_t k : b.params) {
      auto slot = b.buffer.narrow(0, flat_offset_[k] - b.begin, params_[k].numel());
      auto& grad = params_[k].mutable_grad();
      if (grad.defined()) slot.copy_(grad.reshape({-1}));  // accumulated outside backward (GradSync::addGrads)
      grad = slot.view(params_[k].sizes());
    }
  }
  return b.buffer;
}

void ShardedAdamW::launch(Bucket& b) {
  torch::NoGradGuard no_grad;
  b.launched = true;
  // Stage 1: the bucket's slice of the flat gradient buffer; stage 2: the bucket's own buffer (made now when no
  // gradient of the bucket came through backward's hooks, e.g. the sliced CPU step's).
  const auto buffer = options_.stage == 1 ? flat_grads_.narrow(0, b.begin, b.end - b.begin)
                                          : bucketBuffer(bucket_of_[b.params.front()]);
  // The gradients already sit in the buffer, unless someone replaced or released a .grad (GradSync::addGrads).
  for (const size_t k : b.params) {
    auto slot = buffer.narrow(0, flat_offset_[k] - b.begin, params_[k].numel());
    auto& grad = params_[k].mutable_grad();
    if (!grad.defined()) {
      slot.zero_();
    } else if (grad.data_ptr() != slot.data_ptr()) {
      slot.copy_(grad.reshape({-1}));
    }
    if (options_.stage == 1) {
      grad = slot.view(params_[k].sizes());
    } else {
      grad.reset();  // the bucket keeps the buffer; the parameters hold no gradient from here on
    }
  }
  if (options_.stage == 1) {
    b.pending = dist_.allreduceSumAsync(buffer);
    return;
  }
  // Stage 2: a reduce-scatter, point to point (c10d's Gloo has none: its _reduce_scatter_base is an all-reduce of a
  // clone). Each other rank gets its part of the bucket; the other ranks' copies of this rank's part arrive in the
  // shard gradient (the lowest other rank's) and in b.extra (the rest, from 3 ranks on); harvest() adds them up.
  const int W = dist_.worldSize(), me = dist_.rank();
  const int64_t S = shard_size_, mine = me * S;
  if (!shard_grad_.defined()) {
    shard_grad_ = torch::empty({S}, flat_params_.options());
    const int64_t real = std::max<int64_t>(0, std::min(S, numel_ - mine));
    if (real < S) shard_grad_.narrow(0, real, S - real).zero_();  // the padding past N
  }
  std::vector<Distributed::Transfer> sends, recvs;
  for (int peer = 0; peer < W; ++peer) {
    const int64_t from = std::max(b.begin, peer * S), to = std::min(b.end, (peer + 1) * S);
    if (peer != me && from < to) sends.push_back({peer, buffer.narrow(0, from - b.begin, to - from)});
  }
  const int64_t from = std::max(b.begin, mine), to = std::min(b.end, mine + S), length = to - from;
  if (length > 0 && W > 1) {
    if (W > 2) b.extra = torch::empty({(W - 2) * length}, flat_params_.options());
    int64_t slot = 0;
    for (int peer = 0; peer < W; ++peer) {
      if (peer == me) continue;
      recvs.push_back({peer, recvs.empty() ? shard_grad_.narrow(0, from - mine, length)
                                           : b.extra.narrow(0, (slot++) * length, length)});
    }
  }
  b.pending = dist_.exchangeAsync(sends, recvs, kReduceScatterTag);
  // At most two buckets in flight: the one launched two buckets ago has had a bucket's worth of backward to
  // arrive, and harvesting it now frees its buffer while backward goes on.
  const auto index = static_cast<size_t>(&b - buckets_.data());
  if (index >= 2) harvest(buckets_[index - 2]);
}

void ShardedAdamW::harvest(Bucket& b) {
  if (!b.pending) return;  // harvested already
  b.pending->wait();
  b.pending.reset();
  const int W = dist_.worldSize(), me = dist_.rank();
  const int64_t mine = me * shard_size_;
  const int64_t from = std::max(b.begin, mine), to = std::min(b.end, mine + shard_size_), length = to - from;
  if (length > 0) {
    auto sum = shard_grad_.narrow(0, from - mine, length);
    const auto local = b.buffer.narrow(0, from - b.begin, length);
    if (W == 1) {
      sum.copy_(local);
    } else {
      // Every rank's copy added in rank order, (c0 + c1) + c2 ..., whoever this rank is: the lowest other rank's
      // is already in `sum`, and a + b is b + a to the bit. At 2 ranks that is the all-reduce's sum exactly.
      const int first = me == 0 ? 1 : 0;
      int64_t slot = 0;
      for (int j = 0; j < W; ++j) {
        if (j == first) continue;
        sum.add_(j == me ? local : b.extra.narrow(0, (slot++) * length, length));
      }
    }
  }
  b.buffer = torch::Tensor();
  b.extra = torch::Tensor();
}

void ShardedAdamW::prepareGradients() {
  torch::NoGradGuard no_grad;
  // Buckets whose gradients were not all reported (a parameter backward did not reach, GradSync::addGrads).
  for (auto& b : buckets_) b.ready = b.params.size();
  launchReady();
  for (auto& b : buckets_) {
    if (options_.stage == 2) {
      harvest(b);
    } else {
      b.pending->wait();
      b.pending.reset();
    }
    b.ready = 0;
    b.launched = false;
  }
  next_launch_ = 0;
  std::fill(reported_.begin(), reported_.end(), false);
  // Sum / W, as GradSync's average (stage 0 scales every element; this rank needs its shard only).
  if (dist_.worldSize() > 1) shardGradient().mul_(1.0 / static_cast<double>(dist_.worldSize()));
  prepared_ = true;
}

torch::Tensor ShardedAdamW::shardGradient() const {
  if (options_.stage == 2) return shard_grad_;
  return flat_grads_.narrow(0, dist_.rank() * shard_size_, shard_size_);
}

double ShardedAdamW::clipGradNorm(double max_norm) {
  TORCH_CHECK(prepared_, "ShardedAdamW::clipGradNorm before prepareGradients");
  torch::NoGradGuard no_grad;
  const auto grad = shardGradient();
  // The sum of squares in double, chunk by chunk through one small double buffer: the total is then the exactly
  // rounded norm, where clip_grad_norm_ takes the float norm of per-parameter float norms (a few ulp apart). A
  // fresh double copy per 1M-element chunk (two 8 MB allocations each) measured 0.24 s per step at one rank:
  // glibc returned and re-faulted the pages every time.
  constexpr int64_t kChunk = 1 << 16;
  auto buffer = torch::empty({std::min(kChunk, grad.numel())}, grad.options().dtype(torch::kDouble));
  double local = 0;
  for (int64_t at = 0; at < grad.numel(); at += kChunk) {
    const int64_t len = std::min(kChunk, grad.numel() - at);
    auto chunk = buffer.narrow(0, 0, len);
    chunk.copy_(grad.narrow(0, at, len));
    local += torch::dot(chunk, chunk).item<double>();
  }
  auto squares = torch::tensor({local}, torch::kDouble);
  dist_.allreduceSum(squares);
  const double total = std::sqrt(squares.item<double>());
  // clip_grad_norm_'s coefficient in its float arithmetic: max_norm / (total + 1e-6), clamped at 1.
  const auto coef = (torch::tensor(static_cast<float>(total)) + 1e-6).reciprocal() * max_norm;
  if (coef.item<float>() < 1) grad.mul_(coef);
  return total;
}

void ShardedAdamW::step(double lr) {
  TORCH_CHECK(prepared_, "ShardedAdamW::step before prepareGradients");
  torch::NoGradGuard no_grad;
  const auto t0 = std::chrono::steady_clock::now();
  ++step_;
  // Stage 0's update on the shard's slice (adamwUpdate, what stepAdamWFused runs per parameter): float32 on the
  // CPU the same per-element arithmetic, so stage 1 is bitwise stage 0 (ctest -R Zero); on a GPU ATen's fused
  // kernel, as stage 0 runs there (not compared bit for bit: no GPU here). The padding past N has zero weights and
  // gradients and stays zero.
  auto p = flat_params_.narrow(0, dist_.rank() * shard_size_, shard_size_);
  adamwUpdate(p, shardGradient(), exp_avg_, exp_avg_sq_, step_, lr, options_.beta1, options_.beta2,
              options_.weight_decay, options_.eps);
  shard_grad_ = torch::Tensor();
  prepared_ = false;
  last_update_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Every rank's updated shard straight into every rank's flat parameters (the input is this rank's slice of
  // the output: in place, as NCCL allows and c10d's Gloo allgather does, it copies its result out at the end).
  if (dist_.worldSize() > 1) dist_.allGather(p, flat_params_);
}

void ShardedAdamW::importState(torch::optim::AdamW& optimizer) {
  torch::NoGradGuard no_grad;
  exp_avg_.zero_();
  exp_avg_sq_.zero_();
  step_ = 0;
  auto& states = optimizer.state();
  for (const auto& p : params_) {
    auto found = states.find(p.unsafeGetTensorImpl());
    if (found == states.end()) continue;
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*found->second);
    step_ = std::max(step_, s.step());
  }
  forEachPiece(shard_begin_, shard_end_, [&](size_t k, int64_t in_param, int64_t in_shard, int64_t len) {
    auto found = states.find(params_[k].unsafeGetTensorImpl());
    if (found == states.end()) return;
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*found->second);
    exp_avg_.narrow(0, in_shard, len).copy_(s.exp_avg().reshape({-1}).narrow(0, in_param, len));
    exp_avg_sq_.narrow(0, in_shard, len).copy_(s.exp_avg_sq().reshape({-1}).narrow(0, in_param, len));
  });
  states.clear();
}

std::pair<int64_t, int64_t> ShardedAdamW::shardRange(int rank) const {
  const int64_t begin = std::min(numel_, rank * shard_size_);
  return {begin, std::min(numel_, begin + shard_size_)};
}

std::vector<std::pair<int64_t, int64_t>> ShardedAdamW::bucketRanges() const {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& b : buckets_) out.emplace_back(b.begin, b.end);
  return out;
}

void ShardedAdamW::sendShardToRank0(int64_t chunk) const {
  if (dist_.rank() == 0) return;
  TORCH_CHECK(chunk > 0, "ShardedAdamW::sendShardToRank0: chunk must be > 0");
  const int64_t length = shard_end_ - shard_begin_;
  for (const auto* moment : {&exp_avg_, &exp_avg_sq_}) {
    for (int64_t at = 0; at < length; at += chunk) {
      dist_.exchangeAsync({{0, moment->narrow(0, at, std::min(chunk, length - at))}}, {}, kShardSaveTag)->wait();
    }
  }
}

void ShardedAdamW::receiveShard(int rank, int64_t chunk, const std::function<void(const torch::Tensor&)>& consume) const {
  TORCH_CHECK(dist_.rank() == 0, "ShardedAdamW::receiveShard on rank ", dist_.rank());
  TORCH_CHECK(chunk > 0, "ShardedAdamW::receiveShard: chunk must be > 0");
  const auto [begin, end] = shardRange(rank);
  const int64_t length = end - begin;
  torch::Tensor buffer;
  if (rank != 0 && length > 0) buffer = torch::empty({std::min(chunk, length)}, exp_avg_.options());
  std::exception_ptr failed;
  for (const auto* moment : {&exp_avg_, &exp_avg_sq_}) {
    for (int64_t at = 0; at < length; at += chunk) {
      const int64_t len = std::min(chunk, length - at);
      torch::Tensor piece;
      if (rank == 0) {
        piece = moment->narrow(0, at, len);
      } else {
        piece = buffer.narrow(0, 0, len);
        dist_.exchangeAsync({}, {{rank, piece}}, kShardSaveTag)->wait();
      }
      if (failed) continue;  // keep receiving: rank `rank` waits for each of its sends
      try {
        consume(piece);
      } catch (...) {
        failed = std::current_exception();
      }
    }
  }
  if (failed) std::rethrow_exception(failed);
}

void ShardedAdamW::importPieces(
    int64_t step, const std::function<void(size_t param, int64_t in_param, torch::Tensor m, torch::Tensor v)>& fill) {
  torch::NoGradGuard no_grad;
  exp_avg_.zero_();
  exp_avg_sq_.zero_();
  step_ = step;
  forEachPiece(shard_begin_, shard_end_, [&](size_t k, int64_t in_param, int64_t in_shard, int64_t len) {
    fill(k, in_param, exp_avg_.narrow(0, in_shard, len), exp_avg_sq_.narrow(0, in_shard, len));
  });
}

}  // namespace taehv::train
