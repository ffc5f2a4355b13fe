// Profile selection by world size, on the shipped examples/configs/h100-*.yaml and on broken folders made here.
#include "taehv/sizing/profiles.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace taehv::sizing {
namespace {
namespace fs = std::filesystem;

std::string sourceDir() {
  const char* src = std::getenv("TAEHV_SOURCE_DIR");
  return src != nullptr && *src != '\0' ? src : TAEHV_TEST_SOURCE_DIR;
}

std::string configsDir() { return sourceDir() + "/examples/configs"; }

class SizingProfileDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/taehv-sizing-profiles-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) { std::ofstream(fs::path(dir_) / name) << text; }
  std::string dir_;
};

TEST(SizingShippedProfiles, FollowTheLinearLrRule) {
  Checked<std::vector<TrainProfile>> profiles = loadProfiles(configsDir());
  ASSERT_TRUE(profiles.ok()) << profiles.error;
  std::set<int> worlds;
  for (const TrainProfile& p : profiles.value) {
    worlds.insert(p.worldSize());
    if (p.name.rfind("h100-", 0) != 0) continue;
    // 1e-4 at an effective batch of 128, linear.
    EXPECT_NEAR(p.lr, 1e-4 * static_cast<double>(p.effectiveBatch()) / 128.0, 1e-12) << p.path;
  }
  EXPECT_EQ(worlds.count(8) + worlds.count(16) + worlds.count(64), 3u) << "H100 profiles for 8, 16 and 64 GPUs";
}

// That every shipped profile uses only keys the trainer knows is the trainer's own test (config_test.cc:
// Config.ShippedConfigsLoadAndValidate): sizing reads only the profile keys it scales.

TEST(SizingChooseProfile, ExactWorldSizesPickTheirFile) {
  struct Case {
    int nodes, per_node;
    const char* name;
  };
  for (Case c : {Case{1, 8, "h100-1x8"}, Case{2, 8, "h100-2x8"}, Case{8, 8, "h100-8x8"}}) {
    Checked<ProfileChoice> p = chooseProfile(configsDir(), c.nodes, c.per_node);
    ASSERT_TRUE(p.ok()) << p.error;
    EXPECT_FALSE(p.value.derived);
    EXPECT_EQ(p.value.profile.name, c.name);
    EXPECT_TRUE(p.value.overrides.empty());
    EXPECT_NE(p.value.reason.find("matches the world size"), std::string::npos) << p.value.reason;
    EXPECT_EQ(p.value.profile.output_dir, std::string("runs/taehv-") + c.name) << "read for doctor's output check";
  }
}

TEST(SizingChooseProfile, SameWorldSizeDifferentLayoutStillMatches) {
  Checked<ProfileChoice> p = chooseProfile(configsDir(), 4, 4);  // 16 workers as 4x4
  ASSERT_TRUE(p.ok()) << p.error;
  EXPECT_EQ(p.value.profile.name, "h100-2x8");
  EXPECT_NE(p.value.reason.find("only the world size matters"), std::string::npos) << p.value.reason;
}

TEST(SizingChooseProfile, OtherWorldSizesAreDerivedByLinearScaling) {
  Checked<ProfileChoice> p = chooseProfile(configsDir(), 4, 8);  // 32 workers: no profile
  ASSERT_TRUE(p.ok()) << p.error;
  EXPECT_TRUE(p.value.derived);
  EXPECT_EQ(fs::path(p.value.config_path).filename(), "h100-1x8.yaml") << "the base is the smallest";
  EXPECT_EQ(p.value.profile.effectiveBatch(), 32 * 4 * 4);
  EXPECT_DOUBLE_EQ(p.value.profile.lr, 4e-4);
  ASSERT_EQ(p.value.overrides.size(), 1u);
  EXPECT_EQ(p.value.overrides[0].first, "train.lr");
  EXPECT_EQ(p.value.overrides[0].second, "0.0004");
  EXPECT_NE(p.value.reason.find("lr scaled linearly 0.0001 -> 0.0004"), std::string::npos) << p.value.reason;

  Checked<ProfileChoice> cpu = chooseProfile(configsDir(), 1, 2);  // two CPU workers
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu.value.overrides.at(0).second, "2.5e-05");

  Checked<ProfileChoice> three = chooseProfile(configsDir(), 1, 3);  // 1e-4 x 48 / 128
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(three.value.overrides.at(0).second, "3.75e-05") << "rounded to 6 significant digits";
}

