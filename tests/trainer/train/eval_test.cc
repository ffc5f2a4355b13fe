// Evaluation (evaluation.cc, eval_clips.cc): the held-out eval during training and taehv-train eval.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "train_runs.h"

namespace taehv::train {
namespace {
namespace fs = std::filesystem;
using namespace taehv::testing;  // train_runs.h: launch, wait, tiny, ...

// eval.every: both ranks evaluate their share of the held-out clips (3 clips: 2 on rank 0, 1 on rank 1) at the
// eval size with the EMA weights, rank 0 logs the mean; the evaluation leaves the training itself untouched.
TEST(Eval, HeldOutEvalDuringTrainingIsLoggedAndLeavesTrainingUnchanged) {
  const auto dir = runDir();
  const std::vector<std::string> adam = {"train.ema=0.9", "checkpoint.every=100", "train.warmup_steps=2"};
  Job plain = launch(2, plus(tiny(dir + "/plain", 4), adam), dir + "/plain");
  expectSuccess(plain);
  Job evald = launch(2,
                     plus(tiny(dir + "/eval", 4), cat(adam, {"eval.every=2", "eval.clips=3", "eval.size=48",
                                                             "eval.frames=8", "log.preview_every=4"})),
                     dir + "/eval");
  expectSuccess(evald);
  std::vector<nlohmann::json> evals;
  for (const auto& row : metrics(dir + "/eval")) {
    if (row.contains("eval_psnr")) evals.push_back(row);
  }
  ASSERT_EQ(evals.size(), 2u) << "steps 2 and 4";
  EXPECT_EQ(evals[0].at("step").get<int64_t>(), 2);
  EXPECT_EQ(evals[1].at("step").get<int64_t>(), 4);
  for (const auto& e : evals) {
    EXPECT_EQ(e.at("eval_clips").get<int64_t>(), 3) << "both ranks' shares";
    EXPECT_TRUE(e.at("eval_held_out").get<bool>());
    EXPECT_TRUE(e.at("eval_ema").get<bool>());
    EXPECT_GT(e.at("eval_psnr").get<double>(), 3.0);
    EXPECT_LT(e.at("eval_psnr").get<double>(), 60.0);
    EXPECT_GT(e.at("eval_ssim").get<double>(), -1.0);
    EXPECT_LE(e.at("eval_ssim").get<double>(), 1.0);
    EXPECT_GE(e.at("eval_edge_share").get<double>(), 0.0);
    EXPECT_LT(e.at("eval_edge_share").get<double>(), 3.0);
  }
  const auto log = slurp(evald.logs[0]);
  EXPECT_NE(log.find("step 4/4 | held-out PSNR"), std::string::npos) << log;
  EXPECT_NE(log.find(" | edge share "), std::string::npos) << log;
  EXPECT_NE(log.find("3 clips 8x48"), std::string::npos) << log;
  EXPECT_TRUE(fs::exists(dir + "/eval/previews/eval-step-0000004.png"));
  for (const char* file : {"model.pt", "ema.pt"}) {
    EXPECT_TRUE(bitwiseEqual(loadTensors(dir + "/plain/checkpoint-4/" + file),
                             loadTensors(dir + "/eval/checkpoint-4/" + file)))
        << file << ": the evaluation changed the training";
  }
  // taehv-train eval on the same checkpoint and clips gives the same figure as the last in-training eval.
  Job offline = launch(1, plus({"eval", "--checkpoint", "latest"},
                               {"output.dir=" + dir + "/eval", "data.size=32", "data.frames=4", "train.seed=3",
                                "eval.clips=3", "eval.size=48", "eval.frames=8", "train.threads=1"}),
                       dir + "/offline");
  expectSuccess(offline);
  const auto out = slurp(offline.logs[0]);
  const auto result = nlohmann::json::parse(out.substr(out.rfind('{')));
  EXPECT_TRUE(result.at("held_out").get<bool>());
  EXPECT_NEAR(result.at("psnr").get<double>(), evals[1].at("eval_psnr").get<double>(), 1e-3) << out;
  fs::remove_all(dir);
}

// Issue 38, defect 11: `eval --checkpoint` blocked for ever on a FIFO: a FIFO named as the weights file, and a FIFO
// model.pt in a checkpoint folder whose manifest does not list it (libtorch opened it by name). Each is now one line
// and a non-zero exit at once.
TEST(HostileEvalFiles, AFifoAsTheCheckpointIsOneLineAtOnce) {
  const auto dir = runDir();
  const std::string weights = dir + "/taehv.safetensors";
  ASSERT_EQ(::mkfifo(weights.c_str(), 0600), 0);
  const std::string folder = dir + "/out/checkpoint-5";
  fs::create_directories(folder);
  std::ofstream(folder + "/manifest.json") << "{\"step\": 5, \"files\": {}}\n";
  std::ofstream(folder + "/state.json") << "{\"step\": 5, \"samples_consumed\": 5}\n";
  ASSERT_EQ(::mkfifo((folder + "/model.pt").c_str(), 0600), 0);
  struct Case {
    std::string checkpoint;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{{weights, weights + ": a FIFO (named pipe), not a regular file"},
                                         {folder, folder + "/model.pt: a FIFO (named pipe), not a regular file"}}) {
    Job job = launch(1, {"eval", "--checkpoint", c.checkpoint, "--set", "train.threads=1", "--set",
                         "output.dir=" + dir + "/out"},
                     dir + "/eval");
    ASSERT_TRUE(wait(job, 30)) << "eval waited on the FIFO; log:\n" << slurp(job.logs[0]);
    EXPECT_NE(job.status[0], 0);
    EXPECT_NE(slurp(job.logs[0]).find(c.says), std::string::npos) << slurp(job.logs[0]);
  }
}

}  // namespace
}  // namespace taehv::train
