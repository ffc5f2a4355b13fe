#include "taehv/train/checkpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "infra/fifo_guard.h"
#include "taehv/model/output_file.h"

namespace taehv::train {
namespace {
namespace fs = std::filesystem;

std::string tempDir() {
  char tmpl[] = "/tmp/taehv-ckpt-XXXXXX";
  return mkdtemp(tmpl);
}

void writeFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The entries of `dir` whose names start with `prefix`.
std::vector<std::string> entriesStartingWith(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path().filename().string());
  }
  return out;
}

// The step a resume from checkpoint folder `dir` continues at: its state.json, read as the trainer reads it.
int64_t resumedStep(const std::string& dir) { return parseCheckpointState(readFile(dir + "/state.json")).step; }

std::string save(const std::string& dir, int64_t step, int64_t keep = 3) {
  return saveCheckpoint(dir, step, keep, [&](const std::string& tmp) {
    writeFile(tmp + "/model.pt", "weights of step " + std::to_string(step));
    CheckpointState state;
    state.step = step;
    state.samples_consumed = step * 4;
    writeFile(tmp + "/state.json", formatCheckpointState(state));
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
  EXPECT_EQ(resumedStep(all[0].second), 50);
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
  EXPECT_EQ(resumedStep(*found), 10);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("checkpoint-20"), std::string::npos) << warnings[0];
  // A folder without manifest (interrupted before the rename could not happen, but simulate) is skipped too.
  fs::create_directories(dir + "/checkpoint-30");
  warnings.clear();
  found = resolveResume("latest", dir, [&](const std::string& w) { warnings.push_back(w); });
  EXPECT_EQ(resumedStep(*found), 10);
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


TEST(HostileCheckpoints, EveryCheckpointDamagedRefusesTheResumeAndChangesNothing) {
  const auto dir = tempDir();
  save(dir, 10);
  save(dir, 20);
  writeFile(dir + "/checkpoint-10/model.pt", "torn");
  writeFile(dir + "/checkpoint-20/state.json", "{}");
  try {
    resolveResume("latest", dir, [](const std::string&) {});
    FAIL() << "a resume with only damaged checkpoints must be refused (training from 0 would overwrite them)";
  } catch (const CheckpointError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("checkpoint-10 is damaged"), std::string::npos) << m;
    EXPECT_NE(m.find("checkpoint-20 is damaged"), std::string::npos) << m;
    EXPECT_NE(m.find("Nothing was changed"), std::string::npos) << m;
  }
  EXPECT_EQ(readFile(dir + "/checkpoint-10/model.pt"), "torn");
  EXPECT_EQ(listCheckpoints(dir).size(), 2u);
  // The same through an output folder given by path, and the message names the option it came from.
  try {
    resolveResume(dir, "/elsewhere", [](const std::string&) {}, "--checkpoint");
    FAIL() << "expected CheckpointError";
  } catch (const CheckpointError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("--checkpoint " + dir, 0), 0u) << e.what();
  }
  fs::remove_all(dir);
}

TEST(HostileCheckpoints, ASaveOverADamagedFolderOfItsStepKeepsThatFolderAside) {
  const auto dir = tempDir();
  save(dir, 10);
  save(dir, 20);
  writeFile(dir + "/checkpoint-20/model.pt", "the only copy of something, torn");
  save(dir, 20);  // e.g. a run resumed from step 10 reaching step 20 again
  std::string why;
  EXPECT_TRUE(verifyCheckpoint(dir + "/checkpoint-20", &why)) << why;
  const auto aside = entriesStartingWith(dir, "damaged-checkpoint-20-");
  ASSERT_EQ(aside.size(), 1u) << "the damaged folder must be moved aside, not destroyed";
  EXPECT_EQ(readFile(dir + "/" + aside[0] + "/model.pt"), "the only copy of something, torn");
  // An intact folder of the same step is simply replaced.
  save(dir, 20);
  EXPECT_EQ(entriesStartingWith(dir, "damaged-").size(), 1u);
  EXPECT_TRUE(entriesStartingWith(dir, ".old-").empty());
  fs::remove_all(dir);
}

