// roundtrip (video file -> latents -> video file, with PSNR, SSIM and throughput), and the video files that encode
// reads and decode writes.
#include <unistd.h>

#include "command_line.h"
#include "taehv/log.h"
#include "taehv/model/commands.h"
#include "taehv/model/cpu_tuning.h"
#include "taehv/model/metrics.h"
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

}  // namespace

bool isSafetensorsPath(const std::string& path) {
  const std::string ext = ".safetensors";
  return path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

VideoInput readVideoInput(const std::string& path, const TAEHV& model) {
  video::Video v;
  try {
    v = video::readVideo(path);
  } catch (const video::VideoError& e) {
    throw UsageError(std::string("--input ") + e.what());
  }
  VideoInput in;
  in.count = v.frames.size(0);
  in.height = v.frames.size(1);
  in.width = v.frames.size(2);
  in.rate_num = v.rate.num;
  in.rate_den = v.rate.den;
  const int64_t multiple = 8 * model->options().patch_size;
  torch::Tensor x = v.frames.permute({0, 3, 1, 2}).to(torch::kFloat).div_(255.0);  // (T, 3, H, W)
  const int64_t pad_h = roundUp(in.height, multiple) - in.height, pad_w = roundUp(in.width, multiple) - in.width;
  if (pad_h > 0 || pad_w > 0) {
    x = torch::nn::functional::pad(x, torch::nn::functional::PadFuncOptions({0, pad_w, 0, pad_h})
                                          .mode(torch::kReplicate));
  }
  in.frames = x.unsqueeze(0).contiguous();
  return in;
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
  const torch::Tensor rgb =
      frames[0].mul(255.0).round_().clamp_(0, 255).to(torch::kUInt8).permute({0, 2, 3, 1}).contiguous();
  try {
    video::writeVideo(path, rgb, {rate_num, rate_den});
  } catch (const video::VideoError& e) {
    throw UsageError(std::string("--output ") + e.what());
  }
}

}  // namespace cli

using namespace cli;  // NOLINT: the helpers of this file and commands.cc

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
    const VideoInput in = readVideoInput(input, model);
    if (in.height % 2 != 0 || in.width % 2 != 0) {
      throw UsageError("--input " + input + ": " + std::to_string(in.width) + "x" + std::to_string(in.height) +
                       " frames: the H.264 output (4:2:0) needs an even width and height; crop or scale it first "
                       "(e.g. ffmpeg -i IN -vf crop=iw-mod(iw\\,2):ih-mod(ih\\,2) EVEN.mp4)");
    }
    // The model drops its first timeUpscale-1 decoded frames: repeat the last frame until enough come out.
    int64_t length = in.count;
    while (model->decodedFrames(model->encodedLatents(length)) < in.count) ++length;
    torch::Tensor frames = in.frames;
    if (length > in.count) {
      frames = torch::cat({frames, frames.slice(1, in.count - 1, in.count).expand({1, length - in.count, -1, -1, -1})},
                          1);
    }
    const ProgressBar bar;
    torch::Tensor latents, decoded;
    double encode_s = 0, decode_s = 0;
    {
      torch::InferenceMode guard;
      auto start = std::chrono::steady_clock::now();
      bar.show("encode", 0, 1);
      latents = streaming ? encodeStreaming(model, frames, [&](int64_t d, int64_t t) { bar.show("encode", d, t); })
                          : model->encodeVideo(frames);
      if (!streaming) bar.show("encode", 1, 1);
      encode_s = secondsSince(start);
      start = std::chrono::steady_clock::now();
      bar.show("decode", 0, 1);
      decoded = streaming ? decodeStreaming(model, latents, [&](int64_t d, int64_t t) { bar.show("decode", d, t); })
                          : model->decodeVideo(latents);
      if (!streaming) bar.show("decode", 1, 1);
      decode_s = secondsSince(start);
    }
    requireFinite(decoded, "decoded frames");
    TORCH_CHECK(decoded.size(1) >= in.count, "decoded ", decoded.size(1), " frames of ", in.count);
    decoded = decoded.slice(1, 0, in.count).slice(3, 0, in.height).slice(4, 0, in.width);
    const torch::Tensor original = in.frames.slice(3, 0, in.height).slice(4, 0, in.width);
    const double psnr_db = psnr(decoded[0], original[0]);
    const double ssim_value = ssim(decoded[0], original[0]);
    writeVideoOutput(output, decoded, in.rate_num, in.rate_den);
    const double count = static_cast<double>(in.count);
    log::report(log::format("roundtrip %s -> %s: variant %s, %s, %lldx%lld at %d/%d fps, padded to %lldx%lld",
                            input.c_str(), output.c_str(), variantName(args).c_str(),
                            streaming ? "streaming" : "parallel", static_cast<long long>(in.width),
                            static_cast<long long>(in.height), in.rate_num, in.rate_den,
                            static_cast<long long>(frames.size(4)), static_cast<long long>(frames.size(3))));
    log::report(log::format("frames=%lld psnr_db=%.2f ssim=%.4f encode_frames_per_s=%.2f decode_frames_per_s=%.2f "
                            "frames_per_s=%.2f peak_rss_mb=%.1f",
                            static_cast<long long>(in.count), psnr_db, ssim_value, count / encode_s,
                            count / decode_s, count / (encode_s + decode_s), peakRssMb()));
    return 0;
  });
}

}  // namespace taehv
