// roundtrip (video file -> latents -> video file, with PSNR, SSIM and throughput), and the video files that encode
// reads and decode writes.
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <tuple>

#include "command_line.h"
#include "taehv/log.h"
#include "taehv/model/commands.h"
#include "taehv/model/cpu_tuning.h"
#include "taehv/model/metrics.h"
#include "taehv/model/safetensors.h"
#include "taehv/video/video_file.h"

namespace taehv {
namespace cli {
namespace {

const std::string kRoundtripUsage =
    std::string("usage: taehv-train roundtrip [--variant V] --weights W.safetensors --input IN.mp4 --output OUT.mp4\n"
                "                             [--streaming] [--threads K]\n"
                "  decodes every frame of IN (any video FFmpeg reads), encodes and decodes it with the model, writes\n"
                "  OUT as H.264 (libx264, CRF 18, yuv420p) at IN's frame rate, and prints frames, PSNR and SSIM of the\n"
                "  reconstruction against IN (per frame, averaged) and frames per second of encode and decode.\n"
                "  Sizes: frames are padded (the edge pixels repeated, right and bottom) to multiples of 8 x the\n"
                "  variant's patch size (8, 16 or 32) and cropped back after decoding, so OUT has IN's size and frame\n"
                "  count; H.264 4:2:0 needs an even width and height. Length: the last frame is repeated until the\n"
                "  model decodes at least as many frames as IN has (it drops its first timeUpscale-1 frames).\n") +
    kVariantsHelp;

// A progress bar on stderr, only when stderr is a terminal.
class ProgressBar {
 public:
  ProgressBar() : on_(::isatty(STDERR_FILENO) == 1) {}
  void show(const char* stage, int64_t done, int64_t total) const {
    if (!on_ || total <= 0) return;
    done = std::min(done, total);  // a total from the container's frame count may be short
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / total);
    log::print(log::Stream::kStderr,
               log::format("\r%-8s [%s%s] %lld/%lld%s", stage, std::string(static_cast<size_t>(filled), '#').c_str(),
                           std::string(static_cast<size_t>(kWidth - filled), '.').c_str(),
                           static_cast<long long>(done), static_cast<long long>(total), done == total ? "\n" : ""));
  }

