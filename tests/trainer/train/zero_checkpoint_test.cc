// Sharded ZeRO checkpoints (zero_checkpoint.cc, issue 39): stages 1-2 save one optimizer shard per rank and no
// optimizer.pt; they resume at other world sizes and stages like the full format, which still loads; a missing or
// damaged shard is refused naming it; `taehv-train checkpoint consolidate|info`.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "adam_state.h"
#include "taehv/model/safetensors.h"
#include "taehv/train/checkpoint.h"
#include "taehv/train/events.h"
#include "train_runs.h"
#include "zero_checkpoint.h"

namespace taehv::train {
namespace {
namespace fs = std::filesystem;
using namespace taehv::testing;  // train_runs.h, adam_state.h

/// The options of a `world`-rank run of `steps` steps into `out` at ZeRO `stage`: global batch 6 at any world size.
std::vector<std::string> zeroRun(const std::string& out, int64_t steps, int world, int stage) {
  return plus(tiny(out, steps), cat(kAdam, {"train.batch_per_rank=" + std::to_string(6 / world),
                                            "train.zero_stage=" + std::to_string(stage)}));
}

/// `taehv-train ARGS...` run alone: its exit status, its output in `*output`.
int trainerCommand(const std::vector<std::string>& args, const std::string& log, std::string* output) {
  Job job = launch(1, args, log);
  EXPECT_TRUE(wait(job, 120));
  *output = slurp(job.logs[0]);
  return job.status[0];
}

std::vector<std::string> listing(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Saved at 2 ranks at stage 0 (the full format, what earlier versions wrote), 1 and 2, stopped at step 3, resumed
// at 1, 2 and 3 ranks and every stage, the global batch kept at 6 clips: each must end like the uninterrupted 2-rank
// stage-1 run. At 2 ranks stages 1 and 2 sum and clip alike, so a resume at the same world size is bitwise.
TEST(ZeroCheckpoint, ShardedSavesResumeAtOtherWorldSizesAndStagesAndTheFullFormatStillLoads) {
  const auto dir = runDir();
  const int64_t steps = 6;
  Job straight = launch(2, zeroRun(dir + "/straight", steps, 2, 1), dir + "/straight");
  expectSuccess(straight);
  const std::vector<std::pair<int, std::vector<std::pair<int, int>>>> plan = {
      {0, {{3, 2}}}, {1, {{2, 1}, {3, 2}}}, {2, {{2, 2}, {1, 0}}}};  // and Zero.StageOne...: 1 -> 3x1, 1 -> 1x0
  for (const auto& [saved_stage, targets] : plan) {
    const std::string saved = dir + "/saved" + std::to_string(saved_stage);
    Job first = launch(2, zeroRun(saved, steps, 2, saved_stage), saved, {{"--stop-at-step", "3"}, {"--stop-at-step", "3"}});
    expectSuccess(first);
    const std::string folder = saved + "/checkpoint-3";
    if (saved_stage == 0) {
      ASSERT_TRUE(fs::exists(folder + "/optimizer.pt"));
      ASSERT_FALSE(fs::exists(folder + "/" + kZeroLayoutFile));
    } else {
      // No gathered copy was written: the moments are in one file per rank only.
      EXPECT_FALSE(fs::exists(folder + "/optimizer.pt")) << "stage " << saved_stage << " saved the full state";
      for (int r = 0; r < 2; ++r) EXPECT_TRUE(fs::exists(folder + "/" + zeroShardFileName(r, 2)));
      EXPECT_EQ(nlohmann::json::parse(slurp(folder + "/" + kZeroLayoutFile)).at("stage"), saved_stage);
    }
    for (const auto& [world, stage] : targets) {
      const std::string out = dir + "/s" + std::to_string(saved_stage) + "to" + std::to_string(world) + "x" +
                              std::to_string(stage);
      fs::copy(saved, out, fs::copy_options::recursive);
      Job resumed = launch(world, cat(zeroRun(out, steps, world, stage), {"--resume", "latest"}), out);
      expectSuccess(resumed);
      EXPECT_NE(slurp(resumed.logs[0]).find("resumed from " + out + "/checkpoint-3"), std::string::npos);
      const std::string what = "2 ranks stage " + std::to_string(saved_stage) + " -> " + std::to_string(world) +
                               " ranks stage " + std::to_string(stage);
      // A resume that dropped the moments (or the step count) ends far off: m alone would be off by beta1^3 ~ 0.73.
      expectSameTraining(dir + "/straight", out, steps, 1e-3, what);
      if (world == 2 && saved_stage > 0) {
        const std::string last = "/checkpoint-" + std::to_string(steps);
        EXPECT_TRUE(bitwiseEqual(loadTensors(dir + "/straight" + last + "/model.pt"), loadTensors(out + last + "/model.pt")))
            << what;
        const auto a = loadAdamState(dir + "/straight" + last), b = loadAdamState(out + last);
        EXPECT_TRUE(bitwiseEqual(a.exp_avg, b.exp_avg) && bitwiseEqual(a.exp_avg_sq, b.exp_avg_sq)) << what;
      }
    }
  }
  fs::remove_all(dir);
}

// SIGTERM (what taehv-run forwards on preemption) at stage 2: the save on the way out is sharded, and the resume
// ends bitwise where the uninterrupted run ends.
TEST(ZeroCheckpoint, SigtermAtStageTwoSavesShardsAndTheResumeIsBitwiseAStraightRun) {
  const auto dir = runDir();
  const int64_t steps = 8;
  Job straight = launch(2, zeroRun(dir + "/straight", steps, 2, 2), dir + "/straight");
  expectSuccess(straight);
  Job run = launch(2, zeroRun(dir + "/term", steps, 2, 2), dir + "/term");
  ASSERT_TRUE(waitForStep(dir + "/term", 2, 120)) << slurp(run.logs[0]);
  for (pid_t pid : run.pids) kill(pid, SIGTERM);
  expectSuccess(run, 30);
  const auto saved = metrics(dir + "/term");
  ASSERT_FALSE(saved.empty());
  const int64_t stopped_at = saved.back().at("step").get<int64_t>();
  ASSERT_LT(stopped_at, steps) << "the run finished before SIGTERM arrived; nothing was tested";
  const std::string folder = dir + "/term/checkpoint-" + std::to_string(stopped_at);
  EXPECT_TRUE(fs::exists(folder + "/" + zeroShardFileName(1, 2)));
  EXPECT_FALSE(fs::exists(folder + "/optimizer.pt"));
  Job rest = launch(2, cat(zeroRun(dir + "/term", steps, 2, 2), {"--resume", "latest"}), dir + "/term");
  expectSuccess(rest);
  const std::string last = "/checkpoint-" + std::to_string(steps);
  EXPECT_TRUE(bitwiseEqual(loadTensors(dir + "/straight" + last + "/model.pt"), loadTensors(dir + "/term" + last + "/model.pt")));
  const auto a = loadAdamState(dir + "/straight" + last), b = loadAdamState(dir + "/term" + last);
  EXPECT_TRUE(bitwiseEqual(a.exp_avg, b.exp_avg) && bitwiseEqual(a.exp_avg_sq, b.exp_avg_sq));
  fs::remove_all(dir);
}

// consolidate writes the full single-file state (what the shards hold, bit for bit; what stage 0 would have saved,
// to the tolerance of stage 1 against stage 0), in another folder or in place; info prints either layout.
TEST(ZeroCheckpoint, ConsolidateWritesTheFullStateAndInfoPrintsTheLayout) {
  const auto dir = runDir();
  for (int stage : {0, 2}) {
    Job job = launch(2, zeroRun(dir + "/s" + std::to_string(stage), 3, 2, stage), dir + "/s" + std::to_string(stage));
    expectSuccess(job);
  }
  const std::string sharded = dir + "/s2/checkpoint-3";
  std::string out;
  ASSERT_EQ(trainerCommand({"checkpoint", "info", sharded}, dir + "/info", &out), 0) << out;
  EXPECT_NE(out.find("optimizer: sharded, written by 2 rank(s) at ZeRO stage 2; AdamW step 3"), std::string::npos) << out;
  EXPECT_NE(out.find(zeroShardFileName(0, 2) + ": rank 0, elements [0, "), std::string::npos) << out;
  EXPECT_NE(out.find(zeroShardFileName(1, 2) + ": rank 1, elements ["), std::string::npos) << out;
  ASSERT_EQ(trainerCommand({"checkpoint", "info", dir + "/s0/checkpoint-3"}, dir + "/info0", &out), 0) << out;
  EXPECT_NE(out.find("optimizer: full format"), std::string::npos) << out;

  ASSERT_EQ(trainerCommand({"checkpoint", "consolidate", sharded, "--out", dir + "/full"}, dir + "/cons", &out), 0) << out;
  const std::string full = dir + "/full/checkpoint-3";
  ASSERT_TRUE(fs::exists(full + "/optimizer.pt")) << out;
  EXPECT_FALSE(fs::exists(full + "/" + kZeroLayoutFile));
  std::string why;
  EXPECT_TRUE(verifyCheckpoint(full, &why)) << why;
  const auto from_shards = loadAdamState(sharded), consolidated = loadAdamState(full);
  EXPECT_EQ(consolidated.step, 3);
  EXPECT_EQ(consolidated.exp_avg.size(), from_shards.exp_avg.size());
  EXPECT_TRUE(bitwiseEqual(from_shards.exp_avg, consolidated.exp_avg));
  EXPECT_TRUE(bitwiseEqual(from_shards.exp_avg_sq, consolidated.exp_avg_sq));
  EXPECT_TRUE(bitwiseEqual(loadTensors(sharded + "/model.pt"), loadTensors(full + "/model.pt")));
  // Against the full state stage 0 saved itself (3 steps: no clipping, so stage 2 at 2 ranks is bitwise stage 0).
  const auto stage0 = loadAdamState(dir + "/s0/checkpoint-3");
  EXPECT_TRUE(bitwiseEqual(stage0.exp_avg, consolidated.exp_avg));
  EXPECT_TRUE(bitwiseEqual(stage0.exp_avg_sq, consolidated.exp_avg_sq));

  // In place (no --out): the sharded folder becomes the full one.
  ASSERT_EQ(trainerCommand({"checkpoint", "consolidate", sharded}, dir + "/inplace", &out), 0) << out;
  EXPECT_TRUE(fs::exists(sharded + "/optimizer.pt"));
  EXPECT_FALSE(fs::exists(sharded + "/" + zeroShardFileName(0, 2)));
  EXPECT_TRUE(bitwiseEqual(loadAdamState(sharded).exp_avg, from_shards.exp_avg));

  EXPECT_EQ(trainerCommand({"checkpoint", "info"}, dir + "/usage1", &out), 2) << out;
  EXPECT_EQ(trainerCommand({"checkpoint", "frob", sharded}, dir + "/usage2", &out), 2) << out;
  EXPECT_NE(out.find("unknown checkpoint action 'frob'"), std::string::npos) << out;
  fs::remove_all(dir);
}

/// Rewrites `dir`/manifest.json's entry of `file` to the file's present size and CRC (a damaged file the manifest
/// no longer catches: the loader's own checks must).
void reseal(const std::string& dir, const std::string& file) {
  const std::string bytes = slurp(dir + "/" + file);
  auto manifest = nlohmann::json::parse(slurp(dir + "/manifest.json"));
  manifest["files"][file] = {{"size", bytes.size()}, {"crc32c", crc32c(bytes.data(), bytes.size())}};
  std::ofstream(dir + "/manifest.json") << manifest.dump(1) << "\n";
}

// A shard missing, failing its checksum, or of the wrong size behind a matching manifest: the resume stops with
// status 2 and a line naming the file, and the output folder is left as it was.
TEST(ZeroCheckpoint, AMissingOrDamagedShardIsRefusedNamingItAndNothingIsWritten) {
  const auto dir = runDir();
  Job job = launch(2, zeroRun(dir + "/base", 2, 2, 1), dir + "/base");
  expectSuccess(job);
  struct Damage {
    std::string file, expected;
    std::function<void(const std::string& folder)> apply;
  };
  const std::vector<Damage> damages = {
      {zeroShardFileName(1, 2), "", [](const std::string& f) { fs::remove(f + "/" + zeroShardFileName(1, 2)); }},
      {zeroShardFileName(0, 2), "fails its checksum",
       [](const std::string& f) {
         std::fstream s(f + "/" + zeroShardFileName(0, 2), std::ios::in | std::ios::out | std::ios::binary);
         s.seekp(4096);
         s.put('\x7f');
       }},
      {zeroShardFileName(1, 2), "has no F32 tensor 'exp_avg' of",
       [](const std::string& f) {
         writeSafetensors(f + "/" + zeroShardFileName(1, 2),
                          {{"exp_avg", torch::zeros({10})}, {"exp_avg_sq", torch::zeros({10})}});
         reseal(f, zeroShardFileName(1, 2));
       }},
  };
  int i = 0;
  for (const auto& damage : damages) {
    const std::string out = dir + "/d" + std::to_string(i++);
    fs::copy(dir + "/base", out, fs::copy_options::recursive);
    damage.apply(out + "/checkpoint-2");
    const auto before = listing(out);
    Job resumed = launch(2, cat(zeroRun(out, 4, 2, 1), {"--resume", out + "/checkpoint-2"}), out);
    ASSERT_TRUE(wait(resumed, 120));
    // The rank that read the damaged file says so (the other may have read only its own, intact shard, and stops
    // because its peer failed).
    bool named = false;
    for (size_t r = 0; r < resumed.logs.size(); ++r) {
      const std::string log = slurp(resumed.logs[r]);
      EXPECT_NE(resumed.status[r], 0) << log;
      EXPECT_EQ(log.find("terminate"), std::string::npos) << log;
      if (resumed.status[r] == 2 && log.find(damage.file) != std::string::npos &&
          log.find(damage.expected) != std::string::npos) {
        named = true;
      }
    }
    EXPECT_TRUE(named) << damage.file << " " << damage.expected << ":\n" << slurp(resumed.logs[0]) << slurp(resumed.logs[1]);
    EXPECT_EQ(listing(out), before) << "a refused resume changed " << out;
  }
  fs::remove_all(dir);
}

// optimizer_layout.json is read from disk: a layout whose shards or parameters do not tile [0, N), or which names a
// path, is one CheckpointError naming the file.
TEST(ZeroCheckpoint, AHostileLayoutIsOneErrorNamingTheFile) {
  // 2 ranks, stage 1, 10 elements, AdamW step 1; parameters a and b; no buckets; two shards of 5.
  const ZeroLayout layout{2, 1, 10, 1, {{"a", 0, 4}, {"b", 4, 6}}, {},
                          {{zeroShardFileName(0, 2), 0, 5}, {zeroShardFileName(1, 2), 5, 10}}};
  const std::string good = formatZeroLayout(layout);
  EXPECT_EQ(parseZeroLayout(good, "L").shards.size(), 2u);
  const auto refused = [](const std::string& text) {
    try {
      parseZeroLayout(text, "/x/optimizer_layout.json");
    } catch (const CheckpointError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  auto edit = [&](const std::function<void(nlohmann::json&)>& change) {
    auto json = nlohmann::json::parse(good);
    change(json);
    return refused(json.dump());
  };
  for (const std::string& why : {
           refused("{"), refused("[]"),
           edit([](auto& j) { j["format"] = "other"; }),
           edit([](auto& j) { j["shards"][1]["begin"] = 6; }),
           edit([](auto& j) { j["shards"][1]["end"] = 11; }),
           edit([](auto& j) { j["shards"][0]["file"] = "../../etc/passwd"; }),
           edit([](auto& j) { j["shards"].erase(1); }),
           edit([](auto& j) { j["params"][1]["numel"] = 5; }),
           edit([](auto& j) { j["world_size"] = -1; }),
           edit([](auto& j) { j["numel"] = "ten"; }),
       }) {
    EXPECT_EQ(why.rfind("/x/optimizer_layout.json: ", 0), 0u) << why;
    EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  }
}

}  // namespace
}  // namespace taehv::train
