// The roofline of a training step: its convolution FLOPs counted from the layers' own sizes, and the convolution
// FLOP/s this machine reaches on the step's own shapes (`taehv-train bench`).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "taehv/model/taehv.h"

namespace taehv {

/// One convolution of a step over the whole batch: its input (rows, in_channels, height, width) and options.
struct ConvShape {
  int64_t rows = 0, in_channels = 0, out_channels = 0, height = 0, width = 0;
  int64_t kernel = 1, stride = 1, padding = 0, groups = 1;

  int64_t outHeight() const { return (height + 2 * padding - kernel) / stride + 1; }
  int64_t outWidth() const { return (width + 2 * padding - kernel) / stride + 1; }
  /// 2 per multiply-add of the output, bias not counted (torch.utils.flop_counter's conv_flop_count).
  int64_t forwardFlops() const {
    return 2 * rows * out_channels * outHeight() * outWidth() * (in_channels / groups) * kernel * kernel;
  }
};

/// Convolution FLOPs of one training step (a loss of decode(encode(x)), its backward) over `batch` clips of `frames`
/// frames of `size` x `size` pixels, in the reference formulation: every layer on every frame (time padded as
/// encodeVideo pads it), each TGrow after its upsample, the trimmed frames computed. That is what upstream's
/// taehv.py and bench/model/taehv_py.py run and what torch.utils.flop_counter counts over them. Our parallel mode
/// does less (TGrow before the upsample, trimmed frames skipped): convFlops() counts what it ran.
/// Backward = input gradient + weight gradient, each as many FLOPs as the forward, except for the first
/// convolution, whose input (the data) needs no gradient. Only convolutions are counted, as flop_counter does for
/// this model (it has no matrix products; element-wise ops are counted by neither).
/// Throws std::invalid_argument for taeh3 (its chunked time layout is not counted).
struct StepFlops {
  int64_t forward = 0;
  int64_t backward = 0;
  std::vector<ConvShape> convs;  ///< every convolution of the forward, in order

  int64_t total() const { return forward + backward; }
};
StepFlops countStepFlops(const TAEHVImpl& model, int64_t batch, int64_t frames, int64_t size);

/// The fastest forward convolution measured: FLOP/s, on which shape and memory format.
struct ConvPeak {
  double flops_per_s = 0;
  ConvShape shape;
  bool channels_last = false;
};

/// Times forward convolutions (no autograd) of each shape in `dtype` on `device`, contiguous and channels_last,
/// for about `seconds` each after one untimed call (oneDNN primitive creation), with the process's intra-op
/// threads; returns the fastest. `shapes` must not be empty.
ConvPeak measureConvPeak(const std::vector<ConvShape>& shapes, torch::ScalarType dtype, torch::Device device,
                         double seconds);

/// The step's distinct 3x3 stride-1 convolution shapes carrying the most FLOPs, at most `count`, most first: the
/// shapes measureConvPeak is given.
std::vector<ConvShape> heaviestConv3x3Shapes(const StepFlops& step, std::size_t count);

}  // namespace taehv
