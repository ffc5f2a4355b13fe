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
  prepared_ = true;
  if (options_.stage == 1) return;  // GradSync averaged them; step() reads this rank's pieces of .grad in place
  // Round r reduces elements [r c, r c + len) of every rank's shard: rank j's piece sits at j S + r c.
  grad_ = torch::empty({S}, exp_avg_.options());
  const int64_t c = roundElements();
  torch::Tensor buffer;
  for (int64_t at = 0; at < S; at += c) {
    const int64_t len = std::min(c, S - at);
    if (!buffer.defined() || buffer.numel() != W * len) buffer = torch::empty({W * len}, exp_avg_.options());
    for (int64_t j = 0; j < W; ++j) readFlat(j * S + at, buffer.narrow(0, j * len, len), true);
    dist_.reduceScatterSum(buffer, grad_.narrow(0, at, len));
  }
  grad_.mul_(1.0 / static_cast<double>(W));
  for (auto& p : params_) p.mutable_grad().reset();
}

std::vector<ShardedAdamW::Piece> ShardedAdamW::shardPieces() const {
  std::vector<Piece> out;
  forEachPiece(shard_begin_, shard_end_, [&](size_t k, int64_t in_param, int64_t in_shard, int64_t len) {
    Piece piece{params_[k].detach().view({-1}).narrow(0, in_param, len), {}, in_shard, len};
    if (options_.stage == 2) {
      piece.grad = grad_.narrow(0, in_shard, len);
    } else if (params_[k].grad().defined()) {
      piece.grad = params_[k].grad().view({-1}).narrow(0, in_param, len);
    } else {
      piece.grad = torch::zeros({len}, exp_avg_.options());
    }
    out.push_back(std::move(piece));
  });
  return out;
}

double ShardedAdamW::clipGradNorm(double max_norm) {
  TORCH_CHECK(prepared_, "ShardedAdamW::clipGradNorm before prepareGradients");
  torch::NoGradGuard no_grad;
  const auto pieces = shardPieces();
  double local = 0;
  for (const auto& piece : pieces) local += piece.grad.to(torch::kDouble).pow(2).sum().item<double>();
  auto squares = torch::tensor({local}, torch::kDouble);
  dist_.allreduceSum(squares);
  const double total = std::sqrt(squares.item<double>());
  const double coef = max_norm / (total + 1e-6);  // clip_grad_norm_'s
  if (coef < 1) {
    for (const auto& piece : pieces) piece.grad.mul_(coef);
  }
  return total;
}

void ShardedAdamW::updatePiece(const Piece& piece, double lr) {
  // torch::optim::AdamW::step's formula and operation order (libtorch's adamw.cpp), amsgrad off.
  const double bias_correction1 = 1 - std::pow(options_.beta1, static_cast<double>(step_));
  const double bias_correction2_sqrt = std::sqrt(1 - std::pow(options_.beta2, static_cast<double>(step_)));
  const double decay = 1 - lr * options_.weight_decay;
  const double step_size = lr / bias_correction1;
  auto m = exp_avg_.narrow(0, piece.in_shard, piece.len);
  auto v = exp_avg_sq_.narrow(0, piece.in_shard, piece.len);
  const torch::Tensor& p = piece.param;
  const torch::Tensor& g = piece.grad;
  // The same tensor operations, so the same vectorised kernels: a scalar one-pass loop (taehv::FusedAdamW's)
  // is not vectorised by the compiler (sqrt, division) and measured slower than these eight passes.
  if (options_.weight_decay != 0) p.mul_(decay);
  m.mul_(options_.beta1).add_(g, 1 - options_.beta1);
  v.mul_(options_.beta2).addcmul_(g, g, 1 - options_.beta2);
  const auto denom = (v.sqrt() / bias_correction2_sqrt).add_(options_.eps);
  p.addcdiv_(m, denom, -step_size);
}

void ShardedAdamW::step(double lr) {
  TORCH_CHECK(prepared_, "ShardedAdamW::step before prepareGradients");
  torch::NoGradGuard no_grad;
  const int64_t W = dist_.worldSize(), S = shard_size_;
  ++step_;
  for (const auto& piece : shardPieces()) updatePiece(piece, lr);
  grad_ = torch::Tensor();
  for (auto& p : params_) p.mutable_grad().reset();
  prepared_ = false;
  if (W == 1) return;
  // Every rank's updated shard into every rank's parameters, in rounds as prepareGradients.
  const int64_t c = roundElements();
  torch::Tensor mine, buffer;
  for (int64_t at = 0; at < S; at += c) {
    const int64_t len = std::min(c, S - at);
    if (!buffer.defined() || buffer.numel() != W * len) {
      buffer = torch::empty({W * len}, exp_avg_.options());
      mine = torch::empty({len}, exp_avg_.options());
    }
    readFlat(shard_begin_ + at, mine, false);
    dist_.allGather(mine, buffer);
    for (int64_t j = 0; j < W; ++j) {
      if (j != dist_.rank()) writeParams(j * S + at, buffer.narrow(0, j * len, len));
    }
  }
}

void ShardedAdamW::exportState(torch::optim::AdamW& optimizer) const {
  torch::NoGradGuard no_grad;
  const bool keep = step_ > 0 && dist_.rank() == 0;  // AdamW creates its state at its first step; rank 0 saves
  std::vector<std::unique_ptr<torch::optim::AdamWParamState>> states(params_.size());
  for (auto& state : states) {
    state = std::make_unique<torch::optim::AdamWParamState>();
    state->step(step_);
  }
  // One moment at a time, so the gathered copy and the per-parameter tensors of the other never coexist.
  for (const bool second : {false, true}) {
    auto full = torch::empty({dist_.worldSize() * shard_size_}, exp_avg_.options());
    dist_.allGather(second ? exp_avg_sq_ : exp_avg_, full);
    if (!keep) continue;
    for (size_t k = 0; k < params_.size(); ++k) {
      auto t = full.narrow(0, offsets_[k], params_[k].numel()).view(params_[k].sizes()).clone();
      if (second) {
        states[k]->exp_avg_sq(t);
      } else {
        states[k]->exp_avg(t);
      }
    }
  }
  if (!keep) return;
  for (size_t k = 0; k < params_.size(); ++k) optimizer.state()[params_[k].unsafeGetTensorImpl()] = std::move(states[k]);
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
