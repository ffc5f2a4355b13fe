// AdamW with the update rule of torch.optim.AdamW / torch::optim::AdamW (PyTorch 1.13, amsgrad off, decoupled
// weight decay), computed for float32 CPU tensors in one pass over each parameter instead of about eight
// tensor-wide operations, for float32 CUDA tensors by ATen's multi-tensor kernel (what torch.optim.AdamW(fused=True)
// runs: a few launches for all parameters instead of about ten per parameter), and with gradients released instead
// of zero-filled between steps. The same update steps a torch::optim::AdamW on its own state (the trainer) and a
// ZeRO shard (trainer/train/src/zero.cc).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace taehv {

struct FusedAdamWOptions {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

class FusedAdamW {
 public:
  /// `params` must be leaf tensors that require grad (a model's parameters()).
  FusedAdamW(std::vector<torch::Tensor> params, FusedAdamWOptions options);

  /// One update of every parameter that has a gradient:
  ///   p *= 1 - lr * wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
  ///   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
  /// float32 CPU parameters take the fused loop, float32 CUDA parameters ATen's multi-tensor kernel; others (other
  /// dtypes, strided gradients) the same formula in tensor ops.
  void step();

  /// Releases the gradients (the next backward creates them): no zero fill, same result as zeroing.
  void zeroGrad();


 private:
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> exp_avg_;
  std::vector<torch::Tensor> exp_avg_sq_;
  FusedAdamWOptions options_;
  int64_t step_ = 0;
};

/// The float32 coefficients of one AdamW update at step `step` (1 for the first update).
struct AdamWCoefficients {
  float decay;                  ///< 1 - lr * weight_decay
  float beta1, beta2;
  float one_minus_beta1, one_minus_beta2;
  float bias_correction2_sqrt;  ///< sqrt(1 - beta2^step)
  float eps;
  float neg_step_size;          ///< -lr / (1 - beta1^step)
  static AdamWCoefficients at(int64_t step, double lr, double beta1, double beta2, double weight_decay, double eps);
};

/// One AdamW update of `n` contiguous float32 elements in one pass (each element read and written once), on
/// at::parallel_for's threads. Each element's result depends on that element alone, in the same operations
/// whatever the range holds: updating a tensor whole or as any split into ranges gives the same bits (ZeRO's
/// shard update is bitwise the unsharded one).
void adamwOnePass(const AdamWCoefficients& c, float* p, const float* g, float* m, float* v, int64_t n);

/// One AdamW update of one tensor `p` (gradient `g`, moments `m` and `v`) at step `step`, as stepAdamWFused updates
/// each parameter: adamwOnePass for contiguous float32 CPU tensors, ATen's fused kernel elsewhere (a GPU's). ZeRO's
/// shard update, so that it is the unsharded update element for element.
void adamwUpdate(torch::Tensor& p, const torch::Tensor& g, torch::Tensor& m, torch::Tensor& v, int64_t step,
                 double lr, double beta1, double beta2, double weight_decay, double eps);

/// Steps `optimizer` (a torch::optim::AdamW) in one fused pass instead of its ~10 tensor operations per parameter:
/// on the CPU adamwOnePass per parameter, on a GPU ATen's multi-tensor kernel (a few launches for all of them). It
/// keeps the optimizer's own state (exp_avg, exp_avg_sq and step, made on first use as torch::optim::AdamW makes
/// them), so checkpoints and a later optimizer.step() carry on unchanged. Applies where every parameter with a
/// gradient is float32 with its gradient and state on one device, contiguous on the CPU or in its own strides on a
/// GPU, and amsgrad is off; elsewhere returns false having changed nothing (call optimizer.step()). Same formula;
/// it agrees with optimizer.step() to float rounding, not bit for bit.
bool stepAdamWFused(torch::optim::AdamW& optimizer);

}  // namespace taehv