TEST_F(SizingProfileDir, SeveralSameSizeProfilesPreferTheMatchingLayout) {
  write("a-4x4.yaml", "train:\n  lr: 1\n");
  write("b-2x8.yaml", "train:\n  lr: 2\n");
  Checked<ProfileChoice> p = chooseProfile(dir_, 2, 8);
  ASSERT_TRUE(p.ok()) << p.error;
  EXPECT_EQ(p.value.profile.name, "b-2x8");
}

TEST_F(SizingProfileDir, OtherFilesAreNotProfiles) {
  write("quickstart.yaml", "train:\n  lr: 1\n");
  write("notes-2x8.txt", "hello");
  Checked<ProfileChoice> p = chooseProfile(dir_, 1, 8);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error.find("no profile in it"), std::string::npos) << p.error;
}

TEST_F(SizingProfileDir, BrokenProfilesNameTheFileAndTheFix) {
  write("x-1x8.yaml", "train: [unclosed\n");
  Checked<ProfileChoice> p = chooseProfile(dir_, 1, 8);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error.find("x-1x8.yaml: not valid YAML"), std::string::npos) << p.error;

  fs::remove(fs::path(dir_) / "x-1x8.yaml");
  write("y-1x8.yaml", "train:\n  batch_per_rank: 2\n");
  p = chooseProfile(dir_, 1, 8);
  EXPECT_NE(p.error.find("no train.lr"), std::string::npos) << p.error;

  fs::remove(fs::path(dir_) / "y-1x8.yaml");
  write("z-1x8.yaml", "train:\n  lr: fast\n");
  p = chooseProfile(dir_, 1, 8);
  EXPECT_NE(p.error.find("must be numbers"), std::string::npos) << p.error;

  fs::remove(fs::path(dir_) / "z-1x8.yaml");
  write("w-0x8.yaml", "train:\n  lr: 1\n");
  p = chooseProfile(dir_, 1, 8);
  EXPECT_NE(p.error.find("at least 1"), std::string::npos) << p.error;
}

// Issue 38, defect 20: a profile named -99999999999999999999x8 was reported as 0x8 (earlier -1x8), a count the user
// never wrote; 65536x65536 overflowed the world size. The name's counts are quoted as written.
using HostileSizingProfileDir = SizingProfileDir;
TEST_F(HostileSizingProfileDir, ACountOutOfRangeIsQuotedAsWritten) {
  for (const std::string shape : {"99999999999999999999x8", "8x99999999999999999999", "65536x65536", "0x8"}) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write("h-" + shape + ".yaml", "train:\n  lr: 1\n");
    Checked<ProfileChoice> p = chooseProfile(dir_, 1, 8);
    ASSERT_FALSE(p.ok()) << shape;
    EXPECT_NE(p.error.find("h-" + shape + ".yaml: the name says " + shape + " (NODESxGPUS_PER_NODE); both counts must "
                           "be at least 1 and their product, the world size, at most 2147483647"),
              std::string::npos)
        << p.error;
  }
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  write("-99999999999999999999x8.yaml", "train:\n  lr: 1\n");
  EXPECT_NE(chooseProfile(dir_, 1, 8).error.find("the name says 99999999999999999999x8"), std::string::npos);
}

TEST(SizingChooseProfile, MissingFolderIsAClearError) {
  Checked<ProfileChoice> p = chooseProfile("/nonexistent/configs", 1, 8);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error.find("not a directory"), std::string::npos) << p.error;
}

TEST(SizingFormatLr, ShortestExactText) {
  EXPECT_EQ(formatLr(1e-4), "0.0001");
  EXPECT_EQ(formatLr(2.5e-5), "2.5e-05");
  EXPECT_EQ(std::strtod(formatLr(1.0 / 3.0).c_str(), nullptr), 1.0 / 3.0);
}

}  // namespace
}  // namespace taehv::sizing
