// Failure detection (dist.cc's heartbeat watcher and abort): a killed, frozen or failing rank stops the others
// within seconds, also at ZeRO stage 2; the watcher's reading of a heartbeat counter (PeerLiveness).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "taehv/train/dist.h"
#include "train_runs.h"

namespace taehv::train {
namespace {
namespace fs = std::filesystem;
using namespace taehv::testing;  // train_runs.h: launch, wait, tiny, ...

/// Runs 2 ranks, kills rank `victim` with SIGKILL once step 2 is logged; the survivor must stop quickly.
void deadRankStopsTheOther(int victim, const std::vector<std::string>& extra = {}) {
  const auto dir = runDir();
  Job job = launch(2, plus(tiny(dir + "/out", 100000), extra), dir + "/out");
  ASSERT_TRUE(waitForStep(dir + "/out", 2, 120)) << slurp(job.logs[0]);
  kill(job.pids[static_cast<size_t>(victim)], SIGKILL);
  const auto t0 = Clock::now();
  ASSERT_TRUE(wait(job, 60)) << "the surviving rank hung";
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const size_t survivor = victim == 0 ? 1 : 0;
  EXPECT_NE(job.status[survivor], 0) << slurp(job.logs[survivor]);
  EXPECT_LT(s, 15) << "the surviving rank took " << s << " s to stop:\n" << slurp(job.logs[survivor]);
  fs::remove_all(dir);
}

TEST(FailFast, KilledRankStopsTheOthersWithinSeconds) {
  deadRankStopsTheOther(1);
  deadRankStopsTheOther(0);  // rank 0 also serves the store
}

// ZeRO's parameter all-gather on Gloo is point-to-point transfers, which only wait() (no polling for an abort):
// the survivor must still stop, from the closed connection or the abort watcher.
TEST(FailFast, KilledRankStopsTheOtherAtZeroStageTwo) {
  deadRankStopsTheOther(1, {"train.zero_stage=2"});
}

// A frozen rank (SIGSTOP) keeps its connections open, so no collective fails and it announces nothing: the rank
// watching its heartbeat must stop the run within seconds, not after dist.timeout_s (600 s here). Rank 0 must end
// by unwinding (its wait abandoned, exit 3), not by the watcher's last-resort exit.
void frozenRankStopsTheOther(const std::vector<std::string>& extra = {}) {
  const auto dir = runDir();
  Job job = launch(2, plus(tiny(dir + "/out", 100000), cat({"dist.timeout_s=600"}, extra)), dir + "/out");
  ASSERT_TRUE(waitForStep(dir + "/out", 2, 120)) << slurp(job.logs[0]);
  kill(job.pids[1], SIGSTOP);
  const auto t0 = Clock::now();
  int st = 0;
  pid_t done = 0;
  while (done == 0 && Clock::now() - t0 < std::chrono::seconds(60)) {
    done = waitpid(job.pids[0], &st, WNOHANG);
    if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  kill(job.pids[1], SIGKILL);
  waitpid(job.pids[1], nullptr, 0);
  if (done == 0) {
    kill(job.pids[0], SIGKILL);
    waitpid(job.pids[0], nullptr, 0);
  }
  const std::string log = slurp(job.logs[0]);
  ASSERT_EQ(done, job.pids[0]) << "rank 0 still waits for the frozen rank 1:\n" << log;
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 3) << "status " << st << ":\n" << log;
  EXPECT_LT(s, 20) << log;
  EXPECT_NE(log.find("rank 1 has sent no heartbeat"), std::string::npos) << log;
  EXPECT_NE(log.find("stopped because another rank failed"), std::string::npos) << log;
  EXPECT_EQ(log.find("without waiting for the stuck collective"), std::string::npos) << log;
  fs::remove_all(dir);
}

TEST(FailFast, FrozenRankIsFoundByItsHeartbeat) { frozenRankStopsTheOther(); }

// Stage 2's reduce-scatter and the parameter all-gather are point-to-point transfers on Gloo, whose wait has no
// abort slice: the watcher must abort them.
TEST(FailFast, FrozenRankIsFoundByItsHeartbeatAtZeroStageTwo) { frozenRankStopsTheOther({"train.zero_stage=2"}); }

TEST(FailFast, RankFailingWithAnErrorStopsTheOthers) {
  const auto dir = runDir();
  // Rank 1 fails after the rendezvous (the checkpoint it is told to resume does not exist; a config that differs
  // between ranks is refused before it, HostileDist below); rank 0 must not wait out a collective timeout.
  Job job = launch(2, plus(tiny(dir + "/out", 100000), {"dist.timeout_s=600"}), dir + "/out",
                   {{}, {"--resume", dir + "/missing"}});
  const auto t0 = Clock::now();
  ASSERT_TRUE(wait(job, 90)) << slurp(job.logs[0]);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 45);
  EXPECT_EQ(job.status[1], 2) << slurp(job.logs[1]);
  EXPECT_NE(slurp(job.logs[1]).find("missing: not a folder"), std::string::npos) << slurp(job.logs[1]);
  EXPECT_NE(job.status[0], 0) << slurp(job.logs[0]);
  fs::remove_all(dir);
}

// Ranks whose configs differ (train.steps 3 and 5 ended in an uncaught Gloo exception, SIGABRT, on one rank) are
// refused at the start, before the process group: every rank exits 2 with the same line naming the keys and each
// rank's value, and nobody hangs. Keys that follow what each node has (train.threads here) may differ.
TEST(HostileDist, RanksWhoseConfigsDifferAllStopWithTheSameLineNamingTheKeys) {
  const auto dir = runDir();
  const auto line = [](const std::string& log) {
    const auto at = log.find("the ranks' configs differ: ");
    return at == std::string::npos ? std::string("(none)") : log.substr(at, log.find('\n', at) - at);
  };
  Job two = launch(2, plus(tiny(dir + "/out", 3), {"dist.timeout_s=600"}), dir + "/two",
                   {{}, {"--set", "train.steps=5"}});
  ASSERT_TRUE(wait(two, 60)) << "a rank hung:\n" << slurp(two.logs[0]) << slurp(two.logs[1]);
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(two.status[r], 2) << slurp(two.logs[r]);
    EXPECT_EQ(line(slurp(two.logs[r])),
              "the ranks' configs differ: train.steps (3 on rank 0, 5 on rank 1); every rank must run the same config: "
              "give every node the same --config file and --set values")
        << slurp(two.logs[r]);
  }
  Job three = launch(3, plus(tiny(dir + "/out", 3), {"dist.timeout_s=600"}), dir + "/three",
                     {{}, {"--set", "data.size=64"}, {"--set", "data.size=64", "--set", "train.lr=0.001"}});
  ASSERT_TRUE(wait(three, 60)) << "a rank hung:\n" << slurp(three.logs[0]);
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(three.status[r], 2) << slurp(three.logs[r]);
    EXPECT_EQ(line(slurp(three.logs[r])), line(slurp(three.logs[0]))) << "rank " << r;
  }
  EXPECT_NE(line(slurp(three.logs[0])).find("data.size (32 on rank 0, 64 on rank "), std::string::npos)
      << line(slurp(three.logs[0]));
  EXPECT_NE(line(slurp(three.logs[0])).find("(2 ranks differ from rank 0)"), std::string::npos)
      << line(slurp(three.logs[0]));
  EXPECT_FALSE(fs::exists(dir + "/out")) << "nothing written";
  Job threads = launch(2, tiny(dir + "/ok", 1), dir + "/threads", {{}, {"--set", "train.threads=2"}});
  expectSuccess(threads, 120);
  fs::remove_all(dir);
}

