// The progress summary the node group carries with its heartbeats, and the straggler and spread judgements made on
// it (progress_summary.h), with the figures of real runs: busy times of a 2-rank Gloo job where rank 0 slept 0.3 s
// per step (0.41 s against 0.11 s), and of 8 ranks over 2 nodes.
#include "taehv/group/progress_summary.h"

#include <gtest/gtest.h>

namespace taehv::group {
namespace {

RankSummary rankAt(int rank, int node, std::int64_t step, const std::string& section, double age_s = 0.2,
                   double busy_s = 0.1, int steps = 20, double view_age_s = 0.0) {
  RankSummary r;
  r.rank = rank;
  r.node = node;
  r.step = step;
  r.section = section;
  r.last_step_s = 0.25;
  r.age_s = age_s;
  r.busy_s = busy_s;
  r.busy_steps = steps;
  r.view_age_s = view_age_s;
  return r;
}

TEST(ProgressSummary, RoundTripsInMillisecondsAndStaysWithinItsBound) {
  const std::vector<RankSummary> ranks = {rankAt(0, 0, 12, "exchange", 0.0304, 0.1234, 20, 0.0304),
                                          rankAt(1, 3, 11, "data", 61.5, 0, 0, 2.25), rankAt(2, 3, 0, "", 1.0, 0, 0)};
  const std::string text = encodeSummary(ranks);
  EXPECT_EQ(text, "P2 0,0,12,exchange,250,30,123,20,30;1,3,11,data,250,61500,0,0,2250;2,3,0,,250,1000,0,0,0;");
  const Checked<std::vector<RankSummary>> back = decodeSummary(text);
  ASSERT_TRUE(back.ok()) << back.error;
  ASSERT_EQ(back.value.size(), 3u);
  EXPECT_EQ(back.value[1].rank, 1);
  EXPECT_EQ(back.value[1].node, 3);
  EXPECT_EQ(back.value[1].step, 11);
  EXPECT_EQ(back.value[1].section, "data");
  EXPECT_DOUBLE_EQ(back.value[1].age_s, 61.5);
  EXPECT_DOUBLE_EQ(back.value[1].view_age_s, 2.25);
  EXPECT_DOUBLE_EQ(back.value[0].busy_s, 0.123);
  EXPECT_EQ(back.value[0].busy_steps, 20);
  EXPECT_TRUE(decodeSummary("").ok()) << "a heartbeat without progress (an older node) is an empty summary";
  // 1000 ranks: whole entries up to kMaxSummaryBytes, the rest left out.
  std::vector<RankSummary> many;
  for (int r = 0; r < 1000; ++r) many.push_back(rankAt(r, r / 8, 123456, "forward_backward", 1.5, 0.5));
  const std::string cut = encodeSummary(many);
  EXPECT_LE(cut.size(), kMaxSummaryBytes);
  EXPECT_GT(cut.size(), kMaxSummaryBytes - 60);
  const Checked<std::vector<RankSummary>> kept = decodeSummary(cut);
  ASSERT_TRUE(kept.ok()) << kept.error;
  EXPECT_EQ(kept.value.size(), 32u) << "46-byte entries in 1536 bytes";
}

TEST(ProgressSummary, AgedSinceGrowsASilenceAndTheViewsAgeAlike) {
  const auto at = std::chrono::steady_clock::time_point{} + std::chrono::seconds(100);
  const std::vector<RankSummary> aged =
      agedSince({rankAt(0, 0, 5, "data", 1.5, 0.1, 20, 0.25)}, at, at + std::chrono::seconds(2));
  ASSERT_EQ(aged.size(), 1u);
  EXPECT_DOUBLE_EQ(aged[0].age_s, 3.5);
  EXPECT_DOUBLE_EQ(aged[0].view_age_s, 2.25);
  EXPECT_EQ(aged[0].step, 5);
}

TEST(ProgressSummary, AnythingElseIsRefused) {
  for (const std::string& bad :
       {std::string("garbage"), std::string("P2 0,0,1,data,1,1,1,1,1"), std::string("P2 0,0,1,data,1,1,1,1;"),
        std::string("P2 0,0,-1,data,1,1,1,1,1;"), std::string("P2 0,0,1,Data,1,1,1,1,1;"),
        std::string("P2 0,0,1,data,1,1,1,1,1,9;"), std::string("P2 99999999999,0,1,data,1,1,1,1,1;"),
        std::string("P2 0,0,1,data,1,1,1,1,-1;"), std::string("P3 0,0,1,data,1,1,1,1,1;"),
        // The summary before view_ms, from a node of an older version: ignored as that node ignores this one's.
        std::string("P1 0,0,1,data,1,1,1,1;"), "P2 " + std::string(2000, '1')}) {
    EXPECT_FALSE(decodeSummary(bad).ok()) << bad;
  }
}

TEST(Stragglers, OneSlowRankOfTwoIsNamedWithItsFigures) {
  // Measured: rank 0 slept 0.3 s in every step's forward_backward, rank 1 waited for it in the exchange.
  const std::vector<Straggler> s = findStragglers({{0, 0.412, 20}, {1, 0.108, 20}});
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].id, 0);
  EXPECT_DOUBLE_EQ(s[0].others_median_s, 0.108);
  EXPECT_NEAR(s[0].ratio, 3.81, 0.01);
  EXPECT_EQ(s[0].steps, 20);
}

