#include "taehv/train/zero.h"

#include <algorithm>
#include <cmath>

namespace taehv::train {

ShardedAdamW::ShardedAdamW(Distributed& dist, std::vector<torch::Tensor> params, ShardedAdamWOptions options)
    : dist_(dist), params_(std::move(params)), options_(options) {
  TORCH_CHECK(options_.stage == 1 || options_.stage == 2, "ShardedAdamW: stage must be 1 or 2");
  TORCH_CHECK(!params_.empty(), "ShardedAdamW: no parameters");
  offsets_.push_back(0);
  for (const auto& p : params_) {
    TORCH_CHECK(p.is_contiguous() && p.scalar_type() == params_.front().scalar_type() &&
                    p.device() == params_.front().device(),
                "ShardedAdamW: parameters must be contiguous, of one dtype and on one device");
    offsets_.push_back(offsets_.back() + p.numel());
  }
  numel_ = offsets_.back();
  const int64_t W = dist_.worldSize();
  shard_size_ = (numel_ + W - 1) / W;
  shard_begin_ = std::min(numel_, dist_.rank() * shard_size_);
  shard_end_ = std::min(numel_, shard_begin_ + shard_size_);
  const auto opts = params_.front().options().requires_grad(false);
  exp_avg_ = torch::zeros({shard_size_}, opts);
  exp_avg_sq_ = torch::zeros({shard_size_}, opts);
}

template <typename Fn>
void ShardedAdamW::forEachPiece(int64_t begin, int64_t end, Fn&& fn) const {
  end = std::min(end, numel_);
  if (begin >= end) return;
  // The parameter holding `begin`: the last offset <= begin.
  auto k = static_cast<size_t>(std::upper_bound(offsets_.begin(), offsets_.end(), begin) - offsets_.begin() - 1);
  for (int64_t at = begin; at < end; ++k) {
    const int64_t piece_end = std::min(end, offsets_[k + 1]);
    if (piece_end > at) fn(k, at - offsets_[k], at - begin, piece_end - at);
    at = std::max(at, piece_end);
  }
}

void ShardedAdamW::readFlat(int64_t begin, torch::Tensor dst, bool grads) const {
  const int64_t n = dst.numel();
  const int64_t covered = std::clamp<int64_t>(numel_ - begin, 0, n);
  if (covered < n) dst.narrow(0, covered, n - covered).zero_();  // padding past N
  forEachPiece(begin, begin + n, [&](size_t k, int64_t in_param, int64_t in_dst, int64_t len) {
    auto out = dst.narrow(0, in_dst, len);
    const torch::Tensor& source = grads ? params_[k].grad() : params_[k];
    if (!source.defined()) {
      out.zero_();
    } else {
      out.copy_(source.detach().reshape({-1}).narrow(0, in_param, len));
    }
  });
}

void ShardedAdamW::writeParams(int64_t begin, const torch::Tensor& src) {
  forEachPiece(begin, begin + src.numel(), [&](size_t k, int64_t in_param, int64_t in_src, int64_t len) {
    params_[k].detach().view({-1}).narrow(0, in_param, len).copy_(src.narrow(0, in_src, len));
  });
}

int64_t ShardedAdamW::roundElements() const {
  const double bytes = options_.bucket_mb * 1024 * 1024;
  const auto per_rank = static_cast<int64_t>(bytes / static_cast<double>(exp_avg_.element_size()) /
                                             static_cast<double>(dist_.worldSize()));
  return std::clamp<int64_t>(per_rank, 1, std::max<int64_t>(1, shard_size_));
}

void ShardedAdamW::prepareGradients() {
  torch::NoGradGuard no_grad;
  const int64_t W = dist_.worldSize(), S = shard_size_;
  grad_ = torch::empty({S}, exp_avg_.options());
  if (options_.stage == 1) {
    readFlat(shard_begin_, grad_, true);  // already averaged by GradSync
  } else {
    // Round r reduces elements [r c, r c + len) of every rank's shard: rank j's piece sits at j S + r c.
    const int64_t c = roundElements();
    torch::Tensor buffer;
    for (int64_t at = 0; at < S; at += c) {
      const int64_t len = std::min(c, S - at);
      if (!buffer.defined() || buffer.numel() != W * len) buffer = torch::empty({W * len}, exp_avg_.options());
      for (int64_t j = 0; j < W; ++j) readFlat(j * S + at, buffer.narrow(0, j * len, len), true);
      dist_.reduceScatterSum(buffer, grad_.narrow(0, at, len));
    }
    grad_.mul_(1.0 / static_cast<double>(W));
  }
  for (auto& p : params_) p.mutable_grad().reset();
}

double ShardedAdamW::clipGradNorm(double max_norm) {
  TORCH_CHECK(grad_.defined(), "ShardedAdamW::clipGradNorm before prepareGradients");
  torch::NoGradGuard no_grad;
  const double local = grad_.norm().item<double>();
  auto squares = torch::tensor({local * local}, torch::kDouble);
  dist_.allreduceSum(squares);
  const double total = std::sqrt(squares.item<double>());
  const double coef = max_norm / (total + 1e-6);  // clip_grad_norm_'s
  if (coef < 1) grad_.mul_(coef);
  return total;
}

void ShardedAdamW::step(double lr) {
  TORCH_CHECK(grad_.defined(), "ShardedAdamW::step before prepareGradients");
  torch::NoGradGuard no_grad;
  const int64_t W = dist_.worldSize(), S = shard_size_;
  ++step_;
  auto param = torch::empty({S}, exp_avg_.options());
  readFlat(shard_begin_, param, false);
  // torch::optim::AdamW::step, operation by operation (libtorch's adamw.cpp), on the flat shard.
  const double bias_correction1 = 1 - std::pow(options_.beta1, static_cast<double>(step_));
  const double bias_correction2 = 1 - std::pow(options_.beta2, static_cast<double>(step_));
  if (options_.weight_decay != 0) param.mul_(1 - lr * options_.weight_decay);
  exp_avg_.mul_(options_.beta1).add_(grad_, 1 - options_.beta1);
  exp_avg_sq_.mul_(options_.beta2).addcmul_(grad_, grad_, 1 - options_.beta2);
  const auto denom = (exp_avg_sq_.sqrt() / std::sqrt(bias_correction2)).add_(options_.eps);
  param.addcdiv_(exp_avg_, denom, -lr / bias_correction1);
  grad_ = torch::Tensor();
  // Every rank's updated shard into every rank's parameters, in rounds as prepareGradients.
  const int64_t c = roundElements();
  torch::Tensor buffer;
  for (int64_t at = 0; at < S; at += c) {
    const int64_t len = std::min(c, S - at);
    if (!buffer.defined() || buffer.numel() != W * len) buffer = torch::empty({W * len}, exp_avg_.options());
    dist_.allGather(param.narrow(0, at, len), buffer);
    for (int64_t j = 0; j < W; ++j) writeParams(j * S + at, buffer.narrow(0, j * len, len));
  }
}

void ShardedAdamW::exportState(torch::optim::AdamW& optimizer) const {
  torch::NoGradGuard no_grad;
  const int64_t W = dist_.worldSize();
  auto full_avg = torch::empty({W * shard_size_}, exp_avg_.options());
  auto full_avg_sq = torch::empty({W * shard_size_}, exp_avg_.options());
  dist_.allGather(exp_avg_, full_avg);
  dist_.allGather(exp_avg_sq_, full_avg_sq);
  if (step_ == 0 || dist_.rank() != 0) return;  // AdamW creates its state at its first step; rank 0 saves
  for (size_t k = 0; k < params_.size(); ++k) {
    const auto& p = params_[k];
    auto state = std::make_unique<torch::optim::AdamWParamState>();
    state->step(step_);
    state->exp_avg(full_avg.narrow(0, offsets_[k], p.numel()).view(p.sizes()).clone());
    state->exp_avg_sq(full_avg_sq.narrow(0, offsets_[k], p.numel()).view(p.sizes()).clone());
    optimizer.state()[p.unsafeGetTensorImpl()] = std::move(state);
  }
}

void ShardedAdamW::releaseExported(torch::optim::AdamW& optimizer) { optimizer.state().clear(); }

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

}  // namespace taehv::train
