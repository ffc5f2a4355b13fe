// taehv-train's command line and configuration as a user meets them (main.cc, commands.cc, config.cc, run_setup.cc):
// bad input exits 2 with a hint, GPU settings without a GPU, the launcher's variables in the effective config,
// log.phase_times.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "train_runs.h"

namespace taehv::train {
namespace {
namespace fs = std::filesystem;
using namespace taehv::testing;  // train_runs.h: launch, wait, tiny, ...

TEST(TrainCli, BadInputExitsTwoWithAHint) {
  const auto dir = runDir();
  Job a = launch(1, {"--set", "train.setps=3"}, dir + "/a");
  ASSERT_TRUE(wait(a, 30));
  EXPECT_EQ(a.status[0], 2);
  EXPECT_NE(slurp(a.logs[0]).find("did you mean 'train.steps'"), std::string::npos) << slurp(a.logs[0]);
  Job b = launch(1, {"trian"}, dir + "/b");
  ASSERT_TRUE(wait(b, 30));
  EXPECT_EQ(b.status[0], 2);
  EXPECT_NE(slurp(b.logs[0]).find("did you mean 'train'"), std::string::npos) << slurp(b.logs[0]);
  Job c = launch(1, {"--set", "data.frames=6"}, dir + "/c");
  ASSERT_TRUE(wait(c, 30));
  EXPECT_EQ(c.status[0], 2);
  EXPECT_NE(slurp(c.logs[0]).find("multiple of 4"), std::string::npos) << slurp(c.logs[0]);
  Job d = launch(1, {"--print-config"}, dir + "/d", {}, {"TAEHV_DEVICE=gpu0"});
  ASSERT_TRUE(wait(d, 30));
  EXPECT_EQ(d.status[0], 2);
  EXPECT_NE(slurp(d.logs[0]).find("TAEHV_DEVICE='gpu0'"), std::string::npos) << slurp(d.logs[0]);
  fs::remove_all(dir);
}

// A GPU setting on a machine (or build) without one is a configuration error: exit 2 at once, before the
// rendezvous (rank 0 of 2 alone: a rendezvous would wait for rank 1 until the dist timeout).
TEST(TrainCli, GpuSettingsWithoutAGpuExitTwoBeforeTheRendezvous) {
  // With a GPU both settings are valid, and rank 0 waits at the rendezvous for rank 1 (seen on an H100: 30 s, then
  // this test failed): the refusal is what a machine without one must do.
  if (torch::cuda::is_available()) GTEST_SKIP() << "this machine has a GPU: train.device=cuda is valid here";
  const auto dir = runDir();
  const std::vector<std::string> base{"--set", "train.steps=1", "--set", "dist.timeout_s=120",
                                      "--set", "output.dir=" + dir + "/out"};
  std::vector<std::string> cuda = base;
  cuda.insert(cuda.end(), {"--set", "train.device=cuda"});
  std::vector<std::string> nccl = base;
  nccl.insert(nccl.end(), {"--set", "train.device=cpu", "--set", "dist.backend=nccl"});
  for (const auto& [args, expected] : {std::pair{cuda, std::string("train.device=cuda")},
                                       std::pair{nccl, std::string("dist.backend nccl")}}) {
    Job job = launch(2, args, dir + "/j", {{}, {"--no-such-option-so-rank-1-exits-at-once"}});
    // Rank 1 exits at once (unknown option), so rank 0 is alone: only a refusal before the rendezvous ends it soon.
    ASSERT_TRUE(wait(job, 30)) << slurp(job.logs[0]);
    EXPECT_EQ(job.status[0], 2) << slurp(job.logs[0]);
    EXPECT_NE(slurp(job.logs[0]).find(expected), std::string::npos) << slurp(job.logs[0]);
  }
  fs::remove_all(dir);
}

// The launcher's per-worker variables reach the process: the effective config the trainer prints (and
// uses) takes the collective timeout and device from them unless the config sets them.
TEST(TrainCli, LauncherTimeoutAndDeviceReachTheEffectiveConfig) {
  const auto dir = runDir();
  const std::vector<std::string> launcher_env{"TAEHV_COLLECTIVE_TIMEOUT_S=4321", "TAEHV_DEVICE=cpu"};
  Job a = launch(1, {"--print-config"}, dir + "/a", {}, launcher_env);
  ASSERT_TRUE(wait(a, 30));
  EXPECT_EQ(a.status[0], 0) << slurp(a.logs[0]);
  EXPECT_NE(slurp(a.logs[0]).find("timeout_s: 4321  # from TAEHV_COLLECTIVE_TIMEOUT_S"), std::string::npos)
      << slurp(a.logs[0]);
  EXPECT_NE(slurp(a.logs[0]).find("device: \"cpu\"  # from TAEHV_DEVICE"), std::string::npos) << slurp(a.logs[0]);
  Job b = launch(1, {"--print-config", "--set", "dist.timeout_s=55"}, dir + "/b", {}, launcher_env);
  ASSERT_TRUE(wait(b, 30));
  EXPECT_EQ(b.status[0], 0) << slurp(b.logs[0]);
  EXPECT_NE(slurp(b.logs[0]).find("timeout_s: 55  # 0 (auto) or [1, 604800] (seconds)\n"), std::string::npos)
      << slurp(b.logs[0]);
  fs::remove_all(dir);
}


// --print-config shows each numeric key's range beside its value, the range set() checks it against.
// Issue 40: log.phase_times puts each phase's wall and CPU seconds in metrics.jsonl, and changes no loss; off (the
// default), the rows carry no phase keys.
TEST(TrainCli, PhaseTimesSplitTheStepWithoutChangingTheLosses) {
  const std::string dir = runDir() + "/phase_times";
  fs::remove_all(dir);
  const std::vector<std::string> ema{"train.ema=0.9"};
  Job off = launch(2, plus(tiny(dir + "/off", 3), ema), dir + "/off");
  expectSuccess(off);
  Job on = launch(2, plus(tiny(dir + "/on", 3), {"train.ema=0.9", "log.phase_times=true"}), dir + "/on");
  expectSuccess(on);
  const auto rows_off = metrics(dir + "/off"), rows_on = metrics(dir + "/on");
  ASSERT_EQ(rows_on.size(), 3u);
  ASSERT_EQ(rows_off.size(), 3u);
  const std::vector<std::string> phases{"data", "forward", "backward", "stats", "exchange",
                                        "clip", "update", "ema", "agree", "log"};
  for (size_t i = 0; i < rows_on.size(); ++i) {
    EXPECT_EQ(rows_on[i]["loss"], rows_off[i]["loss"]) << "step " << rows_on[i]["step"];
    EXPECT_FALSE(rows_off[i].contains("phase_forward_s"));
    double in_step = 0;  // every phase but log (the previous step's log line, booked to this row)
    for (const auto& p : phases) {
      ASSERT_TRUE(rows_on[i].contains("phase_" + p + "_s")) << p;
      ASSERT_TRUE(rows_on[i].contains("phase_" + p + "_cpu_s")) << p;
      EXPECT_GE(rows_on[i]["phase_" + p + "_s"].get<double>(), 0) << p;
      if (p != "log") in_step += rows_on[i]["phase_" + p + "_s"].get<double>();
    }
    EXPECT_GT(rows_on[i]["phase_forward_s"].get<double>(), 0);
    EXPECT_GT(rows_on[i]["phase_backward_cpu_s"].get<double>(), 0);
    // the phases are the step: their sum is step_s less the few clock reads outside them
    const double step_s = rows_on[i]["step_s"].get<double>();
    EXPECT_LE(in_step, step_s * 1.001);
    EXPECT_GE(in_step, step_s * 0.95);
  }
}

TEST(TrainCli, PrintConfigShowsEachNumbersRange) {
  const auto dir = runDir();
  Job a = launch(1, {"--print-config"}, dir + "/a");
  ASSERT_TRUE(wait(a, 30));
  EXPECT_EQ(a.status[0], 0) << slurp(a.logs[0]);
  for (const char* line : {"  steps: 300  # [1, 1000000000]\n", "  threads: 0  # 0 (auto) or [1, 1024]\n",
                           "  lr: 0.0003  # (0, 1]\n", "  prefetch: 4  # [1, 64] (batches decoded ahead",
                           "  size: 0  # 0 (= data.size) or [8, 8192]\n", "  variant: \"taehv\"\n"}) {
    EXPECT_NE(slurp(a.logs[0]).find(line), std::string::npos) << line << " not in:\n" << slurp(a.logs[0]);
  }
  fs::remove_all(dir);
}

// Hostile config files end in one line and exit 2, in training, eval and --print-config alike (issue 38: a key that
// is a list aborted all three, nested aliases of mappings ran for ever, a second YAML document was ignored).
TEST(HostileTrainCli, HostileConfigFilesExitTwoWithOneLine) {
  const auto dir = runDir();
  std::string aliases = "a0: &a0 {x: 1}\n";
  for (int i = 1; i < 20; ++i) {
    const std::string p = "*a" + std::to_string(i - 1);
    aliases += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " {a: " + p + ", b: " + p + ", c: " + p +
               ", d: " + p + "}\n";
  }
  const std::vector<std::pair<std::string, std::string>> files = {
      {"train:\n  ? [a, b]\n  : 1\n", "line 2: a key that is a list is not a plain name"},
      {aliases, "unknown config key 'a0.x'"},
      {"---\n# settings\n---\ntrain:\n  steps: 1\n", "holds 2 YAML documents"},
      {"train: 5\n", "'train' is a section, not a value"},
  };
  int n = 0;
  for (const auto& [text, expected] : files) {
    const std::string file = dir + "/c" + std::to_string(n++) + ".yaml";
    std::ofstream(file) << text;
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"--config", file, "--print-config"},
          {"--config", file, "--set", "output.dir=" + dir + "/out"},
          {"eval", "--checkpoint", "latest", "--config", file}}) {
      Job job = launch(1, args, dir + "/run");
      ASSERT_TRUE(wait(job, 30)) << file << " did not end";
      const std::string log = slurp(job.logs[0]);
      EXPECT_EQ(job.status[0], 2) << log;
      EXPECT_NE(log.find("error: " + file + ": "), std::string::npos) << log;
      EXPECT_NE(log.find(expected), std::string::npos) << log;
      EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << "one line:\n" << log;
    }
  }
  EXPECT_FALSE(fs::exists(dir + "/out"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace taehv::train
