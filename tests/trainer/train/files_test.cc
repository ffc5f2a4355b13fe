// File data through the trainer (file_source.cc, objective.cc): a corrupt video is skipped and counted, eval on
// videos; teacher latents switch the objective to distillation.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../video/test_videos.h"
#include "taehv/model/safetensors.h"
#include "train_runs.h"

namespace taehv::train {
namespace {
namespace fs = std::filesystem;
using namespace taehv::testing;  // train_runs.h: launch, wait, tiny, ...

TEST(Files, CorruptVideoIsSkippedAndEvalReportsPsnrSsim) {
  TAEHV_REQUIRE_VIDEO_FILES();
  const auto dir = runDir();
  fs::create_directories(dir + "/videos");
  for (const char* name : {"a.mp4", "b.webm"}) {
    const std::string cmd = "ffmpeg -loglevel error -y -f lavfi -i testsrc=size=48x40:rate=10 -frames:v 24 '" + dir +
                            "/videos/" + name + "' </dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  std::ofstream(dir + "/videos/broken.mp4") << std::string(4000, 'x');
  const std::string out = dir + "/out";
  Job job = launch(1, plus(tiny(out, 3), {"data.source=" + dir + "/videos", "train.batch_per_rank=3",
                                          "log.preview_every=3", "checkpoint.export_safetensors=true"}),
                   out);
  expectSuccess(job);
  const auto log = slurp(job.logs[0]);
  EXPECT_NE(log.find("skipping unreadable item " + dir + "/videos/broken.mp4"), std::string::npos) << log;
  const auto rows = metrics(out);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows.back().at("data_skipped").get<int64_t>(), 1);
  EXPECT_TRUE(fs::exists(out + "/previews/step-0000003.png"));
  EXPECT_TRUE(fs::exists(out + "/weights.safetensors"));
  bool events = false;
  for (const auto& e : fs::directory_iterator(out + "/tensorboard")) {
    events |= e.path().filename().string().rfind("events.out.tfevents.", 0) == 0 && fs::file_size(e.path()) > 100;
  }
  EXPECT_TRUE(events);

  Job eval = launch(1, {"eval", "--checkpoint", "latest", "--set", "output.dir=" + out, "--set",
                        "data.source=" + dir + "/videos", "--set", "data.size=32", "--set", "data.frames=4", "--set",
                        "eval.clips=3", "--set", "train.threads=1"},
                    dir + "/eval");
  expectSuccess(eval);
  const auto eval_log = slurp(eval.logs[0]);
  const auto brace = eval_log.rfind('{');
  ASSERT_NE(brace, std::string::npos) << eval_log;
  const auto result = nlohmann::json::parse(eval_log.substr(brace));
  EXPECT_EQ(result.at("clips").get<int64_t>(), 2) << "3 clips requested, the broken item skipped";
  EXPECT_GT(result.at("psnr").get<double>(), 3.0);
  EXPECT_LT(result.at("psnr").get<double>(), 60.0);
  EXPECT_GT(result.at("ssim").get<double>(), -1.0);
  EXPECT_LE(result.at("ssim").get<double>(), 1.0);
  EXPECT_GE(result.at("edge_share").get<double>(), 0.0);
  EXPECT_LT(result.at("edge_share").get<double>(), 3.0);
  fs::remove_all(dir);
}

TEST(Files, TeacherLatentsSwitchToDistillation) {
  TAEHV_REQUIRE_VIDEO_FILES();
  const auto dir = runDir();
  // Two frame folders, each with the teacher latents of its first 4 frames (as the full VAE would give them).
  for (const char* name : {"clipA", "clipB"}) {
    const std::string clip = dir + "/data/" + name;
    fs::create_directories(clip);
    for (int i = 0; i < 6; ++i) {
      const std::string cmd = "ffmpeg -loglevel error -y -f lavfi -i testsrc=size=40x40 -frames:v 1 '" + clip +
                              "/f" + std::to_string(i) + ".png' </dev/null";
      ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    }
    torch::manual_seed(1);
    writeSafetensors(clip + ".latents.safetensors", {{"latents", torch::randn({1, 16, 4, 4})}});
  }
  const std::string out = dir + "/out";
  Job job = launch(1, plus(tiny(out, 2), {"data.source=" + dir + "/data", "train.batch_per_rank=2"}), out);
  expectSuccess(job);
  EXPECT_NE(slurp(job.logs[0]).find("objective distillation"), std::string::npos) << slurp(job.logs[0]);
  EXPECT_EQ(metrics(out).size(), 2u);
  // Asking for distillation without latents is a clear error.
  Job bad = launch(1, plus(tiny(dir + "/bad", 2), {"train.objective=distillation"}), dir + "/bad");
  ASSERT_TRUE(wait(bad, 60));
  EXPECT_EQ(bad.status[0], 2);
  EXPECT_NE(slurp(bad.logs[0]).find("teacher latents"), std::string::npos) << slurp(bad.logs[0]);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace taehv::train
