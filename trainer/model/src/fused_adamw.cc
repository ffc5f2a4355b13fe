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

/// What adamwOnePass asks: float32 CPU tensors of one size, each contiguous.
bool onePassReady(const torch::Tensor& p, const torch::Tensor& grad, const torch::Tensor& m, const torch::Tensor& v) {
  const auto contiguous_float = [&](const torch::Tensor& t) {
    return t.defined() && t.layout() == torch::kStrided && t.scalar_type() == torch::kFloat && t.is_cpu() &&
           t.is_contiguous() && t.sizes() == p.sizes();
  };
  return contiguous_float(p) && contiguous_float(grad) && contiguous_float(m) && contiguous_float(v);
}

/// The tensors of one call of ATen's multi-tensor kernel.
struct TensorLists {
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
  std::vector<torch::Tensor> steps;  ///< each parameter's step count after this update, float32 on its device

  void add(const torch::Tensor& p, const torch::Tensor& grad, const torch::Tensor& m, const torch::Tensor& v,
           const torch::Tensor& step) {
    params.push_back(p);
    grads.push_back(grad);
    exp_avgs.push_back(m);
    exp_avg_sqs.push_back(v);
    steps.push_back(step);
  }
};

/// One AdamW update of every parameter of `lists` by ATen's multi-tensor kernel.
void multiTensorAdamW(TensorLists& lists, double lr, double beta1, double beta2, double weight_decay, double eps) {
  if (lists.params.empty()) return;
  at::_fused_adamw_(lists.params, lists.grads, lists.exp_avgs, lists.exp_avg_sqs, /*max_exp_avg_sqs=*/{},
                    lists.steps, lr, beta1, beta2, weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false);
}

torch::Tensor stepTensor(int64_t step, const torch::Device& device) {
  return torch::full({}, static_cast<double>(step), torch::TensorOptions().dtype(torch::kFloat).device(device));
}

/// The same update in tensor operations (half/bfloat16 parameters, strided tensors).
void tensorOpsAdamW(torch::Tensor& p, const torch::Tensor& grad, torch::Tensor& m, torch::Tensor& v, int64_t step,
                    double lr, double beta1, double beta2, double weight_decay, double eps) {
  const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(step));
  const double bias_correction2_sqrt = std::sqrt(1 - std::pow(beta2, static_cast<double>(step)));
  p.mul_(1 - lr * weight_decay);
  m.mul_(beta1).add_(grad, 1 - beta1);
  v.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
  const torch::Tensor denom = (v.sqrt() / bias_correction2_sqrt).add_(eps);
  p.addcdiv_(m, denom, -lr / bias_correction1);
}

}  // namespace

AdamWCoefficients AdamWCoefficients::at(int64_t step, double lr, double beta1, double beta2, double weight_decay,
                                        double eps) {
  const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(step));
  const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(step));
  return {static_cast<float>(1 - lr * weight_decay),
          static_cast<float>(beta1),
          static_cast<float>(beta2),
          static_cast<float>(1 - beta1),
          static_cast<float>(1 - beta2),
          static_cast<float>(std::sqrt(bias_correction2)),
          static_cast<float>(eps),
          static_cast<float>(-lr / bias_correction1)};
}

void adamwOnePass(const AdamWCoefficients& c, float* p, const float* g, float* m, float* v, int64_t n) {
  at::parallel_for(0, n, 1 << 15, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      const float gj = g[j];
      const float mj = m[j] * c.beta1 + c.one_minus_beta1 * gj;
      const float vj = v[j] * c.beta2 + c.one_minus_beta2 * (gj * gj);
      m[j] = mj;
      v[j] = vj;
      const float denom = std::sqrt(vj) / c.bias_correction2_sqrt + c.eps;
      p[j] = p[j] * c.decay + c.neg_step_size * (mj / denom);
    }
  });
}

