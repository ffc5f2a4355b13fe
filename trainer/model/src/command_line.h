// What the model's sub-commands share (commands.cc: encode, decode; bench_command.cc: bench; video_commands.cc:
// roundtrip and the video files of encode and decode): the codec options (parsed by taehv/cli/options.h), the
// error boundary, loading the model, the streaming loops.
// Internal to taehv::model (not installed).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "taehv/cli/options.h"
#include "taehv/model/streaming.h"
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

/// Called after each output of a streaming loop with (outputs made so far, outputs expected; <= 0: not known).
using StreamProgress = std::function<void(int64_t done, int64_t total)>;

/// Tensors one per call, nothing after the last: the frames a streaming loop pulls (a video file's, one at a time).
using TensorSource = std::function<std::optional<torch::Tensor>()>;

/// StreamingTAEHV over the frames `next` gives, each (N, 1, 3, H, W), then the encoder flushed: encodeVideo's
/// latents (N, L, C, h, w). Holds one frame and the latents (a few percent of the frames they encode), whatever
/// the length; `expected` latents (<= 0: not known) is for `progress` only.
torch::Tensor encodeStreaming(const TAEHV& model, const TensorSource& next, int64_t expected,
                              const StreamProgress& progress = {});
/// encodeStreaming over frames NTCHW, one frame in at a time.
torch::Tensor encodeStreaming(const TAEHV& model, const torch::Tensor& frames, const StreamProgress& progress = {});

/// StreamingTAEHV's decoder over latents NTCHW as a source of frames (N, 1, 3, H, W): one latent in, its frames
/// drained one by one: the frames of upstream's stream_frames (taecvx keeps its first frames). Memory of one frame.
class StreamDecoder {
 public:
  StreamDecoder(const TAEHV& model, torch::Tensor latents);
  /// The next frame; nothing after the last.
  std::optional<torch::Tensor> next();
  /// How many frames next() gives in all.
  int64_t frames() const;

 private:
  StreamingTAEHV stream_;
  torch::Tensor latents_;
  int64_t next_latent_ = 0;
};

/// Every frame of a StreamDecoder in one tensor (N, T, 3, H, W).
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

/// A video file (--input) read one frame at a time, through FFmpeg (taehv::video's one decoder): memory of one
/// frame, whatever its length. Every failure, opening or mid-stream, is a UsageError naming the file and the reason.
class VideoInputStream {
 public:
  /// Opens `path` and decodes its first frame, so that its size is known before any work.
  VideoInputStream(const std::string& path, const TAEHV& model);
  ~VideoInputStream();
  VideoInputStream(const VideoInputStream&) = delete;
  VideoInputStream& operator=(const VideoInputStream&) = delete;

  /// The next frame as the file has it, (H, W, 3) uint8 RGB; nothing after the last.
  std::optional<torch::Tensor> nextRgb();
  /// The next frame as model input (1, 1, 3, H', W'), padded as VideoInput's; nothing after the last.
  std::optional<torch::Tensor> next();

  int64_t height() const { return height_; }
  int64_t width() const { return width_; }
  /// The frames given so far (the file's frame count once next() said the end).
  int64_t taken() const { return taken_; }
  /// The file's frame count as its container says it (0: it does not say), for progress only.
  int64_t countEstimate() const;
  int rateNum() const;
  int rateDen() const;

 private:
  struct Reader;  // taehv::video's reader (video_commands.cc)
  std::string path_;
  int64_t multiple_;  // 8 x the variant's patch size
  std::unique_ptr<Reader> reader_;
  std::optional<torch::Tensor> first_;  // decoded by the constructor, not yet given
  int64_t height_ = 0, width_ = 0, taken_ = 0;
};

/// encode --streaming --input IN.mp4 --output OUT.safetensors: the file's frames pulled one at a time into the
/// streaming encoder (memory of one frame and the latents, whatever the length), the latents written; prints the
/// summary line. Returns the exit status.
int encodeVideoFileStreaming(const TAEHV& model, const std::string& input, const std::string& output);

/// Reads every frame of `path` (--input) through VideoInputStream; a bad video file is a UsageError naming the file
/// and the reason.
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
