// Image quality of reconstructed frames against their originals, as the trainer's eval reports them.
#pragma once

#include <torch/torch.h>

namespace taehv {

/// Mean over the leading dimension of 10 log10(1 / MSE) (dB), values in [0, 1]; a, b: [N, ...]. The MSE is
/// floored at 1e-10 (100 dB) so that identical inputs give a number.
double psnr(const torch::Tensor& a, const torch::Tensor& b);

/// SSIM (Wang et al.), 11x11 Gaussian window (sigma 1.5; smaller and odd for smaller images), data range 1;
/// a, b: [N, C, H, W]; the mean of the SSIM map over everything. Works through N in chunks of 16 images, so that
/// long videos take bounded extra memory.
double ssim(const torch::Tensor& a, const torch::Tensor& b);

}  // namespace taehv
