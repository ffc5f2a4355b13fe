// taehv-train's command line and configuration as a user meets them (main.cc, commands.cc, config.cc, run_setup.cc):
// bad input exits 2 with a hint, GPU settings without a GPU, the launcher's variables in the effective config.
#include <gtest/gtest.h>

#include <filesystem>
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
  EXPECT_NE(slurp(b.logs[0]).find("timeout_s: 55\n"), std::string::npos) << slurp(b.logs[0]);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace taehv::train