TEST(HostileCheckpoints, AFailedSaveRemovesItsTemporaryAndNamesTheFreeSpace) {
  const auto dir = tempDir();
  save(dir, 10);
  try {
    saveCheckpoint(dir, 20, 3, [&](const std::string& tmp) {
      writeFile(tmp + "/model.pt", "half");
      throw std::runtime_error("file write failed\n(a stack trace the user does not need)");
    });
    FAIL() << "expected the save to throw";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cannot write checkpoint-20 in " + dir + ": file write failed ("), std::string::npos) << m;
    EXPECT_NE(m.find("MiB free"), std::string::npos) << m;
    EXPECT_EQ(m.find("stack trace"), std::string::npos) << m;
  }
  EXPECT_TRUE(entriesStartingWith(dir, ".tmp-").empty()) << "the temporary folder must go";
  EXPECT_EQ(listCheckpoints(dir).size(), 1u);
  fs::remove_all(dir);
}

TEST(HostileCheckpoints, StaleTemporariesOfDeadProcessesAreRemovedLiveOnesKept) {
  const auto dir = tempDir();
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);  // a PID that no longer runs
  const std::string dead = ".tmp-checkpoint-30-" + std::to_string(child);
  const std::string dead_old = ".old-checkpoint-20-" + std::to_string(child);
  const std::string live = ".tmp-checkpoint-40-" + std::to_string(getppid());
  for (const auto& name : {dead, dead_old, live}) fs::create_directories(dir + "/" + name + "/sub");
  writeFile(dir + "/.tmp-notes-1", "not ours");
  fs::create_directories(dir + "/previews");
  writeFile(dir + "/weights.safetensors.tmp.Ab3x9Z", "half a file");  // a killed writeFileAtomically
  writeFile(dir + "/previews/step-0000100.png.tmp.q1W2e3", "half a png");
  writeFile(dir + "/notes.tmp.txt", "a user's file");
  const auto removed = removeStaleTemporaries(dir);
  EXPECT_EQ(removed.size(), 4u);
  EXPECT_FALSE(fs::exists(dir + "/weights.safetensors.tmp.Ab3x9Z"));
  EXPECT_FALSE(fs::exists(dir + "/previews/step-0000100.png.tmp.q1W2e3"));
  EXPECT_TRUE(fs::exists(dir + "/notes.tmp.txt"));
  EXPECT_FALSE(fs::exists(dir + "/" + dead));
  EXPECT_FALSE(fs::exists(dir + "/" + dead_old));
  EXPECT_TRUE(fs::exists(dir + "/" + live)) << "a live process's save in progress must be left alone";
  EXPECT_TRUE(fs::exists(dir + "/.tmp-notes-1"));
  fs::remove_all(dir);
}


TEST(HostileCheckpoints, AManifestOrStateThatIsNotOursIsRefusedNotFollowed) {
  for (const std::string& text :
       {std::string("[]"), std::string("{\"step\": -1, \"files\": {}}"),
        std::string("{\"step\": 1, \"files\": {\"../../etc/passwd\": {\"size\": 1, \"crc32c\": 1}}}"),
        std::string("{\"step\": 1, \"files\": {\"model.pt\": {\"size\": -5, \"crc32c\": 1}}}"),
        std::string("{\"step\": 1, \"files\": {\"model.pt\": {\"size\": 5, \"crc32c\": 99999999999}}}"),
        std::string("{\"step\": 1.5, \"files\": {}}"), std::string("not json")}) {
    EXPECT_THROW(parseCheckpointManifest(text), CheckpointError) << text;
  }
  for (const std::string& text : {std::string("{\"step\": 2}"), std::string("{\"step\": 2, \"samples_consumed\": -8}"),
                                  std::string("{\"step\": \"2\", \"samples_consumed\": 8}"), std::string("")}) {
    EXPECT_THROW(parseCheckpointState(text), CheckpointError) << text;
  }
  const auto st = parseCheckpointState("{\"step\": 2, \"samples_consumed\": 8, \"world_size\": 2}");
  EXPECT_EQ(st.step, 2);
  EXPECT_EQ(st.samples_consumed, 8);
  EXPECT_EQ(st.data_skipped, 0);
  EXPECT_EQ(st.world_size, 2);
  EXPECT_EQ(st.grad_accum, 0);  // absent: not needed to resume
}

