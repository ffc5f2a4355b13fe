#include "taehv/train/data.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <set>
#include <tuple>
#include <utility>

#include "../video/test_videos.h"
#include "taehv/train/events.h"
#include "taehv/video/video_file.h"

namespace taehv::train {
namespace {
namespace fs = std::filesystem;

std::string tempDir() {
  char tmpl[] = "/tmp/taehv-data-XXXXXX";
  return mkdtemp(tmpl);
}

ClipRequest request(uint64_t seed, int64_t frames = 4, int64_t size = 32) {
  ClipRequest r;
  r.frames = frames;
  r.size = size;
  r.seed = seed;
  return r;
}

TEST(Synthetic, DeterministicBySeedAndMoving) {
  auto a = makeSyntheticSource(100, 7), b = makeSyntheticSource(100, 7), c = makeSyntheticSource(100, 8);
  const Clip x = a->load(3, request(11, 8)), y = b->load(3, request(11, 8)), z = c->load(3, request(11, 8));
  ASSERT_EQ(x.frames.sizes(), (std::vector<int64_t>{8, 3, 32, 32}));
  EXPECT_TRUE(torch::equal(x.frames, y.frames));
  EXPECT_FALSE(torch::equal(x.frames, z.frames));
  EXPECT_GE(x.frames.min().item<float>(), 0.f);
  EXPECT_LE(x.frames.max().item<float>(), 1.f);
  // Frames differ over time (things move) and the content is not flat.
  EXPECT_GT((x.frames[0] - x.frames[7]).abs().mean().item<float>(), 1e-3);
  EXPECT_GT(x.frames.std().item<float>(), 0.05);
  // Another augmentation seed gives another clip of the same item.
  EXPECT_FALSE(torch::equal(x.frames, a->load(3, request(12, 8)).frames));
}

// data.synthetic_texture=false (the quickstart's setting): same kind of moving scenes, far less fine detail.
TEST(Synthetic, SmoothScenesMoveAndHaveLessHighFrequencyEnergy) {
  SyntheticScenes smooth_scenes;
  smooth_scenes.texture = false;
  auto textured = makeSyntheticSource(100, 7), smooth = makeSyntheticSource(100, 7, smooth_scenes);
  auto detail = [](const torch::Tensor& f) {  // mean absolute difference of horizontal neighbours
    return (f.narrow(3, 1, f.size(3) - 1) - f.narrow(3, 0, f.size(3) - 1)).abs().mean().item<double>();
  };
  double d_textured = 0, d_smooth = 0;
  for (int64_t i = 0; i < 20; ++i) {
    const Clip t = textured->load(i, request(11, 8, 64)), s = smooth->load(i, request(11, 8, 64));
    d_textured += detail(t.frames);
    d_smooth += detail(s.frames);
    EXPECT_TRUE(torch::equal(s.frames, smooth->load(i, request(11, 8, 64)).frames));  // deterministic
    EXPECT_GT((s.frames[0] - s.frames[7]).abs().mean().item<float>(), 1e-4) << i;    // moving
  }
  EXPECT_LT(d_smooth, 0.6 * d_textured) << d_smooth << " vs " << d_textured;
}

// data.synthetic_shapes / synthetic_shape_scale / synthetic_flat_background: the same scenes made simpler. The
// defaults are today's scenes; one shape, larger, on one colour leaves more pixels of the background, and the
// background is then one colour where no shape is (a frame's most common colour covers most of it).
TEST(Synthetic, FewerLargerShapesOnAFlatBackground) {
  SyntheticScenes defaults, simple;
  simple.texture = defaults.texture = false;
  simple.max_shapes = 1;
  simple.shape_scale = 2;
  simple.flat_background = true;
  auto today = makeSyntheticSource(100, 7, defaults), easy = makeSyntheticSource(100, 7, simple);
  Config cfg;
  EXPECT_TRUE(torch::equal(makeSyntheticSource(100, 7)->load(3, request(11, 8)).frames,
                           makeSyntheticSource(100, 7, syntheticScenes(cfg.data))->load(3, request(11, 8)).frames))
      << "the config's defaults are the default scenes";
  auto flatShare = [](const torch::Tensor& frame) {  // share of pixels equal to the top-left pixel's colour
    auto same = (frame - frame.narrow(1, 0, 1).narrow(2, 0, 1)).abs().amax(0) < 1e-6;
    return same.to(torch::kFloat).mean().item<double>();
  };
  double flat_today = 0, flat_easy = 0;
  for (int64_t i = 0; i < 20; ++i) {
    ClipRequest r = request(11, 8, 64);
    r.crop_min = 1.0;
    const Clip a = today->load(i, r), b = easy->load(i, r);
    flat_today += flatShare(a.frames[0]);
    flat_easy += flatShare(b.frames[0]);
    EXPECT_GT(b.frames.std().item<float>(), 0.01) << i << ": a shape is still there";
    EXPECT_GT((b.frames[0] - b.frames[7]).abs().mean().item<float>(), 1e-4) << i << ": and moves";
    EXPECT_TRUE(torch::equal(b.frames, easy->load(i, r).frames)) << "deterministic";
  }
  EXPECT_GT(flat_easy / 20, 0.3) << "a flat background around the shape";
  EXPECT_LT(flat_today / 20, 0.1) << "today's gradients and waves are nowhere one colour for long";
}

// Without data.synthetic_scene_size (0) or with it at data.size, the clips are those rendered before the key
// (values of f283639's renderer, smooth scenes, seed 7).
TEST(Synthetic, DefaultSceneSizeRendersTheClipsOfBefore) {
  SyntheticScenes smooth;
  smooth.texture = false;
  auto source = makeSyntheticSource(100, 7, smooth);
  const auto f = source->load(3, request(11, 4, 64)).frames;
  EXPECT_NEAR(f.sum().item<double>(), 26378.61, 0.01);
  EXPECT_NEAR(f[0][0][10][20].item<float>(), 0.677246332, 1e-6);
  EXPECT_NEAR(f[1][1][40][5].item<float>(), 0.207290754, 1e-6);
  EXPECT_NEAR(f[3][2][63][63].item<float>(), 0.255994588, 1e-6);
  ClipRequest same = request(11, 4, 64);
  same.scene_size = 64;
  EXPECT_TRUE(torch::equal(f, source->load(3, same).frames)) << "scene size = size: the same to the bit";
  ClipRequest r48 = request(11, 4, 48);
  const auto g = source->load(17, r48).frames;
  r48.scene_size = 48;
  EXPECT_TRUE(torch::equal(g, source->load(17, r48).frames)) << "also where size / size is computed, not exact";
}

// data.synthetic_scene_size: a 32x32 clip of a scene 64 pixels across is a 32x32 window of the 64x64 clip of the
// same scene and draws (whole scenes: crop_min 1), up to the window's sub-pixel offset (mean error <= 0.010 in
// these 8 clips; whole frames have a standard deviation of 0.12-0.23). The whole scene at 32 pixels (scene size
// 0), shapes at half their pixel size, matches no window (mean error >= 0.043). The window moves with the draws.
TEST(Synthetic, ALargerSceneGivesWindowsAtItsPixelScale) {
  SyntheticScenes smooth;
  smooth.texture = false;
  auto source = makeSyntheticSource(100, 7, smooth);
  auto bestWindow = [](const torch::Tensor& clip, const torch::Tensor& whole, int64_t* x, int64_t* y) {
    const int64_t c = clip.size(3), n = whole.size(3);
    double best = 1e9;
    for (int64_t dy = 0; dy + c <= n; ++dy) {
      for (int64_t dx = 0; dx + c <= n; ++dx) {
        const double e = (clip - whole.narrow(2, dy, c).narrow(3, dx, c)).abs().mean().item<double>();
        if (e < best) std::tie(best, *x, *y) = std::make_tuple(e, dx, dy);
      }
    }
    return best;
  };
  std::set<std::pair<int64_t, int64_t>> offsets;
  for (int64_t item = 0; item < 8; ++item) {
    ClipRequest whole = request(11 + item, 4, 64), window = request(11 + item, 4, 32);
    whole.crop_min = window.crop_min = 1.0;
    const auto smaller = source->load(item, window).frames;  // scene size 0: the whole scene at 32 pixels
    window.scene_size = 64;
    const auto full = source->load(item, whole).frames, clip = source->load(item, window).frames;
    ASSERT_EQ(clip.sizes(), (std::vector<int64_t>{4, 3, 32, 32}));
    int64_t x = 0, y = 0, ignored = 0;
    EXPECT_LT(bestWindow(clip, full, &x, &y), 0.02) << "item " << item;
    EXPECT_GT(bestWindow(smaller, full, &ignored, &ignored), 0.03) << "item " << item;
    offsets.insert({x, y});
  }
  EXPECT_GE(offsets.size(), 6u) << "the window is drawn anywhere in the scene";
}

// The held-out eval clips are scenes the training source cannot return: every training item, cut with the
// same draws as an eval clip, differs from it; and they come at the eval size, deterministically.
TEST(EvalClips, SyntheticClipsAreHeldOutScenesAtTheEvalSize) {
  Config cfg;
  cfg.data.synthetic_clips = 40;
  cfg.data.size = 32;
  cfg.data.frames = 8;
  cfg.eval.clips = 6;
  cfg.eval.size = 48;
  cfg.eval.frames = 4;
  const EvalClips eval(cfg, 5);
  ASSERT_TRUE(eval.heldOut());
  ASSERT_EQ(eval.size(), 6);
  auto training = makeSource(cfg.data, 5);
  ASSERT_EQ(training->size(), 40);
  for (int64_t k = 0; k < eval.size(); ++k) {
    EXPECT_EQ(eval.item(k), 40 + k);
    const Clip clip = eval.load(k);
    ASSERT_EQ(clip.frames.sizes(), (std::vector<int64_t>{4, 3, 48, 48}));
    EXPECT_TRUE(torch::equal(clip.frames, eval.load(k).frames)) << "deterministic";
    EXPECT_GT(clip.frames.std().item<float>(), 0.02) << "not flat";
    // The scene of eval clip k against every training scene, both cut the same way (first frame, 16x16).
    ClipRequest same{1, 16, cfg.data.stride_max, 1.0, 99};
    const auto eval_frame = makeSyntheticSource(46, 5, syntheticScenes(cfg.data))->load(eval.item(k), same).frames;
    for (int64_t i = 0; i < training->size(); ++i) {
      EXPECT_FALSE(torch::equal(eval_frame, training->load(i, same).frames)) << "eval clip " << k << " = item " << i;
    }
  }
  // The training order only reaches items below data.synthetic_clips, over several epochs.
  SampleOrder order(training->size(), 5);
  for (int64_t p = 0; p < 200; ++p) EXPECT_LT(order.itemAt(p), 40);
  // Whole scenes at the eval size, whatever the training's scene size.
  Config windows = cfg;
  windows.data.synthetic_scene_size = 128;
  for (int64_t k = 0; k < eval.size(); ++k) {
    EXPECT_TRUE(torch::equal(eval.load(k).frames, EvalClips(windows, 5).load(k).frames)) << "eval clip " << k;
  }
  // Defaults: the training clip size and length.
  Config plain;
  plain.data.size = 32;
  plain.data.frames = 8;
  plain.eval.clips = 1;
  EXPECT_EQ(EvalClips(plain, 5).load(0).frames.sizes(), (std::vector<int64_t>{8, 3, 32, 32}));
}

TEST(SampleOrder, ShardsAreDisjointPerEpochAndReshuffled) {
  const int64_t n = 24, W = 3, B = 2, A = 2;
  SampleOrder order(n, 5);
  // One epoch = n / (W * B * A) = 2 optimizer steps.
  std::set<int64_t> seen;
  std::vector<std::set<int64_t>> per_rank(W);
  for (int64_t s = 0; s < 2; ++s) {
    for (int64_t a = 0; a < A; ++a) {
      for (int64_t r = 0; r < W; ++r) {
        for (int64_t j = 0; j < B; ++j) {
          const int64_t item = order.itemAt(SampleOrder::position(0, s, a, r, j, A, W, B));
          EXPECT_TRUE(seen.insert(item).second) << "item " << item << " read twice in one epoch";
          per_rank[static_cast<size_t>(r)].insert(item);
        }
      }
    }
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), n);
  std::vector<int64_t> e0, e1;
  for (int64_t p = 0; p < n; ++p) {
    e0.push_back(order.itemAt(p));
    e1.push_back(order.itemAt(n + p));
  }
  EXPECT_NE(e0, e1) << "epoch 1 must be reshuffled";
  // W ranks with batch B read what one rank with batch W * B reads, in the same order.
  for (int64_t r = 0; r < W; ++r) {
    for (int64_t j = 0; j < B; ++j) {
      EXPECT_EQ(SampleOrder::position(0, 1, 0, r, j, 1, W, B), SampleOrder::position(0, 1, 0, 0, r * B + j, 1, 1, W * B));
    }
  }
}

TEST(Loader, RanksReadDisjointShardsInTheBackground) {
  const int64_t n = 12;
  std::shared_ptr<const ClipSource> source = makeSyntheticSource(n, 1);
  DataConfig data;
  data.frames = 4;
  data.size = 16;
  std::vector<int64_t> all;
  for (int64_t r = 0; r < 3; ++r) {
    Loader loader(source, data, 9, Loader::Layout{0, 0, 1, 3, r, 2}, 2);
    for (int k = 0; k < 2; ++k) {
      const Batch b = loader.next();
      EXPECT_EQ(b.frames.sizes(), (std::vector<int64_t>{2, 4, 3, 16, 16}));
      EXPECT_EQ(b.step, k);
    }
    const auto read = loader.itemsRead();
    all.insert(all.end(), read.begin(), read.begin() + 4);
  }
  std::set<int64_t> unique(all.begin(), all.end());
  EXPECT_EQ(unique.size(), all.size()) << "ranks overlapped";
  EXPECT_EQ(static_cast<int64_t>(unique.size()), n);
}

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
  ASSERT_TRUE(taehv::testing::ffmpegProgramOnPath());
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
  for (int k = 0; k < 3; ++k) {
    const Batch b = loader.next();
    EXPECT_EQ(b.frames.sizes(), (std::vector<int64_t>{3, 8, 3, 32, 32}));
  }
  EXPECT_EQ(loader.skipped(), 1);
  for (auto item : loader.itemsRead()) EXPECT_NE(source->name(item), dir + "/c.mp4");
  fs::remove_all(dir);
}

// One rule for what a video file is: every container name taehv::video takes (encode/decode/roundtrip) is an item
// of a data folder, in any case (.ts was not, before the rule was one); images, audio and latents are not. A real
// .ts is cut into a clip here and read whole by readVideo, the encode path's reader.
TEST(FileSource, EveryVideoFileNameIsAnItemAndATsClipDecodes) {
  ASSERT_TRUE(taehv::testing::ffmpegProgramOnPath());
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

TEST(Loader, NoReadableItemIsAFatalErrorNotAHang) {
  const auto dir = tempDir();
  writeFileBytes(dir + "/x.mp4", std::vector<uint8_t>(100, 1));
  writeFileBytes(dir + "/y.webm", std::vector<uint8_t>(100, 2));
  std::shared_ptr<const ClipSource> source = makeFileSource(dir);
  DataConfig data;
  data.frames = 4;
  data.size = 16;
  Loader loader(source, data, 1, Loader::Layout{}, 1);
  EXPECT_THROW(loader.next(), DataError);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace taehv::train
