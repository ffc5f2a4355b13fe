// taehv-train: the worker taehv-run launches. A table of sub-commands (taehv/cli/options.h dispatches it and every
// sub-command parses its options through the same layer); no sub-command means `train`.
#include <string>
#include <vector>

#include "taehv/cli/options.h"
#include "taehv/model/commands.h"
#include "taehv/train/build_info.h"
#include "taehv/train/commands.h"

int main(int argc, char** argv) {
  const taehv::cli::Program program{
      "taehv-train",
      {
          {"train", taehv::train::trainCommand, "train TAEHV data-parallel (the default; see train --help)"},
          {"eval", taehv::train::evalCommand, "PSNR and SSIM of a checkpoint on a dataset"},
          {"checkpoint", taehv::train::checkpointCommand, "a checkpoint's layout (info); its full state (consolidate)"},
          {"encode", taehv::encodeCommand, "frames (safetensors or a video file) -> latents"},
          {"decode", taehv::decodeCommand, "latents (safetensors) -> frames (safetensors or an H.264 video)"},
          {"roundtrip", taehv::roundtripCommand, "a video file encoded and decoded: H.264 out, PSNR, SSIM, frames/s"},
          {"bench", taehv::benchCommand, "time training steps of the model on random data"},
      },
      "train",
      "With no sub-command (or only options) taehv-train trains. --version: the libtorch, CUDA and NCCL it was built "
      "with.\n",
      taehv::train::versionText,
  };
  return taehv::cli::dispatch(program, std::vector<std::string>(argv + 1, argv + argc));
}
