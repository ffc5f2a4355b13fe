// Image quality of reconstructed frames against their originals, as the trainer's eval reports them.
#pragma once

#include <torch/torch.h>

namespace taehv {

/// Mean over the leading dimension of 10 log10(1 / MSE) (dB), values in [0, 1]; a, b: [N, ...]. The MSE is
/// floored at 1e-10 (100 dB) so that identical inputs give a number.
double psnr(const torch::Tensor& a, const torch::Tensor& b);

/// The SSIM map (Wang et al.) of a against b [N, C, H, W]: 11x11 Gaussian window (sigma 1.5; smaller and odd for
/// smaller images), no padding, data range 1; [N, C, H - win + 1, W - win + 1], in fp32 (also under autocast) and
/// differentiable, so a loss can use it (train.ssim_weight).
torch::Tensor ssimMap(const torch::Tensor& a, const torch::Tensor& b);

/// SSIM (Wang et al.), 11x11 Gaussian window (sigma 1.5; smaller and odd for smaller images), data range 1;
/// a, b: [N, C, H, W]; the mean of the SSIM map over everything. Works through N in chunks of 16 images, so that
/// long videos take bounded extra memory.
double ssim(const torch::Tensor& a, const torch::Tensor& b);

/// How much of b's edges a keeps: over the places where b changes by more than 0.1 from one pixel to the next
/// (across or down, per channel), the sum of |a's change| there over the sum of |b's|. 1: every such edge as steep
/// as in b; where b steps within one pixel, an a that ramps over n pixels gives ~1/n. a, b: [N, C, H, W] in
/// [0, 1]; 1 when b has no such change. `bench/recipe/edges.py` computes the same from a preview PNG.
double edgeShare(const torch::Tensor& a, const torch::Tensor& b);

}  // namespace taehv