 private:
  bool on_;
};

int64_t roundUp(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// Frames (T, H, W, 3) uint8 RGB as model input (1, T, 3, H', W') float in [0, 1], padded at the right and bottom
// by repeating the edge pixels to multiples of `multiple`.
torch::Tensor modelFrames(const torch::Tensor& rgb, int64_t multiple) {
  const int64_t height = rgb.size(1), width = rgb.size(2);
  torch::Tensor x = rgb.permute({0, 3, 1, 2}).to(torch::kFloat).div_(255.0);  // (T, 3, H, W)
  const int64_t pad_h = roundUp(height, multiple) - height, pad_w = roundUp(width, multiple) - width;
  if (pad_h > 0 || pad_w > 0) {
    x = torch::nn::functional::pad(x, torch::nn::functional::PadFuncOptions({0, pad_w, 0, pad_h})
                                          .mode(torch::kReplicate));
  }
  return x.unsqueeze(0).contiguous();
}

// Model output frames (T, 3, H, W) in [0, 1] as (T, H, W, 3) uint8 RGB, what the video writer takes.
torch::Tensor rgbFrames(const torch::Tensor& frames) {
  return frames.mul(255.0).round_().clamp_(0, 255).to(torch::kUInt8).permute({0, 2, 3, 1}).contiguous();
}

}  // namespace

bool isSafetensorsPath(const std::string& path) {
  const std::string ext = ".safetensors";
  return path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

struct VideoInputStream::Reader {
  explicit Reader(const std::string& path) : video(path) {}
  video::VideoReader video;
};

VideoInputStream::VideoInputStream(const std::string& path, const TAEHV& model)
    : path_(path), multiple_(8 * model->options().patch_size) {
  try {
    reader_ = std::make_unique<Reader>(path);
    reader_->video.start({}, video::RgbConversion::kAccurate, video::OnDamage::kFail);
  } catch (const video::VideoError& e) {
    throw UsageError(std::string("--input ") + e.what());
  }
  first_ = nextRgb();  // the reader gives at least one frame or throws
  taken_ = 0;
  height_ = first_->size(0);
  width_ = first_->size(1);
}

VideoInputStream::~VideoInputStream() = default;

std::optional<torch::Tensor> VideoInputStream::nextRgb() {
  std::optional<torch::Tensor> frame;
  if (first_) {
    frame.swap(first_);
  } else {
    try {
      frame = reader_->video.next();
    } catch (const video::VideoError& e) {
      throw UsageError(std::string("--input ") + e.what());
    }
  }
  if (frame) ++taken_;
  return frame;
}

std::optional<torch::Tensor> VideoInputStream::next() {
  std::optional<torch::Tensor> frame = nextRgb();
  if (!frame) return std::nullopt;
  return modelFrames(frame->unsqueeze(0), multiple_);
}

int64_t VideoInputStream::countEstimate() const { return reader_->video.frameCountEstimate(); }
int VideoInputStream::rateNum() const { return reader_->video.rate().num; }
int VideoInputStream::rateDen() const { return reader_->video.rate().den; }

VideoInput readVideoInput(const std::string& path, const TAEHV& model) {
  VideoInputStream stream(path, model);
  std::vector<torch::Tensor> frames;
  while (std::optional<torch::Tensor> frame = stream.nextRgb()) frames.push_back(std::move(*frame));
  VideoInput in;
  in.count = stream.taken();
  in.height = stream.height();
  in.width = stream.width();
  in.rate_num = stream.rateNum();
  in.rate_den = stream.rateDen();
  in.frames = modelFrames(torch::stack(frames), 8 * model->options().patch_size);
  return in;
}

int encodeVideoFileStreaming(const TAEHV& model, const std::string& input, const std::string& output) {
  VideoInputStream in(input, model);
  const int64_t expected = in.countEstimate() > 0 ? model->encodedLatents(in.countEstimate()) : 0;
  const auto [latents, seconds] =
      timedInference("latents", [&] { return encodeStreaming(model, [&] { return in.next(); }, expected); });
  writeSafetensors(output, {{"latents", latents}}, torch::kFloat);
  const int64_t multiple = 8 * model->options().patch_size;
  log::report(log::format("encoded %s -> latents %s in %.3f s (streaming) peak_rss_mb=%.1f",
                          shapeText({1, in.taken(), 3, roundUp(in.height(), multiple), roundUp(in.width(), multiple)})
                              .c_str(),
                          shapeText(latents.sizes()).c_str(), seconds, peakRssMb()));
  return 0;
}

void requireVideoOutput(const std::string& path) {
  if (!video::isVideoFileName(path)) {
    throw UsageError("--output '" + path + "': neither .safetensors nor a video file name (" +
                     video::videoFileExtensionList() + "; H.264 goes into .mp4, .mkv, .mov)");
  }
  requireOutputFile(path);
}

void writeVideoOutput(const std::string& path, const torch::Tensor& frames, int rate_num, int rate_den) {
  if (frames.size(0) != 1) {
    throw UsageError("--output " + path + ": a video file holds one clip, the latents hold " +
                     std::to_string(frames.size(0)) + " (write .safetensors instead)");
  }
  const torch::Tensor rgb = rgbFrames(frames[0]);
  try {
    video::writeVideo(path, rgb, {rate_num, rate_den});
  } catch (const video::VideoError& e) {
    throw UsageError(std::string("--output ") + e.what());
  }
}

}  // namespace cli

using namespace cli;  // NOLINT: the helpers of this file and commands.cc

namespace {

// What a roundtrip read and measured: the input's frame count, size and rate, the reconstruction (cropped to the
// input's size) against the input, and the seconds of encoding and decoding.
struct RoundtripResult {
  int64_t count = 0, height = 0, width = 0;
  int rate_num = 0, rate_den = 1;
  double psnr_db = 0, ssim = 0;
  double encode_s = 0, decode_s = 0;
};

// The input's size and frame rate as the output needs them; UsageError naming --input (its size or rate is the
// cause, though the output is what could not take it).
void requireWritableInput(const std::string& input, int64_t width, int64_t height, int rate_num, int rate_den) {
  if (height % 2 != 0 || width % 2 != 0) {
    throw UsageError("--input " + input + ": " + std::to_string(width) + "x" + std::to_string(height) +
                     " frames: the H.264 output (4:2:0) needs an even width and height; crop or scale it first "
                     "(e.g. ffmpeg -i IN -vf crop=iw-mod(iw\\,2):ih-mod(ih\\,2) EVEN.mp4)");
  }
  if (const std::string why = video::frameRateProblem({rate_num, rate_den}); !why.empty()) {
    throw UsageError("--input " + input + ": " + why + "; re-time it first (e.g. ffmpeg -i IN -vf " +
                     "'setpts=N/(10*TB)' -r 10 OUT.mp4 for 10 frames/s)");
  }
}

// The frames the model decodes from `count` input frames once the last is repeated until enough come out (it drops
// its first timeUpscale-1 decoded frames).
int64_t paddedLength(const TAEHV& model, int64_t count) {
  int64_t length = count;
  while (model->decodedFrames(model->encodedLatents(length)) < count) ++length;
  return length;
}

// roundtrip without --streaming: the whole video in memory, encodeVideo and decodeVideo.
RoundtripResult roundtripParallel(TAEHV& model, const std::string& input, const std::string& output,
                                  const ProgressBar& bar) {
  const VideoInput in = readVideoInput(input, model);
  requireWritableInput(input, in.width, in.height, in.rate_num, in.rate_den);
  const int64_t length = paddedLength(model, in.count);
  torch::Tensor frames = in.frames;
  if (length > in.count) {
    frames = torch::cat({frames, frames.slice(1, in.count - 1, in.count).expand({1, length - in.count, -1, -1, -1})},
                        1);
  }
  RoundtripResult result{in.count, in.height, in.width, in.rate_num, in.rate_den};
  bar.show("encode", 0, 1);
  torch::Tensor latents;
  std::tie(latents, result.encode_s) = timedInference("latents", [&] { return model->encodeVideo(frames); });
  bar.show("encode", 1, 1);
  bar.show("decode", 0, 1);
  torch::Tensor decoded;
  std::tie(decoded, result.decode_s) = timedInference("decoded frames", [&] { return model->decodeVideo(latents); });
  bar.show("decode", 1, 1);
  TORCH_CHECK(decoded.size(1) >= in.count, "decoded ", decoded.size(1), " frames of ", in.count);
  decoded = decoded.slice(1, 0, in.count).slice(3, 0, in.height).slice(4, 0, in.width);
  const torch::Tensor original = in.frames.slice(3, 0, in.height).slice(4, 0, in.width);
  result.psnr_db = psnr(decoded[0], original[0]);
  result.ssim = ssim(decoded[0], original[0]);
  writeVideoOutput(output, decoded, in.rate_num, in.rate_den);
  return result;
}

// roundtrip --streaming: memory of a few frames whatever the length. The input is read twice: once into the
// streaming encoder (frame by frame, the last repeated as the parallel mode does), its latents kept; then again
// beside the streaming decoder, whose frames are compared with it one by one and written as they come.
RoundtripResult roundtripStreaming(const TAEHV& model, const std::string& input, const std::string& output,
                                   const ProgressBar& bar) {
  RoundtripResult result;
  torch::Tensor latents;
  {
    VideoInputStream in(input, model);
    result.height = in.height();
    result.width = in.width();
    result.rate_num = in.rateNum();
    result.rate_den = in.rateDen();
    requireWritableInput(input, result.width, result.height, result.rate_num, result.rate_den);
    std::optional<torch::Tensor> last;
    int64_t repeats = -1;  // copies of the last frame still to give once the file has ended (-1: not ended)
    const TensorSource frames = [&]() -> std::optional<torch::Tensor> {
      if (repeats < 0) {
        if (std::optional<torch::Tensor> frame = in.next()) return last = std::move(frame);
        repeats = paddedLength(model, in.taken()) - in.taken();
      }
      if (repeats == 0) return std::nullopt;
      --repeats;
      return last;
    };
    const int64_t expected = in.countEstimate() > 0 ? model->encodedLatents(in.countEstimate()) : 0;
    std::tie(latents, result.encode_s) = timedInference("latents", [&] {
      return encodeStreaming(model, frames, expected, [&](int64_t d, int64_t t) { bar.show("encode", d, t); });
    });
    result.count = in.taken();
  }
  const int64_t count = result.count, height = result.height, width = result.width;
  VideoInputStream original(input, model);  // the same file again, beside the decoded frames
  StreamDecoder decoder(model, latents);
  TORCH_CHECK(decoder.frames() >= count, "decoded ", decoder.frames(), " frames of ", count);
  int64_t written = 0;
  double psnr_sum = 0, ssim_sum = 0;
  // As writeVideoOutput: the writer's refusals name --output (the frame source's own errors pass unchanged).
  try {
    video::writeVideo(output, width, height, {result.rate_num, result.rate_den}, [&]() -> std::optional<torch::Tensor> {
      if (written == count) return std::nullopt;
      torch::Tensor x;
      double seconds = 0;
      std::tie(x, seconds) = timedInference("decoded frames", [&] { return decoder.next().value(); });
      result.decode_s += seconds;
      x = x[0].slice(2, 0, height).slice(3, 0, width);  // (1, 3, H, W)
      const std::optional<torch::Tensor> rgb = original.nextRgb();
      if (!rgb || rgb->size(0) != height || rgb->size(1) != width) {
        throw UsageError("--input " + input + " changed while it was read: it held " + std::to_string(count) +
                         " frames of " + std::to_string(width) + "x" + std::to_string(height) + " the first time");
      }
      const torch::Tensor y = rgb->permute({2, 0, 1}).unsqueeze(0).to(torch::kFloat).div_(255.0);
      psnr_sum += psnr(x, y);
      ssim_sum += ssim(x, y);
      ++written;
      bar.show("decode", written, count);
      return rgbFrames(x)[0];
    });
  } catch (const video::VideoError& e) {
    throw UsageError(std::string("--output ") + e.what());
  }
  result.psnr_db = psnr_sum / static_cast<double>(count);
  result.ssim = ssim_sum / static_cast<double>(count);
  return result;
}

}  // namespace

int roundtripCommand(const std::vector<std::string>& argv) {
  return runGuarded(kRoundtripUsage, argv, [&] {
    const Args args = codecOptions().parse(argv);
    applyThreads(args);
    const std::string input = args.required("input");
    const std::string output = args.required("output");
    if (isSafetensorsPath(output)) {
      throw UsageError("--output '" + output + "': name a video file (.mp4, .mkv, .mov); roundtrip writes no tensors");
    }
    requireInputFiles(args);
    requireVideoOutput(output);
    // Freed activations stay in the heap instead of going back to the kernel and page-faulting in again at the
    // next frame or stage (measured at 256x256, 17 frames, 2 threads: encode 5.7-9.0 -> 11.3-12.2 frames/s parallel,
    // 9.0-9.1 -> 12.3-13.9 streaming). Not in encode/decode: their streaming peak-RSS bound is tested as is.
    tuneCpuAllocator();
    const bool streaming = args.flag("streaming");
    TAEHV model = loadModel(args, streaming);
    const ProgressBar bar;
    const RoundtripResult result = streaming ? roundtripStreaming(model, input, output, bar)
                                             : roundtripParallel(model, input, output, bar);
    const int64_t multiple = 8 * model->options().patch_size;
    const double frames = static_cast<double>(result.count);
    log::report(log::format("roundtrip %s -> %s: variant %s, %s, %lldx%lld at %d/%d fps, padded to %lldx%lld",
                            input.c_str(), output.c_str(), variantName(args).c_str(),
                            streaming ? "streaming" : "parallel", static_cast<long long>(result.width),
                            static_cast<long long>(result.height), result.rate_num, result.rate_den,
                            static_cast<long long>(roundUp(result.width, multiple)),
                            static_cast<long long>(roundUp(result.height, multiple))));
    log::report(log::format("frames=%lld psnr_db=%.2f ssim=%.4f encode_frames_per_s=%.2f decode_frames_per_s=%.2f "
                            "frames_per_s=%.2f peak_rss_mb=%.1f",
                            static_cast<long long>(result.count), result.psnr_db, result.ssim, frames / result.encode_s,
                            frames / result.decode_s, frames / (result.encode_s + result.decode_s), peakRssMb()));
    return 0;
  });
}

}  // namespace taehv
