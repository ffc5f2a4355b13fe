// The weight gradient of a 3x3 convolution as Winograd transforms, for fp32 training on the CPU (train.cpu_conv).
// Internal to taehv::model (not installed).
#pragma once

#include <torch/torch.h>

namespace taehv::detail {

/// Whether winogradWeightGrad takes a convolution of `x` (N, C, H, W) with output gradient `gy`: fp32 on the CPU,
/// H and W multiples of 4.
bool winogradWeightGradFits(const torch::Tensor& x, const torch::Tensor& gy);

/// The weight gradient (Co, Ci, 3, 3) of a 3x3, stride-1, padding-1 convolution of x (N, Ci, H, W) whose output
/// gradient is gy (N, Co, H, W): Winograd's F(3x3, 4x4), the transpose of the forward F(4x4, 3x3) (Lavin & Gray,
/// 2016), 2.25 multiplies per output-gradient pixel and channel pair against the direct algorithm's 9. Rounding: a
/// few 1e-6 relative to oneDNN's direct weight gradient.
torch::Tensor winogradWeightGrad(const torch::Tensor& x, const torch::Tensor& gy);

}  // namespace taehv::detail
