#include "taehv/train/checkpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

namespace taehv::train {
namespace {
namespace fs = std::filesystem;

std::string tempDir() {
  char tmpl[] = "/tmp/taehv-ckpt-XXXXXX";
  return mkdtemp(tmpl);
}

void writeFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string save(const std::string& dir, int64_t step, int64_t keep = 3) {
  return saveCheckpoint(dir, step, keep, [&](const std::string& tmp) {
    writeFile(tmp + "/model.pt", "weights of step " + std::to_string(step));
    writeFile(tmp + "/state.json", "{\"step\": " + std::to_string(step) + "}");
  });
}

TEST(Checkpoint, SavesAtomicallyKeepsLastK) {
  const auto dir = tempDir();
  for (int s = 1; s <= 5; ++s) save(dir, s * 10, 3);
  auto all = listCheckpoints(dir);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].first, 50);
  EXPECT_EQ(all[2].first, 30);
  for (const auto& e : fs::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename().string().rfind(".tmp", 0), std::string::npos) << "temporary left behind";
  }
  std::string why;
  EXPECT_TRUE(verifyCheckpoint(all[0].second, &why)) << why;
  EXPECT_EQ(checkpointStep(all[0].second), 50);
  fs::remove_all(dir);
}

TEST(Checkpoint, TornNewestFallsBackToPreviousWithWarning) {
  const auto dir = tempDir();
  save(dir, 10);
  const auto newest = save(dir, 20);
  // Truncate a file of the newest: its size no longer matches the manifest.
  writeFile(newest + "/model.pt", "weig");
  std::vector<std::string> warnings;
  auto found = resolveResume("latest", dir, [&](const std::string& w) { warnings.push_back(w); });
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(checkpointStep(*found), 10);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("checkpoint-20"), std::string::npos) << warnings[0];
  // A folder without manifest (interrupted before the rename could not happen, but simulate) is skipped too.
  fs::create_directories(dir + "/checkpoint-30");
  warnings.clear();
  found = resolveResume("latest", dir, [&](const std::string& w) { warnings.push_back(w); });
  EXPECT_EQ(checkpointStep(*found), 10);
  EXPECT_EQ(warnings.size(), 2u);
  // Naming the damaged one explicitly is an error, not a silent fallback.
  EXPECT_THROW(resolveResume(newest, dir, [](const std::string&) {}), std::runtime_error);
  // Same-size corruption is caught by the checksum.
  save(dir, 40);
  writeFile(dir + "/checkpoint-40/model.pt", "weights of step 99");
  std::string why;
  EXPECT_FALSE(verifyCheckpoint(dir + "/checkpoint-40", &why));
  EXPECT_NE(why.find("checksum"), std::string::npos) << why;
  fs::remove_all(dir);
}

TEST(Checkpoint, LatestInEmptyFolderIsNoneAndBadPathIsAnError) {
  const auto dir = tempDir();
  EXPECT_FALSE(resolveResume("latest", dir, [](const std::string&) {}).has_value());
  EXPECT_THROW(resolveResume(dir + "/nope", dir, [](const std::string&) {}), std::runtime_error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace taehv::train
