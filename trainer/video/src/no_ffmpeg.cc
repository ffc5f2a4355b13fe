// taehv::video in a build without FFmpeg (its libraries were not found at configure time, e.g. a stock PyTorch
// image): every video file read or write is one VideoError saying so and what to do instead.
#include <optional>
#include <string>

#include "taehv/video/video_file.h"

namespace taehv::video {
namespace {

const char* const kWithoutFfmpeg =
    "this taehv-train was built without FFmpeg (libavformat, libavcodec, libswscale and libavutil were not found when "
    "it was configured), so it reads and writes no video files; use a folder of PNG/JPEG frames, a latent or frame "
    "tensor file, or rebuild where FFmpeg's development files are installed (Debian: scripts/setup.sh)";

[[noreturn]] void refuse(const std::string& path) { throw VideoError(path + ": " + kWithoutFfmpeg); }

}  // namespace

struct VideoReader::Stream {};

bool videoFilesSupported() { return false; }

VideoReader::VideoReader(const std::string& path) : path_(path) { refuse(path); }
VideoReader::~VideoReader() = default;
int64_t VideoReader::frameCountEstimate() const { refuse(path_); }
FrameRate VideoReader::rate() const { refuse(path_); }
std::vector<torch::Tensor> VideoReader::read(const FrameSelection&, RgbConversion, OnDamage) { refuse(path_); }
void VideoReader::start(const FrameSelection&, RgbConversion, OnDamage) { refuse(path_); }
std::optional<torch::Tensor> VideoReader::next() { refuse(path_); }

Video readVideo(const std::string& path) { refuse(path); }

void writeVideo(const std::string& path, const torch::Tensor&, FrameRate) { refuse(path); }
void writeVideo(const std::string& path, int64_t, int64_t, FrameRate, const FrameSource&) { refuse(path); }

std::string frameRateProblem(FrameRate) { return kWithoutFfmpeg; }  // no rate can be written

}  // namespace taehv::video
