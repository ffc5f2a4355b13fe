// The evaluation clips (eval_clips.cc): held-out synthetic scenes at the eval size.
#include "taehv/train/eval_clips.h"

#include <gtest/gtest.h>

#include <vector>

#include "taehv/train/clip_source.h"
#include "taehv/train/sample_order.h"

namespace taehv::train {
namespace {

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

}  // namespace
}  // namespace taehv::train