// Issue 38, defect 9: checkpoint files were written with mode 0644 whatever the umask (the manifest, and every file
// written through the one output writer). Now 0666 less the umask, set here in a child process.
TEST(HostileCheckpoints, CheckpointFilesFollowTheUmask) {
  const auto dir = tempDir();
  const pid_t child = ::fork();
  if (child == 0) {
    ::umask(077);
    try {
      saveCheckpoint(dir, 7, 1, [](const std::string& tmp) {
        const std::string weights = "weights";
        writeFileAtomically(tmp + "/model.pt",
                            [&](int fd) { return writeAllBytes(fd, weights.data(), weights.size()); });
      });
    } catch (...) {
      _exit(1);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  for (const char* file : {"manifest.json", "model.pt"}) {
    struct stat st {};
    ASSERT_EQ(::stat((dir + "/checkpoint-7/" + file).c_str(), &st), 0) << file;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << file << " ignored the umask";
  }
  fs::remove_all(dir);
}

// Issue 38, defect 11: `eval --checkpoint` on a folder holding a FIFO blocked for ever (its manifest and files were
// opened before their type was checked). Now the checkpoint is damaged, with a reason naming the FIFO, at once.
TEST(HostileCheckpoints, AFifoInACheckpointFolderIsRefusedNotWaitedOn) {
  const auto dir = tempDir();
  const std::string folder = save(dir, 5);
  ASSERT_TRUE(fs::remove(folder + "/model.pt"));
  std::string why;
  {
    test::FifoGuard fifo(folder + "/model.pt", std::chrono::seconds(5));
    EXPECT_FALSE(verifyCheckpoint(folder, &why));
    EXPECT_FALSE(fifo.fired()) << "model.pt was opened";
  }
  EXPECT_NE(why.find(folder + "/model.pt: a FIFO (named pipe), not a regular file"), std::string::npos) << why;
  ASSERT_TRUE(fs::remove(folder + "/manifest.json"));
  {
    test::FifoGuard fifo(folder + "/manifest.json", std::chrono::seconds(5));
    EXPECT_FALSE(verifyCheckpoint(folder, &why));
    EXPECT_FALSE(fifo.fired()) << "manifest.json was opened";
  }
  EXPECT_NE(why.find("manifest.json: a FIFO (named pipe), not a regular file"), std::string::npos) << why;
  fs::remove_all(dir);
}

TEST(Checkpoint, StateJsonWrittenIsReadBackWhole) {
  CheckpointState st;
  st.step = 300;
  st.samples_consumed = 1200;
  st.data_skipped = 3;
  st.world_size = 2;
  st.batch_per_rank = 2;
  st.grad_accum = 1;
  st.seed = -7;  // any integer seed
  st.train_seconds = 61.25;
  const auto back = parseCheckpointState(formatCheckpointState(st));
  EXPECT_EQ(back.step, 300);
  EXPECT_EQ(back.samples_consumed, 1200);
  EXPECT_EQ(back.data_skipped, 3);
  EXPECT_EQ(back.world_size, 2);
  EXPECT_EQ(back.batch_per_rank, 2);
  EXPECT_EQ(back.grad_accum, 1);
  EXPECT_EQ(back.seed, -7);
  EXPECT_EQ(back.train_seconds, 61.25);
  EXPECT_THROW(parseCheckpointState("{\"step\": 1, \"samples_consumed\": 0, \"world_size\": -2}"), CheckpointError);
  // train.max_minutes counts from train_seconds: absent (an older checkpoint) is 0; not a time is refused.
  EXPECT_EQ(parseCheckpointState("{\"step\": 1, \"samples_consumed\": 0}").train_seconds, 0);
  for (const char* bad : {"-1", "\"60\"", "null", "1e999"}) {
    EXPECT_THROW(parseCheckpointState(std::string("{\"step\": 1, \"samples_consumed\": 0, \"train_seconds\": ") +
                                      bad + "}"),
                 CheckpointError)
        << bad;
  }
}


// A folder named like a checkpoint whose step is no 64-bit number made --resume say only "error: stoll" (and a
// temporary's PID likewise): names are parsed, and one that is no checkpoint's is skipped with a line naming it.
TEST(HostileCheckpoints, AFolderNameWhoseStepIsNoNumberIsSkippedWithALine) {
  const auto dir = tempDir();
  const std::string two = save(dir, 2);
  fs::create_directories(dir + "/checkpoint-99999999999999999999");
  fs::create_directories(dir + "/.tmp-checkpoint-5-99999999999999999999");
  std::vector<std::string> warnings;
  const auto found = resolveResume("latest", dir, [&](const std::string& w) { warnings.push_back(w); });
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(*found, two);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("checkpoint-99999999999999999999"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("skipped"), std::string::npos) << warnings[0];
  EXPECT_EQ(listCheckpoints(dir).size(), 1u);
  EXPECT_NO_THROW(removeStaleTemporaries(dir));
  EXPECT_TRUE(fs::exists(dir + "/.tmp-checkpoint-5-99999999999999999999")) << "no PID of ours: left alone";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace taehv::train
