#include "objective.h"

#include <algorithm>
#include <cmath>

#include "taehv/model/metrics.h"

namespace taehv::train {
namespace {

/// v[1:] - v[:-1] along `dim`: the change from each frame (dim 1) or pixel (dims -1, -2) to the next.
torch::Tensor nextMinusThis(const torch::Tensor& v, int64_t dim) {
  const int64_t n = v.size(dim);
  return v.narrow(dim, 1, n - 1) - v.narrow(dim, 0, n - 1);
}

}  // namespace

torch::Tensor reconstructionLoss(const TrainConfig& t, const torch::Tensor& pred, const torch::Tensor& target) {
  torch::Tensor loss;
  if (t.loss == LossKind::kL1) {
    loss = torch::l1_loss(pred, target);
  } else if (t.loss == LossKind::kMseL1) {
    loss = torch::mse_loss(pred, target) + torch::l1_loss(pred, target);
  } else {
    loss = torch::mse_loss(pred, target);
  }
  const int64_t frames = pred.size(1);
  if (t.frame_diff_weight > 0 && frames > 1) {
    loss = loss + t.frame_diff_weight * torch::mse_loss(nextMinusThis(pred, 1), nextMinusThis(target, 1));
  }
  if (t.edge_weight > 0) {
    // down before across: the order the measured runs built them in (autograd's order sets the gradients' rounding)
    const auto down = torch::mse_loss(nextMinusThis(pred, -2), nextMinusThis(target, -2));
    const auto across = torch::mse_loss(nextMinusThis(pred, -1), nextMinusThis(target, -1));
    loss = loss + t.edge_weight * 0.5 * (across + down);
  }
  if (t.ssim_weight > 0) {
    const auto flat = [](const torch::Tensor& v) { return v.flatten(0, 1); };  // [B, T, 3, H, W] -> [B*T, 3, H, W]
    loss = loss + t.ssim_weight * (1 - ssimMap(flat(pred), flat(target)).mean());
  }
  return loss;
}

TrainConfig lossTermsAt(const TrainConfig& t, int64_t step) {
  TrainConfig terms = t;
  if (step < t.ssim_from_step) terms.ssim_weight = 0;
  return terms;
}

double learningRate(const TrainConfig& t, int64_t step) {
  if (step < t.warmup_steps) return t.lr * static_cast<double>(step + 1) / static_cast<double>(t.warmup_steps);
  const double span = static_cast<double>(std::max<int64_t>(1, t.steps - t.warmup_steps));
  const double progress = std::min(1.0, static_cast<double>(step - t.warmup_steps) / span);
  return t.lr * (t.min_lr_ratio + (1 - t.min_lr_ratio) * 0.5 * (1 + std::cos(M_PI * progress)));
}

Objective computeObjective(TAEHV& model, const Batch& batch, const torch::Device& device, const TrainConfig& config,
                           bool distill) {
  auto x = batch.frames.to(device);
  Objective out;
  if (distill) {
    auto teacher = batch.latents.to(device);
    auto latents = model->encodeVideo(x);
    const int64_t L = std::min(latents.size(1), teacher.size(1));
    auto enc = torch::mse_loss(latents.narrow(1, 0, L).to(torch::kFloat), teacher.narrow(1, 0, L));
    out.pred = model->decodeVideo(teacher);
    out.target = x.narrow(1, 0, out.pred.size(1));
    out.loss = enc + reconstructionLoss(config, out.pred.to(torch::kFloat), out.target);
  } else {
    out.pred = model->decodeVideo(model->encodeVideo(x));
    out.target = x.narrow(1, 0, out.pred.size(1));
    out.loss = reconstructionLoss(config, out.pred.to(torch::kFloat), out.target);
  }
  return out;
}

Objective slicedObjective(SliceBackward& slicer, GradSync& sync, TAEHV& model, const std::vector<torch::Tensor>& params,
                          const Batch& batch, const torch::Device& device, const TrainConfig& config, bool distill,
                          double scale) {
  const int64_t n = batch.frames.size(0);
  std::vector<Objective> parts(static_cast<size_t>(slicer.slices()));
  struct ManualGrads {  // the parameter hooks stay off while the slices run, also when one throws
    GradSync& sync;
    explicit ManualGrads(GradSync& s) : sync(s) { sync.setManual(true); }
    ~ManualGrads() { sync.setManual(false); }
  };
  std::vector<torch::Tensor> grads;
  {
    ManualGrads manual(sync);
    grads = slicer.run(n, params, [&](int s, int64_t begin, int64_t end) {
      Batch part = batch;
      part.frames = batch.frames.slice(0, begin, end);
      if (batch.latents.defined()) part.latents = batch.latents.slice(0, begin, end);
      Objective o = computeObjective(model, part, device, config, distill);
      const double share = static_cast<double>(end - begin) / static_cast<double>(n);
      parts[static_cast<size_t>(s)] = {o.loss.detach() * share, o.pred.detach(), o.target};
      return o.loss * (share * scale);
    });
  }
  sync.addGrads(grads);
  Objective out;
  std::vector<torch::Tensor> preds, targets;
  for (auto& part : parts) {
    if (!part.loss.defined()) continue;
    out.loss = out.loss.defined() ? out.loss + part.loss : part.loss;
    preds.push_back(part.pred);
    targets.push_back(part.target);
  }
  out.pred = torch::cat(preds, 0);
  out.target = torch::cat(targets, 0);
  return out;
}

}  // namespace taehv::train
