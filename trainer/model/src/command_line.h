// What the model's sub-commands share (commands.cc: encode, decode; bench_command.cc: bench; video_commands.cc:
// roundtrip and the video files of encode and decode): the codec options (parsed by taehv/cli/options.h), the
// error boundary, loading the model, the streaming loops.
// Internal to taehv::model (not installed).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <utility>
#include <string>
#include <vector>

#include "taehv/cli/options.h"
#include "taehv/model/taehv.h"

namespace taehv::cli {

inline constexpr const char* kVariantsHelp =
    "  variants (latent channels): taehv, taew2_1, taecvx, taeos1_3 (16), taehv1_5, taehv1_5_super (32),\n"
    "  taew2_2, taew2_2_super (48), taeltx_2, taeltx2_3 (128), taeh3 (24); without --variant, the one the weights\n"
    "  file is named after (taew2_2_super.safetensors -> taew2_2_super).\n"
    "  --streaming: StreamingTAEHV, one frame (one latent) at a time, memory independent of the length (not taeh3).\n";

/// The options every model command (encode, decode, roundtrip) takes.
inline Options codecOptions() {
  return Options()
      .value("variant")
      .value("weights")
      .value("input")
      .value("output")
      .value("threads")
      .value("decoder-time-upscale")
      .value("decoder-space-upscale")
      .flag("streaming");
}

/// Runs `body` under runCommand (--help, UsageError: taehv/cli/options.h); a SafetensorsError is one message and
/// status 2, anything else one message and status 1.
int runGuarded(const std::string& usage, const std::vector<std::string>& argv, const std::function<int()>& body);

/// --variant, or the variant the --weights file is named after; UsageError when neither says.
std::string variantName(const Args& args);

/// The model of --variant (or the weights' file name) with --weights loaded, in eval mode. UsageError for a bad
/// variant, bad weights, or --streaming with taeh3.
TAEHV loadModel(const Args& args, bool streaming);

/// --threads K: intra-op threads.
void applyThreads(const Args& args);

/// "[1, 17, 3, 64, 64]"
std::string shapeText(c10::IntArrayRef shape);

/// Throws (exit 1) when `result` holds NaN or Inf: nothing is written then.
void requireFinite(const torch::Tensor& result, const std::string& what);

double secondsSince(std::chrono::steady_clock::time_point start);

/// `run()` under InferenceMode: its result and the seconds it took. Throws (exit 1) when the result holds NaN or Inf
/// (requireFinite, `what` naming it): nothing is written then.
std::pair<torch::Tensor, double> timedInference(const std::string& what, const std::function<torch::Tensor()>& run);

/// This process's peak resident memory in MB.
double peakRssMb();

/// Called after each output of a streaming loop with (outputs made so far, outputs expected).
using StreamProgress = std::function<void(int64_t done, int64_t total)>;

/// StreamingTAEHV over frames NTCHW (one frame in at a time, then the encoder flushed): encodeVideo's latents.
torch::Tensor encodeStreaming(const TAEHV& model, const torch::Tensor& frames, const StreamProgress& progress = {});

/// StreamingTAEHV over latents NTCHW (one latent in, its frames drained one by one): the frames of upstream's
/// stream_frames (taecvx keeps its first frames).
torch::Tensor decodeStreaming(const TAEHV& model, const torch::Tensor& latents, const StreamProgress& progress = {});

/// True for a path ending in .safetensors; encode and decode take any other name as a video file.
bool isSafetensorsPath(const std::string& path);

/// A video file as model input: every frame, as float (1, T, 3, H', W') in [0, 1], padded at the right and bottom
/// by repeating the edge pixels to multiples of the variant's 8 x patch size (H' >= H, W' >= W).
struct VideoInput {
  torch::Tensor frames;
  int64_t count = 0, height = 0, width = 0;  ///< the file's frame count and size, before padding
  int rate_num = 0, rate_den = 1;            ///< its frame rate
};

/// Reads `path` (--input) through FFmpeg; a bad video file is a UsageError naming the file and the reason.
VideoInput readVideoInput(const std::string& path, const TAEHV& model);

/// Checks before any work that --weights and --input (those given that exist) are regular files, and remembers them
/// as this command's inputs, which no output may replace (taehv/files/input_file.h). UsageError otherwise.
void requireInputFiles(const Args& args);

/// Checks an --output before any work (taehv/files/output_file.h checkOutputFile): a path a write may replace (not a
/// folder or a device), in a writable folder, and not one of the command's inputs however spelled. UsageError
/// otherwise.
void requireOutputFile(const std::string& path);

/// Checks a video --output before any work: a video file name (taehv::video's rule), then requireOutputFile.
void requireVideoOutput(const std::string& path);

/// Writes frames (1, T, 3, H, W) in [0, 1] to `path` (--output) as H.264 at rate_num/rate_den frames/s; a size or
/// name the encoder cannot take is a UsageError; nothing is left at `path` on any failure.
void writeVideoOutput(const std::string& path, const torch::Tensor& frames, int rate_num, int rate_den);

}  // namespace taehv::cli
