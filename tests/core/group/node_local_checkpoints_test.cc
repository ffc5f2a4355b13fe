// Node-local checkpoints: the folder scan each node reports to etcd, and the agreement rule a formation applies.
#include "taehv/group/node_local_checkpoints.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace taehv::group {
namespace {
namespace fs = std::filesystem;

HeldCheckpoints held(const std::string& node, std::vector<std::int64_t> steps) { return {node, std::move(steps)}; }

TEST(AgreeResumeStep, TheNewestStepEveryNodeHolds) {
  const Checked<std::int64_t> step = agreeResumeStep({held("node 0", {4, 3, 2}), held("node 1", {3, 2}),
                                                      held("node 2", {2, 3, 4})});
  ASSERT_TRUE(step.ok()) << step.error;
  EXPECT_EQ(step.value, 3);  // node 1 lost its copy of 4
}

TEST(AgreeResumeStep, NoneAnywhereStartsFromScratch) {
  const Checked<std::int64_t> step = agreeResumeStep({held("node 0", {}), held("node 1", {})});
  ASSERT_TRUE(step.ok()) << step.error;
  EXPECT_EQ(step.value, 0);
}

TEST(AgreeResumeStep, ANodeHoldingNoneDoesNotNarrowTheChoice) {
  // Node 1 is fresh (a replacement, an emptied disk): it receives step 5 from a rank that holds it.
  const Checked<std::int64_t> step = agreeResumeStep({held("node 0", {5, 4}), held("node 1", {}), held("node 2", {4, 5})});
  ASSERT_TRUE(step.ok()) << step.error;
  EXPECT_EQ(step.value, 5);
}

TEST(AgreeResumeStep, DisjointStepsAreRefused) {
  const Checked<std::int64_t> step = agreeResumeStep({held("node 0", {6}), held("node 1", {5}), held("node 2", {5, 6})});
  ASSERT_FALSE(step.ok());
  EXPECT_NE(step.error.find("no checkpoint is held by every node"), std::string::npos) << step.error;
  EXPECT_NE(step.error.find("node 0: 6; node 1: 5; node 2: 5,6"), std::string::npos) << step.error;
  EXPECT_NE(step.error.find("nothing was deleted"), std::string::npos) << step.error;
}

TEST(AgreeResumeStep, DisjointStepsAreRefusedWhateverAFreshNodeHolds) {
  const Checked<std::int64_t> step = agreeResumeStep({held("node 0", {6}), held("node 1", {}), held("node 2", {5})});
  ASSERT_FALSE(step.ok());
  EXPECT_NE(step.error.find("node 0: 6; node 1: none; node 2: 5"), std::string::npos) << step.error;
}

TEST(AgreeResumeStep, OneNodeResumesItsNewest) {
  const Checked<std::int64_t> step = agreeResumeStep({held("node 0", {7, 9, 8})});
  ASSERT_TRUE(step.ok()) << step.error;
  EXPECT_EQ(step.value, 9);
}

TEST(HeldCheckpointSteps, CompleteCheckpointFoldersOnlyNewestFirst) {
  const fs::path dir = fs::temp_directory_path() / ("taehv-node-local-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  for (const std::string name : {"checkpoint-2", "checkpoint-10", "checkpoint-3", "checkpoint-x", "checkpoint-4",
                                 ".tmp-checkpoint-5-123"}) {
    fs::create_directories(dir / name);
    if (name != "checkpoint-4") std::ofstream(dir / name / "manifest.json") << "{}";  // 4: an interrupted save
  }
  std::ofstream(dir / "checkpoint-7") << "a file, not a folder";
  EXPECT_EQ(heldCheckpointSteps(dir.string()), (std::vector<std::int64_t>{10, 3, 2}));
  EXPECT_TRUE(heldCheckpointSteps((dir / "absent").string()).empty());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace taehv::group
