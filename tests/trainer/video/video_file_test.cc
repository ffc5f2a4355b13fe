// taehv::video: an H.264 file written by writeVideo and read back by readVideo keeps frame count, rate, size and
// (within H.264 CRF 18) the pixels; a file made by ffmpeg reads back as ffmpeg wrote it; bad files are refused
// with their reason; a failed write leaves no file.
#include "taehv/video/video_file.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "../model/test_util.h"
#include "test_videos.h"

namespace taehv::video {
namespace {

using taehv::testing::TempDir;

TEST(VideoFileTest, FfmpegTestsrcReadsWithItsFrameCountRateAndSize) {
  TempDir dir;
  testing::makeTestVideo(dir.file("in.mp4"), 64, 48, 13, "30000/1001");
  const Video v = readVideo(dir.file("in.mp4"));
  EXPECT_EQ(v.frames.sizes(), (std::vector<int64_t>{13, 48, 64, 3}));
  EXPECT_EQ(v.rate.num, 30000);
  EXPECT_EQ(v.rate.den, 1001);
  // testsrc is not flat: a decoder that returned grey frames would fail here.
  EXPECT_GT(v.frames.to(torch::kFloat).std().item<double>(), 40.0);
}

TEST(VideoFileTest, WrittenH264ReadsBackWithTheSameFramesRateAndSize) {
  TempDir dir;
  testing::makeTestVideo(dir.file("in.mp4"), 64, 48, 7, "12");
  const Video in = readVideo(dir.file("in.mp4"));
  writeVideo(dir.file("out.mp4"), in.frames, {25, 2});
  const Video out = readVideo(dir.file("out.mp4"));
  ASSERT_EQ(out.frames.sizes(), in.frames.sizes());
  EXPECT_EQ(out.rate.num, 25);
  EXPECT_EQ(out.rate.den, 2);
  const double mse = (out.frames.to(torch::kFloat) - in.frames.to(torch::kFloat)).div(255).pow(2).mean().item<double>();
  EXPECT_GT(-10 * std::log10(mse), 30.0) << "CRF 18 H.264 of testsrc should be above 30 dB";
  // Only the output itself in the folder: no temporary left beside it.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.file("")), {}), 2);
}

TEST(VideoFileTest, OddSizeIsRefusedBeforeAnyFileIsMade) {
  TempDir dir;
  const auto frames = torch::zeros({2, 47, 64, 3}, torch::kUInt8);
  EXPECT_THROW(writeVideo(dir.file("odd.mp4"), frames, {10, 1}), VideoError);
  EXPECT_THROW(writeVideo(dir.file("x.unknownext"), torch::zeros({2, 48, 64, 3}, torch::kUInt8), {10, 1}),
               VideoError);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.file("")), {}), 0);
}

TEST(VideoFileTest, BadFilesAreRefusedWithTheirReason) {
  TempDir dir;
  for (const auto& bad : testing::makeBadVideos(dir.file(""))) {
    try {
      readVideo(bad.path);
      ADD_FAILURE() << bad.kind << ": read without an error";
    } catch (const VideoError& e) {
      EXPECT_NE(std::string(e.what()).find(bad.reason), std::string::npos) << bad.kind << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(bad.path), std::string::npos) << bad.kind << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace taehv::video
