// Video files in and out through FFmpeg's libraries: the whole video stream of a file as RGB frames, and RGB frames
// as an H.264 video. Used by taehv-train's roundtrip, encode (video in) and decode (video out). No model here.
#pragma once

#include <torch/torch.h>

#include <stdexcept>
#include <string>

namespace taehv::video {

/// A video file that cannot be used: unreadable, no video stream, no frames, truncated or corrupt data, a size
/// the encoder cannot take. The message names the file and the reason; callers report it as bad input (exit 2).
struct VideoError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

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

/// Decodes every frame of the best video stream of `path` (any container and codec FFmpeg reads). Throws
/// VideoError for an unreadable file, no video stream, zero frames, a resolution change mid-stream, and a file that
/// ends early (a read or decode error after the first frame, or fewer frames than the container announces).
Video readVideo(const std::string& path);

/// True when FFmpeg knows a container for the name's extension (.mp4, .mkv, .mov, ...).
bool isVideoFileName(const std::string& path);

/// Writes `frames` ((T, H, W, 3) uint8 RGB, T >= 1) as H.264 (libx264, yuv420p, CRF 18) at `rate` in the
/// container the extension names. H.264 4:2:0 needs an even width and height: anything else is a VideoError, thrown
/// before any file is made. The file is written by writeFileAtomically (taehv/model/output_file.h): a temporary
/// beside the target, renamed over it when complete, so a failure leaves no partial file (OutputFileError).
void writeVideo(const std::string& path, const torch::Tensor& frames, FrameRate rate);

}  // namespace taehv::video
