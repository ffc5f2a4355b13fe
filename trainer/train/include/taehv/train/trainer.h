// The training run and the evaluation behind `taehv-train train` and `taehv-train eval`.
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "taehv/train/config.h"

namespace taehv::train {

struct TrainOptions {
  Config config;
  std::string resume;        ///< "", "latest", a checkpoint folder or an output folder
  int64_t stop_at_step = 0;  ///< >0: after this step save and exit 0 as if preempted (tests, scripted pauses)
};

/// Runs data-parallel training as the torchrun environment says (one process when it is absent).
/// Returns the exit status: 0 done or stopped by SIGTERM/SIGINT after saving; 2 bad input; 1 failure;
/// kAbortExitCode when another rank failed.
int runTraining(const TrainOptions& options);

/// The text of an error for the user: a libtorch error's message without its C++ backtrace, with a hint where NCCL
/// refused ranks sharing a GPU.
std::string errorMessage(const std::exception& e);

/// The one message (taehv/log.h) for an error that ends a training or evaluation run, and the run's exit status: 2
/// for bad input the user can fix (ConfigError, CheckpointError, DataError, whose message says "data: "), else 1.
int reportRunError(const std::exception& e);

struct EvalOptions {
  Config config;
  std::string checkpoint;  ///< checkpoint folder, output folder / "latest" (output.dir), or weights .safetensors
  bool ema = true;         ///< use the EMA weights when the checkpoint has them
};

struct EvalResult {
  double psnr = 0;  ///< dB, mean over clips
  double ssim = 0;  ///< mean over clips, frames and channels (11x11 Gaussian window, sigma 1.5)
  double edges = 0;  ///< taehv::edgeShare (the input's edges the reconstruction keeps, 1 = all), mean over clips
  int64_t clips = 0;
  bool held_out = false;  ///< the clips are scenes the training never read (synthetic source; see EvalClips)
};

/// Evaluates PSNR and SSIM of decode(encode(x)) against the aligned input frames on the config's EvalClips
/// (for the synthetic source: held-out scenes the training never reads).
EvalResult runEval(const EvalOptions& options);

}  // namespace taehv::train