TEST(Stragglers, JitterIsNoStragglerAndTheFactorIsTheLine) {
  // 8 ranks within 12 % of each other: none.
  EXPECT_TRUE(findStragglers({{0, 0.201, 20}, {1, 0.195, 20}, {2, 0.210, 20}, {3, 0.188, 20}, {4, 0.199, 20},
                              {5, 0.205, 20}, {6, 0.192, 20}, {7, 0.211, 20}})
                  .empty());
  // Others' median 0.2 s: 0.29 s (1.45x) is not a straggler, 0.31 s (1.55x) is.
  EXPECT_TRUE(findStragglers({{0, 0.29, 20}, {1, 0.2, 20}, {2, 0.2, 20}}).empty());
  const std::vector<Straggler> s = findStragglers({{0, 0.31, 20}, {1, 0.2, 20}, {2, 0.2, 20}});
  ASSERT_EQ(s.size(), 1u);
  EXPECT_NEAR(s[0].ratio, 1.55, 1e-9);
  // A fast rank is not a straggler, whatever its ratio.
  EXPECT_TRUE(findStragglers({{0, 0.05, 20}, {1, 0.2, 20}, {2, 0.2, 20}}).empty());
}

TEST(Stragglers, TooFewStepsOrNoneToCompareWithIsNoVerdict) {
  EXPECT_TRUE(findStragglers({{0, 0.9, 9}, {1, 0.1, 20}}).empty()) << "9 steps < kStragglerMinSteps";
  EXPECT_TRUE(findStragglers({{0, 0.9, 20}, {1, 0.1, 9}}).empty()) << "nobody to compare with";
  EXPECT_TRUE(findStragglers({{0, 0.9, 20}}).empty());
  EXPECT_TRUE(findStragglers({{0, 0.9, 20}, {1, 0, 0}}).empty()) << "a rank still in start-up";
  EXPECT_EQ(findStragglers({{0, 0.9, 10}, {1, 0.1, 10}}).size(), 1u) << "10 steps are enough";
}

TEST(Stragglers, ANodeIsJudgedByItsRanksMedian) {
  // Node 1's four ranks all slowed (a throttled node); node 0's not; one slow rank on node 0 does not make it slow.
  std::vector<RankSummary> ranks;
  for (int r = 0; r < 4; ++r) ranks.push_back(rankAt(r, 0, 40, "exchange", 0.1, r == 0 ? 0.5 : 0.2, 20));
  for (int r = 4; r < 8; ++r) ranks.push_back(rankAt(r, 1, 40, "forward_backward", 0.1, 0.34 + 0.01 * r, 18));
  const std::vector<BusyFigure> nodes = nodeFigures(ranks);
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_DOUBLE_EQ(nodes[0].busy_s, 0.2);
  EXPECT_DOUBLE_EQ(nodes[1].busy_s, 0.395);
  EXPECT_EQ(nodes[1].steps, 18);
  const std::vector<Straggler> s = findStragglers(nodes);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].id, 1);
  EXPECT_NEAR(s[0].ratio, 1.975, 1e-9);
}

TEST(Stragglers, TheLogSaysEachChangeOnce) {
  StragglerLog log;
  EXPECT_EQ(log.update({}, {}), "") << "nothing to say at the start";
  const std::vector<Straggler> one = findStragglers({{0, 0.412, 20}, {1, 0.108, 20}});
  const std::string first = log.update(one, {});
  EXPECT_EQ(first,
            "stragglers (busy time per step, outside the gradient exchange, more than 1.5x the others' median): "
            "rank 0 busy 0.412 s per step (median of 20 steps), 3.81x the others' median 0.108 s; the job goes on");
  EXPECT_EQ(log.update(findStragglers({{0, 0.5, 20}, {1, 0.1, 20}}), {}), "") << "the same rank again: silent";
  const std::string changed = log.update(one, findStragglers({{1, 0.412, 20}, {0, 0.108, 20}}));
  EXPECT_NE(changed.find("node 1 busy 0.412 s"), std::string::npos) << changed;
  EXPECT_EQ(log.update({}, {}), "stragglers: none any more (every rank within 1.5x the others' median)");
  EXPECT_EQ(log.update({}, {}), "");
}

