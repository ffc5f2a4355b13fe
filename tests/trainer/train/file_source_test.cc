// File sources (file_source.cc): frame folders, videos through taehv::video, the video file-name rule, skipping.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "../video/test_videos.h"
#include "data_test_util.h"
#include "taehv/train/clip_source.h"
#include "taehv/train/eval_clips.h"
#include "taehv/train/events.h"
#include "taehv/train/loader.h"
#include "taehv/train/sample_order.h"
#include "taehv/video/video_file.h"

namespace taehv::train {
namespace {

using testing::request;
using testing::sampleRequest;
using testing::tempDir;
namespace fs = std::filesystem;

void writeFrames(const std::string& dir, int count, int w, int h, bool jpeg_free = true) {
  fs::create_directories(dir);
  for (int i = 0; i < count; ++i) {
    RgbImage img{w, h, std::vector<uint8_t>(static_cast<size_t>(w * h * 3))};
    for (size_t k = 0; k < img.pixels.size(); ++k) img.pixels[k] = static_cast<uint8_t>((k * 7 + i * 40) % 256);
    char name[32];
    std::snprintf(name, sizeof name, "/f%03d.png", i);
    writeFileBytes(dir + name, encodePng(img));
  }
  (void)jpeg_free;
}

TEST(FileSource, FrameFoldersCropAndResize) {
  const auto dir = tempDir();
  writeFrames(dir + "/clipA", 10, 48, 40);
  writeFrames(dir + "/clipB", 3, 20, 20);  // shorter than a clip: last frame repeated
  auto source = makeFileSource(dir);
  ASSERT_EQ(source->size(), 2);
  for (int64_t i = 0; i < 2; ++i) {
    const Clip c = source->load(i, request(3 + static_cast<uint64_t>(i), 8, 32));
    EXPECT_EQ(c.frames.sizes(), (std::vector<int64_t>{8, 3, 32, 32}));
    EXPECT_GE(c.frames.min().item<float>(), 0.f);
    EXPECT_LE(c.frames.max().item<float>(), 1.f);
  }
  // No split of a folder: the eval clips are its items cut another way, and say so.
  Config cfg;
  cfg.data.source = dir;
  cfg.eval.clips = 3;
  const EvalClips eval(cfg, 0);
  EXPECT_FALSE(eval.heldOut());
  EXPECT_EQ(eval.item(2), 0);
  fs::remove_all(dir);
}

TEST(FileSource, EmptyOrMissingSourceIsAClearError) {
  const auto dir = tempDir();
  try {
    makeFileSource(dir);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("no video files"), std::string::npos) << e.what();
  }
  EXPECT_THROW(makeFileSource(dir + "/missing"), DataError);
  fs::remove_all(dir);
}

bool makeVideo(const std::string& path, int frames) {
  const std::string cmd = "ffmpeg -loglevel error -y -f lavfi -i testsrc=size=64x48:rate=10 -frames:v " +
                          std::to_string(frames) + " -pix_fmt yuv420p '" + path + "' </dev/null";
  return std::system(cmd.c_str()) == 0;
}

// (The decoder's own window, frame count and refusals: tests/trainer/video, VideoReader.)
TEST(FileSource, VideosDecodeAndCorruptOnesAreSkippedAndCounted) {
  TAEHV_REQUIRE_VIDEO_FILES();
  const auto dir = tempDir();
  ASSERT_TRUE(makeVideo(dir + "/a.mp4", 30));
  ASSERT_TRUE(makeVideo(dir + "/b.mkv", 20));
  writeFileBytes(dir + "/c.mp4", std::vector<uint8_t>(5000, 0x5a));  // not a video at all

  std::shared_ptr<const ClipSource> source = makeFileSource(dir);
  ASSERT_EQ(source->size(), 3);
  DataConfig data;
  data.frames = 8;
  data.size = 32;
  Loader loader(source, data, 1, Loader::Layout{0, 0, 1, 1, 0, 3}, 1);
  const SampleOrder order(source->size(), 1);
  for (int64_t k = 0; k < 3; ++k) {
    const Batch b = loader.next();
    EXPECT_EQ(b.frames.sizes(), (std::vector<int64_t>{3, 8, 3, 32, 32}));
    // The broken c.mp4 (item 2) is replaced by the next readable item, a.mp4 (item 0), cut with its sample's draws.
    for (int64_t j = 0; j < 3; ++j) {
      const int64_t position = SampleOrder::position(0, k, 0, 0, j, 1, 1, 3);
      const int64_t item = order.itemAt(position) == 2 ? 0 : order.itemAt(position);
      const Clip expected = source->load(item, sampleRequest(data, order.sampleSeed(position)));
      EXPECT_TRUE(torch::equal(b.frames[j], expected.frames)) << "step " << k << " sample " << j;
    }
  }
  EXPECT_EQ(loader.skipped(), 1);
  fs::remove_all(dir);
}

// One rule for what a video file is: every container name taehv::video takes (encode/decode/roundtrip) is an item
// of a data folder, in any case (.ts was not, before the rule was one); images, audio and latents are not. A real
// .ts is cut into a clip here and read whole by readVideo, the encode path's reader.
TEST(FileSource, EveryVideoFileNameIsAnItemAndATsClipDecodes) {
  TAEHV_REQUIRE_VIDEO_FILES();
  const auto dir = tempDir();
  ASSERT_TRUE(makeVideo(dir + "/clip.ts", 12));
  std::set<std::string> videos{dir + "/clip.ts"};
  for (const char* extension : video::kVideoFileExtensions) {
    if (std::string(extension) == ".ts") continue;
    writeFileBytes(dir + "/other" + extension, std::vector<uint8_t>(64, 1));  // a name only: never decoded here
    videos.insert(dir + "/other" + extension);
  }
  writeFileBytes(dir + "/SHOUTED.MKV", std::vector<uint8_t>(64, 1));
  videos.insert(dir + "/SHOUTED.MKV");
  for (const char* other : {"/sound.wav", "/sound.mp3", "/stream.h264", "/notes.txt", "/clip.ts.latents.json"}) {
    writeFileBytes(dir + other, std::vector<uint8_t>(64, 1));
  }
  auto source = makeFileSource(dir);
  std::set<std::string> items;
  int64_t ts = -1;
  for (int64_t i = 0; i < source->size(); ++i) {
    items.insert(source->name(i));
    if (source->name(i) == dir + "/clip.ts") ts = i;
  }
  EXPECT_EQ(items, videos);
  ASSERT_GE(ts, 0);
  EXPECT_EQ(source->load(ts, request(4, 8, 32)).frames.sizes(), (std::vector<int64_t>{8, 3, 32, 32}));
  EXPECT_TRUE(video::isVideoFileName(dir + "/clip.ts"));
  EXPECT_EQ(video::readVideo(dir + "/clip.ts").frames.sizes(), (std::vector<int64_t>{12, 48, 64, 3}));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace taehv::train
