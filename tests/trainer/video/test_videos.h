// Videos for the tests, made by the ffmpeg program from its test sources (lavfi testsrc, sine), and the bad files
// a user may hand taehv-train: no video stream, unreadable, odd size, zero frames, truncated.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace taehv::testing {

/// Success when the ffmpeg program is on PATH; otherwise a failure that says so. The tests make their videos with
/// it (scripts/setup.sh installs it): `ASSERT_TRUE(taehv::testing::ffmpegProgramOnPath());`, never a skip.
inline ::testing::AssertionResult ffmpegProgramOnPath() {
  if (std::system("command -v ffmpeg >/dev/null 2>&1") == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "the ffmpeg program is not on PATH: this test makes its videos with it "
                                          "(scripts/setup.sh installs it)";
}

/// At the top of a test that makes or reads video files: skips it in a build made without FFmpeg (taehv::video
/// refuses every video file there, by design: tests/trainer/video tests that refusal's message), else fails it when the
/// ffmpeg program is missing.
#define TAEHV_REQUIRE_VIDEO_FILES()                                                                   \
  do {                                                                                                \
    if (!TAEHV_TEST_WITH_FFMPEG) GTEST_SKIP() << "this taehv-train was built without FFmpeg (no video files)"; \
    ASSERT_TRUE(taehv::testing::ffmpegProgramOnPath());                                               \
  } while (false)

/// Runs `ffmpeg -y -loglevel error ARGS OUT`; a failed test when ffmpeg fails.
inline void ffmpeg(const std::string& args, const std::string& out) {
  const std::string command = "ffmpeg -nostdin -y -hide_banner -loglevel error " + args + " '" + out + "'";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
}

/// `frames` frames of testsrc, WxH, at `rate` (e.g. "10" or "30000/1001"), H.264 yuv420p (yuv444p for odd sizes).
inline void makeTestVideo(const std::string& out, int w, int h, int frames, const std::string& rate,
                          const std::string& extra = "") {
  const bool even = w % 2 == 0 && h % 2 == 0;
  ffmpeg("-f lavfi -i testsrc=size=" + std::to_string(w) + "x" + std::to_string(h) + ":rate=" + rate +
             " -frames:v " + std::to_string(frames) + " -c:v libx264 -pix_fmt " + (even ? "yuv420p" : "yuv444p") +
             " " + extra,
         out);
}

inline std::string readAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  if (in) bytes << in.rdbuf();
  return bytes.str();
}

inline void writeAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

/// A copy of y4m file `in` whose stream header has `field` (W, H or F) set to `value` ("0", "1:2147483647").
inline void writeY4mWithHeaderField(const std::string& in, const std::string& out, char field,
                                    const std::string& value) {
  const std::string y4m = readAll(in);
  std::string header = y4m.substr(0, y4m.find('\n'));
  const auto at = header.find(std::string(" ") + field);
  ASSERT_NE(at, std::string::npos) << header;
  const auto end = header.find(' ', at + 1);
  header.replace(at + 2, (end == std::string::npos ? header.size() : end) - at - 2, value);
  writeAll(out, header + y4m.substr(y4m.find('\n')));
}

/// The bad inputs, each made in `dir`: {name, file}.
struct BadVideo {
  std::string kind;
  std::string path;
  std::string reason;  ///< a piece of the message that names the problem
};

inline std::vector<BadVideo> makeBadVideos(const std::string& dir) {
  std::vector<BadVideo> bad;
  bad.push_back({"missing file", dir + "/missing.mp4", "cannot read it"});
  writeAll(dir + "/garbage.mp4", std::string(4096, '\x5a'));
  bad.push_back({"unreadable bytes", dir + "/garbage.mp4", "cannot read it as a video"});
  ffmpeg("-f lavfi -i sine=frequency=440:duration=0.5", dir + "/audio.wav");
  bad.push_back({"no video stream", dir + "/audio.wav", "has no video stream"});
  // A y4m header without frames: the stream is there (64x48, 10 fps), its frames are not.
  ffmpeg("-f lavfi -i testsrc=size=64x48:rate=10 -frames:v 1 -pix_fmt yuv420p", dir + "/one.y4m");
  const std::string y4m = readAll(dir + "/one.y4m");
  writeAll(dir + "/zero.y4m", y4m.substr(0, y4m.find('\n') + 1));
  bad.push_back({"zero frames", dir + "/zero.y4m", "no frames"});
  // An MP4 with its index first (faststart) cut at two thirds: the index announces 20 frames, the data stops.
  makeTestVideo(dir + "/full.mp4", 64, 48, 20, "10", "-movflags +faststart");
  const std::string full = readAll(dir + "/full.mp4");
  writeAll(dir + "/truncated.mp4", full.substr(0, full.size() * 2 / 3));
  bad.push_back({"truncated file", dir + "/truncated.mp4", "truncated"});
  return bad;
}

}  // namespace taehv::testing
