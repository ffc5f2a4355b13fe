#include "taehv/model/fused_adamw.h"

#include <ATen/Parallel.h>

#include <cmath>

namespace taehv {

FusedAdamW::FusedAdamW(std::vector<torch::Tensor> params, FusedAdamWOptions options)
    : params_(std::move(params)), options_(options) {
  for (const auto& p : params_) {
    TORCH_CHECK(p.is_leaf() && p.requires_grad(), "FusedAdamW: parameters must be leaves that require grad");
    exp_avg_.push_back(torch::zeros_like(p, at::MemoryFormat::Contiguous));
    exp_avg_sq_.push_back(torch::zeros_like(p, at::MemoryFormat::Contiguous));
  }
}

void FusedAdamW::step() {
  torch::NoGradGuard no_grad;
  ++step_;
  const double lr = options_.lr;
  const double bias_correction1 = 1 - std::pow(options_.beta1, static_cast<double>(step_));
  const double bias_correction2 = 1 - std::pow(options_.beta2, static_cast<double>(step_));
  const double step_size = lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  const double decay = 1 - lr * options_.weight_decay;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& p = params_[i];
    const torch::Tensor& grad = p.grad();
    if (!grad.defined()) {
      continue;
    }
    torch::Tensor& m = exp_avg_[i];
    torch::Tensor& v = exp_avg_sq_[i];
    if (p.device().is_cpu() && p.scalar_type() == torch::kFloat && grad.scalar_type() == torch::kFloat &&
        p.is_contiguous() && grad.is_contiguous() && !grad.is_sparse()) {
      float* pp = p.data_ptr<float>();
      const float* gp = grad.data_ptr<float>();
      float* mp = m.data_ptr<float>();
      float* vp = v.data_ptr<float>();
      const auto f_decay = static_cast<float>(decay);
      const auto b1 = static_cast<float>(options_.beta1);
      const auto b2 = static_cast<float>(options_.beta2);
      const auto one_minus_b1 = static_cast<float>(1 - options_.beta1);
      const auto one_minus_b2 = static_cast<float>(1 - options_.beta2);
      const auto bc2_sqrt = static_cast<float>(bias_correction2_sqrt);
      const auto eps = static_cast<float>(options_.eps);
      const auto neg_step = static_cast<float>(-step_size);
      at::parallel_for(0, p.numel(), 1 << 15, [&](int64_t begin, int64_t end) {
        for (int64_t j = begin; j < end; ++j) {
          const float g = gp[j];
          const float mj = mp[j] * b1 + one_minus_b1 * g;
          const float vj = vp[j] * b2 + one_minus_b2 * (g * g);
          mp[j] = mj;
          vp[j] = vj;
          const float denom = std::sqrt(vj) / bc2_sqrt + eps;
          pp[j] = pp[j] * f_decay + neg_step * (mj / denom);
        }
      });
      continue;
    }
    // Same formula in tensor operations (CUDA, half/bfloat16 parameters, strided tensors).
    p.mul_(decay);
    m.mul_(options_.beta1).add_(grad, 1 - options_.beta1);
    v.mul_(options_.beta2).addcmul_(grad, grad, 1 - options_.beta2);
    const torch::Tensor denom = (v.sqrt() / bias_correction2_sqrt).add_(options_.eps);
    p.addcdiv_(m, denom, -step_size);
  }
}

void FusedAdamW::zeroGrad() {
  for (auto& p : params_) {
    p.mutable_grad() = torch::Tensor();
  }
}

}  // namespace taehv
