#include "taehv/model/metrics.h"

#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>

namespace taehv {
namespace {

constexpr int64_t kSsimChunk = 16;  // images per SSIM pass: bounds the five filtered copies it makes

double ssimChunk(const torch::Tensor& a, const torch::Tensor& b) {
  return ssimMap(a.detach(), b.detach()).mean().item<double>();
}

}  // namespace

torch::Tensor ssimMap(const torch::Tensor& a_in, const torch::Tensor& b_in) {
  TORCH_CHECK(a_in.dim() == 4 && a_in.sizes() == b_in.sizes(), "ssimMap takes two [N, C, H, W] tensors of one shape");
  // fp32 also under autocast: the variances below are differences of near-equal terms, which bf16 would lose
  c10::impl::ExcludeDispatchKeyGuard fp32(c10::autocast_dispatch_keyset);
  auto a = a_in.to(torch::kFloat), b = b_in.to(torch::kFloat);
  const int64_t channels = a.size(1);
  int64_t win = std::min<int64_t>({11, a.size(2), a.size(3)});
  if (win % 2 == 0) --win;
  auto x = torch::arange(win, a.options()) - static_cast<double>(win / 2);
  auto g = torch::exp(-x.pow(2) / (2 * 1.5 * 1.5));
  g = g / g.sum();
  // the Gaussian window is separable: down, then across (half the cost of one 2-D window in a training step)
  auto down = g.view({1, 1, win, 1}).expand({channels, 1, win, 1}).contiguous();
  auto across = g.view({1, 1, 1, win}).expand({channels, 1, 1, win}).contiguous();
  auto filter = [&](const torch::Tensor& t) {
    const auto conv = [&](const torch::Tensor& v, const torch::Tensor& w) {
      return torch::conv2d(v, w, torch::Tensor(), at::IntArrayRef{1}, at::IntArrayRef{0}, at::IntArrayRef{1}, channels);
    };
    return conv(conv(t, down), across);
  };
  const double c1 = 0.01 * 0.01, c2 = 0.03 * 0.03;
  auto mu_a = filter(a), mu_b = filter(b);
  auto s_aa = filter(a * a) - mu_a * mu_a, s_bb = filter(b * b) - mu_b * mu_b, s_ab = filter(a * b) - mu_a * mu_b;
  return ((2 * mu_a * mu_b + c1) * (2 * s_ab + c2)) / ((mu_a.pow(2) + mu_b.pow(2) + c1) * (s_aa + s_bb + c2));
}

double psnr(const torch::Tensor& a, const torch::Tensor& b) {
  auto mse = (a.detach().to(torch::kFloat) - b.to(torch::kFloat)).pow(2).flatten(1).mean(1).clamp_min(1e-10);
  return (-10.0 * torch::log10(mse)).mean().item<double>();
}

double ssim(const torch::Tensor& a, const torch::Tensor& b) {
  TORCH_CHECK(a.dim() == 4 && a.sizes() == b.sizes(), "ssim takes two [N, C, H, W] tensors of one shape");
  double sum = 0;
  for (int64_t i = 0; i < a.size(0); i += kSsimChunk) {
    const int64_t end = std::min(a.size(0), i + kSsimChunk);
    sum += ssimChunk(a.slice(0, i, end), b.slice(0, i, end)) * static_cast<double>(end - i);
  }
  return sum / static_cast<double>(a.size(0));
}

double edgeShare(const torch::Tensor& a_in, const torch::Tensor& b_in) {
  TORCH_CHECK(a_in.dim() == 4 && a_in.sizes() == b_in.sizes(),
              "edgeShare takes two [N, C, H, W] tensors of one shape");
  const auto a = a_in.detach().to(torch::kFloat), b = b_in.detach().to(torch::kFloat);
  double kept = 0, there = 0;
  for (const int64_t dim : {2, 3}) {
    const int64_t n = a.size(dim);
    if (n < 2) continue;
    const auto change = [&](const torch::Tensor& v) {
      return (v.narrow(dim, 1, n - 1) - v.narrow(dim, 0, n - 1)).abs();
    };
    const auto db = change(b);
    const auto edge = db > 0.1;
    kept += change(a).masked_select(edge).sum().item<double>();
    there += db.masked_select(edge).sum().item<double>();
  }
  return there > 0 ? kept / there : 1.0;
}

}  // namespace taehv
