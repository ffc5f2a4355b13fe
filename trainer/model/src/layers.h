// The model's building blocks at work: counted convolutions, running a layer list over whole clips at once
// (runParallel) or frame by frame (runStreaming, FrameStream). Shared by taehv.cc (the model) and layers.cc (the
// blocks); internal to taehv::model (not installed).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "taehv/model/taehv.h"

namespace taehv::detail {

/// conv.forward(x), its forward FLOPs added to convFlops().
torch::Tensor countedConv(torch::nn::Conv2dImpl& conv, const torch::Tensor& x);

torch::nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride = 1, bool bias = true);
torch::nn::Conv2d conv1x1NoBias(int64_t in, int64_t out);

/// A layer that works on each frame alone (conv, ReLU, Clamp, Upsample, PixelShuffle), on (B, C, H, W).
torch::Tensor applyFrameLayer(const TAEHVLayer& layer, const torch::Tensor& x);

/// Runs `layers` over (N*T, C, H, W) holding `clips` clips of consecutive frames, all frames at once, dropping the
/// first `trim` frames of each clip as early as no later layer mixes time (details beside the definition).
torch::Tensor runParallel(const std::vector<TAEHVLayer>& layers, torch::Tensor x, int64_t clips, int64_t trim,
                          bool channels_last);

/// Runs `layers` over NTCHW x one frame at a time (FrameStream); returns NTCHW.
torch::Tensor runStreaming(const std::vector<TAEHVLayer>& layers, const torch::Tensor& x);

}  // namespace taehv::detail
