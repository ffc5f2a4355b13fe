// Video files in and out through FFmpeg's libraries: the one decoder (frames of a file's video stream as RGB, all of
// them or a strided window), the one rule for which file names are videos, and RGB frames written as H.264. Used by
// taehv-train's roundtrip, encode (video in) and decode (video out), and by the training data's file source. No
// model here.
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace taehv::video {

/// A video file that cannot be used: unreadable, no video stream, no frames, truncated or corrupt data, a size
/// the encoder cannot take. The message names the file and the reason; callers report it as bad input (exit 2).
struct VideoError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Whether this build reads and writes video files: false where FFmpeg's libraries were missing at configure time
/// (then every read and write below throws VideoError saying so).
bool videoFilesSupported();

/// Frames per second as a fraction (30000/1001 stays exact).
struct FrameRate {
  int num = 0;
  int den = 1;
  double value() const { return den == 0 ? 0.0 : static_cast<double>(num) / den; }
};

/// The frames of a video stream in display order.
struct Video {
  torch::Tensor frames;  ///< (T, H, W, 3) uint8 RGB, T >= 1
  FrameRate rate;        ///< the stream's average frame rate (its r_frame_rate when the average is unknown)
};

/// How decoded frames become RGB (swscale at the frame's own size: only the chroma planes are resampled).
enum class RgbConversion {
  /// Bicubic chroma, accurate rounding, full horizontal chroma interpolation: what encode, decode and roundtrip
  /// measure the model on.
  kAccurate,
  /// swscale's unscaled converter (SWS_BILINEAR): each chroma sample repeated over its pixels. 4-7x faster per
  /// frame than kAccurate (ffmpeg testsrc as 4:2:0 H.264 and MPEG-4) and up to 165 levels (of 255) off it at
  /// coloured edges. The training clips, cropped and resized afterwards, are made this way.
  kFast,
};

/// What a damaged file does to a read.
enum class OnDamage {
  /// VideoError: corrupt or unreadable data, a frame size change, fewer frames than the container announces.
  kFail,
  /// The frames decoded before the damage are the result (VideoError only when there are none); frames of another
  /// size than the first are left out. Damage is what the decoder reports; it conceals what it can.
  kKeepDecoded,
};

/// Which frames of the stream a read returns: start, start + stride, start + 2 stride, ... (display order).
struct FrameSelection {
  int64_t start = 0;
  int64_t stride = 1;   ///< >= 1
  int64_t count = -1;   ///< at most this many (decoding stops once it has them); -1: to the end of the stream
};

/// A video file opened for reading: its best video stream (any container and codec FFmpeg reads). One read (read(),
/// or start() then next()) per reader: it consumes the stream. Neither copyable nor movable (it owns FFmpeg's
/// objects through stream_).
class VideoReader {
 public:
  /// Opens `path` and finds its video stream. Throws VideoError: unreadable, no video stream, no decoder for it.
  explicit VideoReader(const std::string& path);
  ~VideoReader();  // in video_reader.cc, where Stream is complete

  /// Frames in the stream: the count the container announces, else its duration times the average frame rate
  /// (the stream's duration first, then the file's); 0 when it says neither. An estimate: a file may end early.
  int64_t frameCountEstimate() const;
  /// The stream's average frame rate (its r_frame_rate when the average is unknown); num 0 when it has neither.
  FrameRate rate() const;

  /// Decodes the selected frames, each (H, W, 3) uint8 RGB. Throws VideoError when there is no frame to return,
  /// and on damage as `on_damage` says. With kFail and no count, a stream shorter than the container announces is
  /// damage (truncated). start() and next() until the end, the frames kept.
  std::vector<torch::Tensor> read(const FrameSelection& selection, RgbConversion conversion, OnDamage on_damage);

  /// Starts decoding the selected frames, for next() to take one at a time (memory of one frame, whatever the
  /// length). Throws VideoError when the decoder cannot be opened. Once per reader (it consumes the stream), and not
  /// with read().
  void start(const FrameSelection& selection, RgbConversion conversion, OnDamage on_damage);
  /// The next selected frame, (H, W, 3) uint8 RGB; nothing after the last. Throws VideoError as read() does: damage
  /// as the damage rule says, and at the end a read that gave no frame, or (kFail, no count) a stream shorter than
  /// its container announces, which is found only once its frames have been given out.
  std::optional<torch::Tensor> next();

 private:
  struct Stream;  // FFmpeg's objects and the decoding state (video_reader.cc)
  void feedPacket();
  void checkEnd() const;
  std::string path_;
  std::unique_ptr<Stream> stream_;
};

/// Decodes every frame of the best video stream of `path` (VideoReader: kAccurate, kFail). Throws VideoError for
/// an unreadable file, no video stream, zero frames, a resolution change mid-stream, a file that ends early (a read
/// or decode error after the first frame, or fewer frames than the container announces), and no frame rate.
Video readVideo(const std::string& path);

/// The extensions of the video container file names taehv-train takes (lower case, with the dot): the one rule
/// for what a video file is, for the training data's folders and for encode/decode/roundtrip. FFmpeg reads all of
/// them; of those it writes, H.264 goes into .mp4 .m4v .mov .mkv .avi .ts .m2ts .mts .flv .f4v .3gp .nut.
inline constexpr std::array<const char*, 21> kVideoFileExtensions = {
    ".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".ts",  ".m2ts", ".mts", ".flv", ".f4v",
    ".mpg", ".mpeg", ".vob", ".ogv", ".3gp", ".wmv", ".asf", ".mxf", ".y4m", ".nut"};

/// True when the name ends in one of kVideoFileExtensions, in any case (clip.MP4, clip.ts). Images (.png .jpg),
/// audio (.wav .mp3) and raw streams (.h264) are not video files.
bool isVideoFileName(const std::string& path);

/// kVideoFileExtensions as one line for messages: ".mp4 .m4v ... .nut".
std::string videoFileExtensionList();

/// Why writeVideo cannot write at `rate`, "" when it can: frame rates from one frame every ten minutes (1/600 fps)
/// to a thousand frames a second (MP4 and MOV lose frames of an hour, Matroska keeps milliseconds). A rate whose numerator or denominator is
/// above 2^20 is written as the nearest fraction of terms up to 2^20 (relative difference below 1e-6).
std::string frameRateProblem(FrameRate rate);

/// Writes `frames` ((T, H, W, 3) uint8 RGB, T >= 1) as H.264 (libx264, yuv420p, CRF 18) at `rate` in the
/// container the extension names. H.264 4:2:0 needs an even width and height, and the rate must pass
/// frameRateProblem: anything else is a VideoError, thrown before any file is made. The file is written by
/// writeFileAtomically (taehv/model/output_file.h): a temporary beside the target, renamed over it when complete, so
/// a failure leaves no partial file (OutputFileError).
void writeVideo(const std::string& path, const torch::Tensor& frames, FrameRate rate);

/// The frames of a video to write, one per call: (H, W, 3) uint8 RGB, nothing after the last.
using FrameSource = std::function<std::optional<torch::Tensor>()>;

/// writeVideo with the frames taken from `next` one at a time as they are encoded (memory of one frame, whatever
/// the length), each width x height. The checks come before the first call of `next`; an exception it throws
/// leaves no file (rethrown unchanged), as does a source without frames (VideoError).
void writeVideo(const std::string& path, int64_t width, int64_t height, FrameRate rate, const FrameSource& next);

}  // namespace taehv::video
