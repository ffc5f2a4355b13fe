// What one training step optimizes: the learning-rate schedule, the loss, and the objective of a micro-batch
// (whole, or as the CPU slicer's parallel slices). Private to taehv::train.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "taehv/model/slice_backward.h"
#include "taehv/model/taehv.h"
#include "taehv/train/config.h"
#include "taehv/train/dist.h"
#include "taehv/train/loader.h"

namespace taehv::train {

/// Linear warm-up over train.warmup_steps, then cosine decay to train.min_lr_ratio x train.lr at train.steps.
double learningRate(const TrainConfig& t, int64_t step);

struct Objective {
  torch::Tensor loss;
  torch::Tensor pred;    ///< reconstruction [B, T', 3, S, S]
  torch::Tensor target;  ///< aligned input frames
};

/// The reconstruction term of train.loss (mse, l1, mse+l1) between pred and target [B, T, 3, H, W], plus
/// train.frame_diff_weight x the MSE between their frame-to-frame changes (pred[t+1] - pred[t] against the
/// input's): what moved where, weighted apart from the frames themselves; plus train.edge_weight x the MSE between
/// their differences of neighbouring pixels (across and down, averaged): the edges, weighted apart from the flat
/// areas that dominate the plain MSE; plus train.ssim_weight x (1 - SSIM) over the frames (taehv::ssimMap, fp32):
/// local structure relative to local contrast, so a faint edge counts nearly as much as a strong one (a blurred
/// edge at a quarter of the contrast: half, where an MSE gives a sixteenth). 0 (the defaults) leaves a term out.
torch::Tensor reconstructionLoss(const TrainConfig& t, const torch::Tensor& pred, const torch::Tensor& target);

/// The loss terms of step `step` (0-based): t, with the SSIM term left out before train.ssim_from_step.
TrainConfig lossTermsAt(const TrainConfig& t, int64_t step);

/// Reconstruction: decode(encode(x)) against the first T' input frames (decoded frame j matches input frame j).
/// Distillation (upstream recipe): MSE(encoder(x), teacher latents) + reconstruction of decode(teacher latents).
Objective computeObjective(TAEHV& model, const Batch& batch, const torch::Device& device, const TrainConfig& config,
                           bool distill);

/// computeObjective and its backward for one micro-batch as the slicer's slices, each on its own thread (CPU).
/// The gradients, scaled by `scale`, reach `sync` and the parameters' grads as backward's would; returns the
/// whole micro-batch's loss (the slices' losses weighted by their share of it), predictions and targets.
Objective slicedObjective(SliceBackward& slicer, GradSync& sync, TAEHV& model, const std::vector<torch::Tensor>& params,
                          const Batch& batch, const torch::Device& device, const TrainConfig& config, bool distill,
                          double scale);

}  // namespace taehv::train
