// taehv/log.h: the one message pattern of taehv-run and taehv-train, as a user reads it on stderr.
#include "taehv/log.h"

#include <gtest/gtest.h>

#include <map>

namespace taehv::log {
namespace {

Place placeFrom(const std::map<std::string, std::string>& env) {
  return Place::fromEnvironment(env);
}

TEST(Log, ThePlaceComesFromTheLaunchersVariables) {
  const Place p = placeFrom({{"GROUP_RANK", "1"}, {"RANK", "5"}, {"LOCAL_RANK", "2"}});
  EXPECT_EQ(p.node, 1);
  EXPECT_EQ(p.rank, 5);
  EXPECT_EQ(p.local_rank, 2);
  const Place alone = placeFrom({});
  EXPECT_FALSE(alone.node || alone.rank || alone.local_rank);
  const Place bad = placeFrom({{"RANK", "x"}, {"LOCAL_RANK", "-1"}, {"GROUP_RANK", ""}});
  EXPECT_FALSE(bad.node || bad.rank || bad.local_rank) << "a value that is no rank is left out, not guessed";
}

TEST(Log, ThePrefixNamesNodeAndRankOnlyWhenTheLauncherGaveThem) {
  EXPECT_EQ(prefix("taehv-run", Place{}), "taehv-run: ");
  EXPECT_EQ(prefix("taehv-train", Place{0, 3, 1}), "[node 0 rank 3 local 1] taehv-train: ");
  EXPECT_EQ(prefix("taehv-train eval", Place{std::nullopt, 1, 1}), "[rank 1 local 1] taehv-train eval: ");
}

TEST(Log, MessagesCarryPlaceProgramAndLevelOnStderr) {
  setup("taehv-train", Place{0, 3, 1});
  ::testing::internal::CaptureStderr();
  ::testing::internal::CaptureStdout();
  error("data: /x does not exist");
  warn("skipping item {0} at 100%");  // braces and percent signs are text, not format
  info("two\nlines");
  debug("hidden");
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "");
  EXPECT_EQ(err,
            "[node 0 rank 3 local 1] taehv-train: error: data: /x does not exist\n"
            "[node 0 rank 3 local 1] taehv-train: warning: skipping item {0} at 100%\n"
            "[node 0 rank 3 local 1] taehv-train: info: two\nlines\n");
}

TEST(Log, VerboseShowsDebugMessagesAndSetupRenames) {
  setup("taehv-run", Place{});
  setVerbose(true);
  ::testing::internal::CaptureStderr();
  debug("plugin search path: /a");
  setVerbose(false);
  debug("hidden again");
  setup("taehv-run describe", Place{});
  error("x");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "taehv-run: debug: plugin search path: /a\ntaehv-run describe: error: x\n");
}

TEST(Log, OutputIsWrittenAsGiven) {
  setup("taehv-train", Place{0, 0, 0});
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  report("step 1/2 | loss 0.50000 | 50% {done}");
  print(Stream::kStdout, "{\"psnr\": 30}\n");
  print(Stream::kStderr, "\r[###...] 1/2");
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "step 1/2 | loss 0.50000 | 50% {done}\n{\"psnr\": 30}\n");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "\r[###...] 1/2");
}

}  // namespace
}  // namespace taehv::log