TEST(Stragglers, AVerdictIsSaidOnlyOnceItHeldWhileTheStragglerAdvancedFiveSteps) {
  PersistentStragglers persistent;
  // Rank 1 slow at step 11 (first judged), still at 15: held back; at 16 (5 steps on): confirmed.
  auto at = [](std::int64_t step, double busy) {
    return findStragglers({{0, 0.1, 10, step}, {1, busy, 10, step}, {2, 0.1, 10, step}});
  };
  for (std::int64_t step = 11; step <= 15; ++step) {
    EXPECT_TRUE(persistent.confirm(at(step, 0.4)).empty()) << "step " << step;
  }
  std::vector<Straggler> s = persistent.confirm(at(16, 0.4));
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].id, 1);
  EXPECT_EQ(s[0].step, 16);
  EXPECT_NEAR(s[0].ratio, 4.0, 1e-9);
  EXPECT_EQ(persistent.confirm(at(17, 0.4)).size(), 1u) << "and stays while it lasts";
  // CI's false straggler under the CPU hog (1.85x at one judgement, gone at the next): never said.
  PersistentStragglers burst;
  EXPECT_TRUE(burst.confirm(at(11, 0.185)).empty());
  EXPECT_TRUE(burst.confirm(at(12, 0.12)).empty());
  // One judgement without it starts it over.
  for (std::int64_t step = 13; step <= 17; ++step) EXPECT_TRUE(burst.confirm(at(step, 0.4)).empty());
  EXPECT_TRUE(burst.confirm(at(18, 0.1)).empty());
  for (std::int64_t step = 19; step <= 23; ++step) EXPECT_TRUE(burst.confirm(at(step, 0.4)).empty()) << step;
  EXPECT_EQ(burst.confirm(at(24, 0.4)).size(), 1u);
  // A restart from a checkpoint (its step goes back) starts it over too.
  EXPECT_TRUE(burst.confirm(at(3, 0.4)).empty());
  EXPECT_EQ(burst.confirm(at(8, 0.4)).size(), 1u);
}

TEST(Stragglers, ANodesStepIsItsLowestRanksStep) {
  std::vector<RankSummary> ranks = {rankAt(0, 0, 40, "exchange", 0.1, 0.2, 20), rankAt(1, 0, 38, "data", 0.1, 0.2, 20)};
  EXPECT_EQ(nodeFigures(ranks).at(0).step, 38);
}

TEST(Spread, NamesTheRanksBehindAndTheSilentOne) {
  // Rank 5 (node 1) hung in data of step 7; the others went on into step 7's exchange or are still at step 8.
  std::vector<RankSummary> ranks;
  for (int r = 0; r < 4; ++r) ranks.push_back(rankAt(r, 0, 8, "data", 0.3));
  ranks.push_back(rankAt(4, 1, 8, "data", 0.4));
  ranks.push_back(rankAt(5, 1, 7, "data", 31.2));
  ranks.push_back(rankAt(6, 1, 7, "exchange", 30.9));
  ranks.push_back(rankAt(7, 1, 8, "data", 0.2));
  EXPECT_EQ(describeSpread(ranks),
            "step 7: rank 5 in data, rank 6 in exchange; step 8: ranks 0-4, 7 in data; behind: ranks 5-6 (node 1) at "
            "step 7, 1 step behind step 8; silent longest: rank 5 (node 1, 31.2 s)");
  EXPECT_EQ(describeSpread({rankAt(0, 0, 3, "exchange", 2.0), rankAt(1, 1, 3, "data", 9.5)}),
            "step 3: rank 1 in data, rank 0 in exchange; every rank at step 3; silent longest: rank 1 (node 1, 9.5 s)");
  EXPECT_EQ(describeSpread({}), "");
  sortMostBehindFirst(ranks);
  EXPECT_EQ(ranks[0].rank, 5);
  EXPECT_EQ(ranks[1].rank, 6);
}

}  // namespace
}  // namespace taehv::group
