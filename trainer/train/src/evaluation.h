// Evaluation: PSNR, SSIM and edge share of decode(encode(x)) on the config's EvalClips (held-out scenes for the
// synthetic source), during training across the ranks and in `taehv-train eval`; the preview images; the EMA
// weights swapped in for both. Private to taehv::train.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "taehv/model/taehv.h"
#include "taehv/train/dist.h"
#include "taehv/train/eval_clips.h"
#include "taehv/train/events.h"

namespace taehv::train {

/// Input frames above, reconstructions below, up to 6 frames of the first clip.
RgbImage previewImage(const torch::Tensor& target, const torch::Tensor& pred);

/// Swaps the EMA weights into the model for its lifetime (no-op without EMA).
class EmaWeights {
 public:
  EmaWeights(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& ema);
  ~EmaWeights();
  EmaWeights(const EmaWeights&) = delete;
  EmaWeights& operator=(const EmaWeights&) = delete;

 private:
  const std::vector<torch::Tensor>& params_;
  std::vector<torch::Tensor> backup_;
};

struct EvalSummary {
  double psnr = 0;  ///< dB, mean over the clips evaluated
  double ssim = 0;
  double edges = 0;  ///< taehv::edgeShare, mean over the clips
  int64_t clips = 0;  ///< 0: no clip was readable
  double seconds = 0;
  RgbImage preview;  ///< clip 0's, on the rank that evaluated it when asked for
};

/// Every rank evaluates its share (clips rank, rank + world, ...) with the EMA weights when `ema` is not empty;
/// collective: all ranks get the means over all clips. `want_preview`: this rank keeps clip 0's preview if it has it.
EvalSummary evaluateAcrossRanks(TAEHV& model, const std::vector<torch::Tensor>& params,
                                const std::vector<torch::Tensor>& ema, const EvalClips& clips,
                                const torch::Device& device, Distributed& dist, int rank, int world,
                                bool want_preview);

}  // namespace taehv::train
