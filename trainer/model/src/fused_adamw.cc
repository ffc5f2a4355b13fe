#include "taehv/model/fused_adamw.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <map>
#include <optional>

namespace taehv {
namespace {

/// What ATen's multi-tensor kernel asks of its tensors: float32, dense, one device, each parameter's gradient and
/// state in its strides (its fast-path check throws otherwise; this says so beforehand).
bool multiTensorReady(const torch::Tensor& p, const torch::Tensor& grad, const torch::Tensor& m, const torch::Tensor& v,
                      const torch::Device& device) {
  const auto dense_float = [&](const torch::Tensor& t) {
    return t.defined() && t.layout() == torch::kStrided && t.scalar_type() == torch::kFloat && t.device() == device &&
           t.strides() == p.strides() && t.sizes() == p.sizes();
  };
  return dense_float(p) && dense_float(grad) && dense_float(m) && dense_float(v) && p.is_non_overlapping_and_dense();
}

/// One AdamW update of every listed parameter by ATen's multi-tensor kernel (`steps`: each parameter's step count
/// after this update, a float32 scalar tensor on the parameters' device).
void multiTensorAdamW(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                      const std::vector<torch::Tensor>& exp_avgs, const std::vector<torch::Tensor>& exp_avg_sqs,
                      const std::vector<torch::Tensor>& steps, double lr, double beta1, double beta2,
                      double weight_decay, double eps) {
  if (params.empty()) return;
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, beta1, beta2,
                    weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false);
}

torch::Tensor stepTensor(int64_t step, const torch::Device& device) {
  return torch::full({}, static_cast<double>(step), torch::TensorOptions().dtype(torch::kFloat).device(device));
}

}  // namespace

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
  // CUDA parameters: one multi-tensor kernel for all of them (per device).
  std::map<c10::DeviceIndex, std::vector<std::size_t>> on_gpu;  // by CUDA device index
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& p = params_[i];
    if (p.device().is_cuda() && multiTensorReady(p, p.grad(), exp_avg_[i], exp_avg_sq_[i], p.device())) {
      on_gpu[p.device().index()].push_back(i);
    }
  }
  std::vector<bool> done(params_.size(), false);
  for (const auto& [index, indices] : on_gpu) {
    const torch::Device device(torch::kCUDA, index);
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
    for (const std::size_t i : indices) {
      params.push_back(params_[i]);
      grads.push_back(params_[i].grad());
      exp_avgs.push_back(exp_avg_[i]);
      exp_avg_sqs.push_back(exp_avg_sq_[i]);
      done[i] = true;
    }
    const std::vector<torch::Tensor> steps(params.size(), stepTensor(step_, device));
    multiTensorAdamW(params, grads, exp_avgs, exp_avg_sqs, steps, lr, options_.beta1, options_.beta2,
                     options_.weight_decay, options_.eps);
  }
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (done[i]) continue;
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

bool stepAdamWMultiTensor(torch::optim::AdamW& optimizer) {
  torch::NoGradGuard no_grad;
  auto& state = optimizer.state();
  // First: does every parameter with a gradient qualify? Nothing is changed before the answer is known.
  std::optional<torch::Device> device;
  for (auto& group : optimizer.param_groups()) {
    const auto& options = static_cast<const torch::optim::AdamWOptions&>(group.options());
    if (options.amsgrad()) return false;
    for (const auto& p : group.params()) {
      const torch::Tensor& grad = p.grad();
      if (!grad.defined()) continue;
      if (!device) device = p.device();
      const auto it = state.find(p.unsafeGetTensorImpl());
      if (it == state.end()) {
        if (!multiTensorReady(p, grad, p, p, *device)) return false;
        continue;
      }
      const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
      if (!multiTensorReady(p, grad, s.exp_avg(), s.exp_avg_sq(), *device)) return false;
    }
  }
  if (!device) return true;  // no gradient anywhere: torch's step would change nothing either
  for (auto& group : optimizer.param_groups()) {
    const auto& options = static_cast<const torch::optim::AdamWOptions&>(group.options());
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
    std::map<int64_t, torch::Tensor> step_tensors;  // normally one: every parameter at the same step
    for (const auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& slot = state[p.unsafeGetTensorImpl()];
      if (!slot) {  // as torch::optim::AdamW::step makes it
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto& s = static_cast<torch::optim::AdamWParamState&>(*slot);
      s.step(s.step() + 1);
      auto [it, added] = step_tensors.try_emplace(s.step());
      if (added) it->second = stepTensor(s.step(), *device);
      params.push_back(p);
      grads.push_back(p.grad());
      exp_avgs.push_back(s.exp_avg());
      exp_avg_sqs.push_back(s.exp_avg_sq());
      steps.push_back(it->second);
    }
    multiTensorAdamW(params, grads, exp_avgs, exp_avg_sqs, steps, options.lr(), std::get<0>(options.betas()),
                     std::get<1>(options.betas()), options.weight_decay(), options.eps());
  }
  return true;
}

void FusedAdamW::zeroGrad() {
  for (auto& p : params_) {
    p.mutable_grad() = torch::Tensor();
  }
}

}  // namespace taehv