void adamwUpdate(torch::Tensor& p, const torch::Tensor& g, torch::Tensor& m, torch::Tensor& v, int64_t step,
                 double lr, double beta1, double beta2, double weight_decay, double eps) {
  if (onePassReady(p, g, m, v)) {
    adamwOnePass(AdamWCoefficients::at(step, lr, beta1, beta2, weight_decay, eps), p.data_ptr<float>(),
                 g.const_data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), p.numel());
    return;
  }
  TensorLists lists;
  lists.add(p, g, m, v, stepTensor(step, p.device()));
  multiTensorAdamW(lists, lr, beta1, beta2, weight_decay, eps);
}

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
  const FusedAdamWOptions& o = options_;
  const auto c = AdamWCoefficients::at(step_, o.lr, o.beta1, o.beta2, o.weight_decay, o.eps);
  std::map<c10::DeviceIndex, TensorLists> on_gpu;  // CUDA parameters: one multi-tensor call per device
  for (std::size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& p = params_[i];
    const torch::Tensor& grad = p.grad();
    if (!grad.defined()) continue;
    torch::Tensor& m = exp_avg_[i];
    torch::Tensor& v = exp_avg_sq_[i];
    if (p.device().is_cuda() && multiTensorReady(p, grad, m, v, p.device())) {
      TensorLists& lists = on_gpu[p.device().index()];
      lists.add(p, grad, m, v, lists.steps.empty() ? stepTensor(step_, p.device()) : lists.steps.front());
    } else if (onePassReady(p, grad, m, v)) {
      adamwOnePass(c, p.data_ptr<float>(), grad.const_data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(),
                   p.numel());
    } else {
      tensorOpsAdamW(p, grad, m, v, step_, o.lr, o.beta1, o.beta2, o.weight_decay, o.eps);
    }
  }
  for (auto& [index, lists] : on_gpu) multiTensorAdamW(lists, o.lr, o.beta1, o.beta2, o.weight_decay, o.eps);
}

bool stepAdamWFused(torch::optim::AdamW& optimizer) {
  torch::NoGradGuard no_grad;
  auto& state = optimizer.state();
  // First: does every parameter with a gradient qualify? Nothing is changed before the answer is known.
  std::optional<torch::Device> device;
  const auto ready = [&](const torch::Tensor& p, const torch::Tensor& m, const torch::Tensor& v) {
    return device->is_cpu() ? onePassReady(p, p.grad(), m, v) : multiTensorReady(p, p.grad(), m, v, *device);
  };
  for (auto& group : optimizer.param_groups()) {
    const auto& options = static_cast<const torch::optim::AdamWOptions&>(group.options());
    if (options.amsgrad()) return false;
    for (const auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (!device) device = p.device();
      const auto it = state.find(p.unsafeGetTensorImpl());
      if (it == state.end()) {
        if (!ready(p, p, p)) return false;  // its state will be made in its strides
        continue;
      }
      const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
      if (!ready(p, s.exp_avg(), s.exp_avg_sq())) return false;
    }
  }
  if (!device) return true;  // no gradient anywhere: torch's step would change nothing either
  for (auto& group : optimizer.param_groups()) {
    const auto& options = static_cast<const torch::optim::AdamWOptions&>(group.options());
    const double lr = options.lr(), beta1 = std::get<0>(options.betas()), beta2 = std::get<1>(options.betas());
    TensorLists lists;
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
      if (device->is_cpu()) {
        const auto c = AdamWCoefficients::at(s.step(), lr, beta1, beta2, options.weight_decay(), options.eps());
        adamwOnePass(c, p.data_ptr<float>(), p.grad().const_data_ptr<float>(), s.exp_avg().data_ptr<float>(),
                     s.exp_avg_sq().data_ptr<float>(), p.numel());
        continue;
      }
      auto [it, added] = step_tensors.try_emplace(s.step());
      if (added) it->second = stepTensor(s.step(), *device);
      lists.add(p, p.grad(), s.exp_avg(), s.exp_avg_sq(), it->second);
    }
    multiTensorAdamW(lists, lr, beta1, beta2, options.weight_decay(), options.eps());
  }
  return true;
}

void FusedAdamW::zeroGrad() {
  for (auto& p : params_) {
    p.mutable_grad() = torch::Tensor();
  }
}

}  // namespace taehv
