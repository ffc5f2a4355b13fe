// The synthetic source (synthetic_source.cc): deterministic moving scenes, their options, the scene size window.
#include <gtest/gtest.h>

#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "data_test_util.h"
#include "taehv/train/clip_source.h"
#include "taehv/train/config.h"

namespace taehv::train {
namespace {

using testing::request;

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

}  // namespace
}  // namespace taehv::train