// The watcher's reading of one peer's heartbeat counter.
TEST(PeerLiveness, StillCounterIsDeadAfterTheSilenceAndAFinishedPeerNever) {
  using namespace std::chrono_literals;
  using taehv::train::PeerLiveness;
  const auto t0 = PeerLiveness::Clock::now();
  PeerLiveness p(t0, 6s);
  EXPECT_FALSE(p.dead(0, t0 + 1s)) << "not seen yet, within the silence since the start";
  EXPECT_FALSE(p.dead(0, t0 + 5s));
  EXPECT_TRUE(p.dead(0, t0 + 7s)) << "never moved for 7 s";
  PeerLiveness q(t0, 6s);
  for (int k = 1; k <= 50; ++k) EXPECT_FALSE(q.dead(k, t0 + k * 1s)) << "moves every second";
  EXPECT_FALSE(q.dead(50, t0 + 55s));
  EXPECT_TRUE(q.dead(50, t0 + 57s)) << "stood still for 7 s after moving";
  PeerLiveness r(t0, 6s);
  EXPECT_FALSE(r.dead(3, t0 + 1s));
  EXPECT_FALSE(r.dead(PeerLiveness::kFinished + 3, t0 + 100s)) << "a peer that finished on purpose is not dead";
  EXPECT_FALSE(r.dead(PeerLiveness::kFinished + 3, t0 + 200s));
}

}  // namespace
}  // namespace taehv::train
