// taehv::video built without FFmpeg (src/no_ffmpeg.cc): the file-name rule still holds, and reading or writing a
// video file is one VideoError naming the file and what to do, never a crash.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "taehv/video/video_file.h"

namespace taehv::video {
namespace {

void expectRefusal(const std::function<void()>& call) {
  try {
    call();
    FAIL() << "no VideoError";
  } catch (const VideoError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("clip.mp4: this taehv-train was built without FFmpeg"), std::string::npos) << message;
    EXPECT_NE(message.find("PNG/JPEG frames"), std::string::npos) << message;
  }
}

TEST(VideoWithoutFfmpeg, ReadsAndWritesAreOneMessageAndNamesStillFollowTheRule) {
  EXPECT_FALSE(videoFilesSupported());
  EXPECT_TRUE(isVideoFileName("/data/clip.MP4"));
  EXPECT_FALSE(isVideoFileName("/data/frame.png"));
  expectRefusal([] { VideoReader reader("clip.mp4"); });
  expectRefusal([] { readVideo("clip.mp4"); });
  expectRefusal([] {
    VideoReader reader("clip.mp4");
    reader.start({}, RgbConversion::kAccurate, OnDamage::kFail);
  });
  EXPECT_NE(frameRateProblem({25, 1}).find("built without FFmpeg"), std::string::npos);
  expectRefusal([] { writeVideo("clip.mp4", torch::zeros({2, 8, 8, 3}, torch::kUInt8), {10, 1}); });
}

}  // namespace
}  // namespace taehv::video
