// taehv-train roundtrip, encode --input IN.mp4 and decode --output OUT.mp4, run as a user runs them, on videos
// made by ffmpeg's testsrc, with the reference taehv weights; and each bad video file: exit status 2, one message
// naming the file and the problem, and no output file (not even a temporary).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../video/test_videos.h"
#include "taehv/model/metrics.h"
#include "taehv/model/safetensors.h"
#include "taehv/model/taehv.h"
#include "taehv/video/video_file.h"
#include "test_util.h"

namespace taehv {
namespace {

using testing::TempDir;

struct CommandRun {
  int status = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs taehv-train with `args` (one thread), capturing stdout and stderr; `shell` runs before it in the same shell
// command (e.g. "umask 077; timeout 20"), and the status is that of the whole command.
CommandRun taehvTrain(const std::string& args, const TempDir& dir, const std::string& shell = "") {
  const char* bin = std::getenv("TAEHV_BIN_DIR");
  const std::string exe = std::string(bin ? bin : "") + "/taehv-train";
  EXPECT_TRUE(bin && std::filesystem::exists(exe)) << "taehv-train not built at " << exe;
  const std::string command = shell + " " + exe + " " + args + " --threads 1 > '" + dir.file("stdout") + "' 2> '" +
                              dir.file("stderr") + "'";
  CommandRun run;
  const int status = std::system(command.c_str());
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.out = testing::readAll(dir.file("stdout"));
  run.err = testing::readAll(dir.file("stderr"));
  return run;
}

std::string weights() { return testing::referenceDir() + "/taehv.f16.safetensors"; }

// The value of `key=` in `text`, or NaN.
double field(const std::string& text, const std::string& key) {
  const auto at = text.find(key + "=");
  return at == std::string::npos ? std::nan("") : std::stod(text.substr(at + key.size() + 1));
}

// The reference weights (../shared/taehv-reference/taehv.f16.safetensors) are a seeded random initialisation, not
// trained ones (its README): their "reconstruction" of testsrc measures ~5 dB, so no quality floor says anything
// about a trained model. What the test can pin down: the PSNR and SSIM roundtrip prints are those of the model's
// own decode(encode(x)) of the input's frames, computed here through the library, to the printed digits.
TEST(RoundtripTest, PrintsThePsnrAndSsimOfTheModelsReconstructionOfTheInput) {
  TempDir dir;
  testing::makeTestVideo(dir.file("in.mp4"), 64, 48, 9, "10");  // 9 = 4k+1 frames, 8 | 64, 48: nothing padded
  const CommandRun run = taehvTrain("roundtrip --variant taehv --weights " + weights() + " --input " + dir.file("in.mp4") +
                                 " --output " + dir.file("out.mp4"),
                             dir);
  ASSERT_EQ(run.status, 0) << run.err;
  std::printf("%s", run.out.c_str());  // the PSNR, SSIM and frames/s in the test log

  const torch::Tensor x =
      video::readVideo(dir.file("in.mp4")).frames.permute({0, 3, 1, 2}).to(torch::kFloat).div(255).unsqueeze(0);
  TAEHV model(TAEHVOptions::forVariant("taehv"));
  loadWeights(*model, weights());
  model->eval();
  torch::InferenceMode guard;
  const torch::Tensor y = model->decodeVideo(model->encodeVideo(x)).slice(1, 0, 9);
  EXPECT_NEAR(field(run.out, "psnr_db"), psnr(y[0], x[0]), 0.006) << run.out;
  EXPECT_NEAR(field(run.out, "ssim"), ssim(y[0], x[0]), 6e-5) << run.out;
  EXPECT_GT(field(run.out, "psnr_db"), 3.0) << "these random weights measure 5.6 dB here: " << run.out;
  // What OUT.mp4 holds is that reconstruction, through H.264 at CRF 18.
  const torch::Tensor written =
      video::readVideo(dir.file("out.mp4")).frames.permute({0, 3, 1, 2}).to(torch::kFloat).div(255);
  EXPECT_GT(psnr(written, y[0]), 30.0);
}

TEST(RoundtripTest, KeepsFrameCountRateAndSizeInBothModes) {
  TempDir dir;
  // 10 frames (not 4k+1: the last is repeated until 10 come back), 70x50 (not multiples of 8: both padded, then
  // cropped), at the NTSC rate 30000/1001, which only a fraction keeps exactly.
  testing::makeTestVideo(dir.file("in.mp4"), 70, 50, 10, "30000/1001");
  double psnr_parallel = 0;
  for (const std::string mode : {"", " --streaming"}) {
    SCOPED_TRACE(mode.empty() ? "parallel" : "streaming");
    const std::string out = dir.file(mode.empty() ? "out.mp4" : "out_streaming.mp4");
    const CommandRun run = taehvTrain("roundtrip --variant taehv --weights " + weights() + " --input " + dir.file("in.mp4") +
                                   " --output " + out + mode,
                               dir);
    ASSERT_EQ(run.status, 0) << run.err;
    std::printf("%s", run.out.c_str());
    EXPECT_EQ(field(run.out, "frames"), 10);
    EXPECT_GT(field(run.out, "frames_per_s"), 0) << run.out;
    EXPECT_NE(run.out.find("padded to 72x56"), std::string::npos) << run.out;
    const video::Video v = video::readVideo(out);
    EXPECT_EQ(v.frames.sizes(), (std::vector<int64_t>{10, 50, 70, 3}));
    EXPECT_EQ(v.rate.num, 30000);
    EXPECT_EQ(v.rate.den, 1001);
    EXPECT_TRUE(run.err.empty()) << "no progress bar when stderr is not a terminal: " << run.err;
    // Streaming computes the same frames as parallel (taehv: within 4e-7), so the same PSNR.
    if (mode.empty()) {
      psnr_parallel = field(run.out, "psnr_db");
    } else {
      EXPECT_NEAR(field(run.out, "psnr_db"), psnr_parallel, 0.011) << run.out;
    }
  }
}

TEST(RoundtripTest, EncodeAVideoFileThenDecodeLatentsToAVideo) {
  TempDir dir;
  testing::makeTestVideo(dir.file("in.mp4"), 64, 48, 9, "10");
  CommandRun run = taehvTrain("encode --weights " + weights() + " --input " + dir.file("in.mp4") + " --output " +
                           dir.file("latents.safetensors"),
                       dir);
  ASSERT_EQ(run.status, 0) << run.err;
  const torch::Tensor latents = readSafetensors(dir.file("latents.safetensors")).at("latents");
  EXPECT_EQ(latents.sizes(), (std::vector<int64_t>{1, 3, 16, 6, 8}));  // 9 frames -> 3 latents of 64x48 / 8
  run = taehvTrain("decode --weights " + weights() + " --input " + dir.file("latents.safetensors") + " --fps 15" +
                       " --output " + dir.file("decoded.mkv"),
                   dir);
  ASSERT_EQ(run.status, 0) << run.err;
  const video::Video v = video::readVideo(dir.file("decoded.mkv"));
  EXPECT_EQ(v.frames.sizes(), (std::vector<int64_t>{9, 48, 64, 3}));  // 4 * 3 - 3 frames
  EXPECT_EQ(v.rate.value(), 15.0);
  // The video holds what decode writes as safetensors, through H.264 at CRF 18.
  run = taehvTrain("decode --weights " + weights() + " --input " + dir.file("latents.safetensors") + " --output " +
                       dir.file("decoded.safetensors"),
                   dir);
  ASSERT_EQ(run.status, 0) << run.err;
  const torch::Tensor frames = readSafetensors(dir.file("decoded.safetensors")).at("frames")[0];
  EXPECT_GT(psnr(v.frames.permute({0, 3, 1, 2}).to(torch::kFloat).div(255), frames), 30.0);
  // A video holds one clip: two clips of latents to .mp4 is refused before any work.
  writeSafetensors(dir.file("two.safetensors"), {{"latents", torch::cat({latents, latents})}}, torch::kFloat);
  run = taehvTrain("decode --weights " + weights() + " --input " + dir.file("two.safetensors") + " --output " +
                       dir.file("two.mp4"),
                   dir);
  EXPECT_EQ(run.status, 2);
  EXPECT_NE(run.err.find("one clip"), std::string::npos) << run.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("two.mp4")));
}

// The one video file-name rule (taehv::video::isVideoFileName, also the training data's): decode writes an MPEG-TS
// (.ts, which the training data once did not take) and encode reads it back; a name that is no video file
// (.png, which FFmpeg has an image muxer for) is refused before any work, with the names taken.
TEST(RoundtripTest, DecodeWritesATsFileAndEncodeReadsItButAPngIsNoVideoName) {
  TempDir dir;
  testing::makeTestVideo(dir.file("in.mp4"), 64, 48, 9, "10");
  CommandRun run = taehvTrain("encode --weights " + weights() + " --input " + dir.file("in.mp4") + " --output " +
                                  dir.file("latents.safetensors"),
                              dir);
  ASSERT_EQ(run.status, 0) << run.err;
  run = taehvTrain("decode --weights " + weights() + " --input " + dir.file("latents.safetensors") + " --output " +
                       dir.file("decoded.ts"),
                   dir);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(video::readVideo(dir.file("decoded.ts")).frames.sizes(), (std::vector<int64_t>{9, 48, 64, 3}));
  run = taehvTrain("encode --weights " + weights() + " --input " + dir.file("decoded.ts") + " --output " +
                       dir.file("again.safetensors"),
                   dir);
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(readSafetensors(dir.file("again.safetensors")).at("latents").sizes(),
            (std::vector<int64_t>{1, 3, 16, 6, 8}));
  run = taehvTrain("decode --weights " + weights() + " --input " + dir.file("latents.safetensors") + " --output " +
                       dir.file("decoded.png"),
                   dir);
  EXPECT_EQ(run.status, 2);
  EXPECT_NE(run.err.find("neither .safetensors nor a video file name"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find(".ts"), std::string::npos) << run.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("decoded.png")));
}

TEST(RoundtripTest, HelpSaysHowSizesArePaddedAndWhichEncoderWrites) {
  TempDir dir;
  const CommandRun run = taehvTrain("roundtrip --help", dir);
  EXPECT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("padded (the edge pixels repeated"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("libx264"), std::string::npos) << run.out;
}

TEST(RoundtripTest, EachBadVideoIsOneMessageStatus2AndNoOutputFile) {
  TempDir dir;
  auto bad = testing::makeBadVideos(dir.file(""));
  testing::makeTestVideo(dir.file("odd.mp4"), 63, 48, 5, "10");
  bad.push_back({"odd size", dir.file("odd.mp4"), "even width and height"});
  for (const auto& b : bad) {
    for (const std::string command : {"roundtrip", "encode"}) {
      SCOPED_TRACE(b.kind + ", " + command);
      if (command == "encode" && b.kind == "odd size") continue;  // latents of a padded odd size are fine
      const std::string out = dir.file(command == "roundtrip" ? "out.mp4" : "out.safetensors");
      const CommandRun run = taehvTrain(command + " --variant taehv --weights " + weights() + " --input " + b.path +
                                     " --output " + out,
                                 dir);
      EXPECT_EQ(run.status, 2) << run.err;
      // One message: the first line names the command, the file and the problem (the usage follows it).
      const std::string first = run.err.substr(0, run.err.find('\n'));
      EXPECT_EQ(first.rfind("taehv-train " + command + ": error: --input " + b.path, 0), 0u) << run.err;
      EXPECT_NE(first.find(b.reason), std::string::npos) << run.err;
      EXPECT_EQ(run.out, "");
      EXPECT_FALSE(std::filesystem::exists(out));
      for (const auto& entry : std::filesystem::directory_iterator(dir.file(""))) {
        EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
      }
    }
  }
}

mode_t modeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// Issue 38, defect 7: `roundtrip --output` equal to `--input` replaced the user's video with its reconstruction, and
// `encode --output` naming the weights another way replaced the weights with latents; both exited 0. An output that
// is one of the command's inputs (same device and inode: any spelling, a symbolic or a hard link) is now refused
// before any work, and the input is left as it was.
TEST(HostileModelFiles, AnOutputThatIsAnInputOfTheCommandIsRefusedAndTheInputKept) {
  TempDir dir;
  testing::makeTestVideo(dir.file("in.mp4"), 64, 48, 5, "10");
  const std::string video = testing::readAll(dir.file("in.mp4"));
  std::filesystem::create_directory(dir.file("sub"));
  std::filesystem::create_hard_link(dir.file("in.mp4"), dir.file("hard.mp4"));
  for (const std::string& output : {dir.file("in.mp4"), dir.file("sub/../in.mp4"), dir.file("hard.mp4")}) {
    const CommandRun run = taehvTrain("roundtrip --variant taehv --weights " + weights() + " --input " +
                                          dir.file("in.mp4") + " --output " + output,
                                      dir);
    EXPECT_EQ(run.status, 2) << output << ": " << run.err;
    EXPECT_NE(run.err.find("it is the file this command reads as --input " + dir.file("in.mp4")), std::string::npos)
        << run.err;
    EXPECT_TRUE(testing::readAll(dir.file("in.mp4")) == video) << output << " replaced the input video";
  }
  // The weights, named through a symbolic link and another spelling.
  std::filesystem::copy_file(weights(), dir.file("taehv.safetensors"));
  const std::string before = testing::readAll(dir.file("taehv.safetensors"));
  std::filesystem::create_symlink(dir.file("taehv.safetensors"), dir.file("latents.safetensors"));
  for (const std::string& output : {dir.file("latents.safetensors"), dir.file("sub/../taehv.safetensors")}) {
    const CommandRun run = taehvTrain("encode --weights " + dir.file("taehv.safetensors") + " --input " +
                                          dir.file("in.mp4") + " --output " + output,
                                      dir);
    EXPECT_EQ(run.status, 2) << output << ": " << run.err;
    EXPECT_NE(run.err.find("it is the file this command reads as --weights " + dir.file("taehv.safetensors")),
              std::string::npos)
        << run.err;
    EXPECT_TRUE(testing::readAll(dir.file("taehv.safetensors")) == before) << output << " replaced the weights";
  }
}

// Issue 38, defect 9: every written output got mode 0644, whatever the umask, and a replaced 0600 file became
// world-readable. A new output now gets 0666 less the umask; a replaced one keeps its mode.
TEST(HostileModelFiles, OutputsFollowTheUmaskAndAReplacedFileKeepsItsMode) {
  TempDir dir;
  testing::makeTestVideo(dir.file("in.mp4"), 64, 48, 5, "10");
  const std::string encode = "encode --variant taehv --weights " + weights() + " --input " + dir.file("in.mp4");
  CommandRun run = taehvTrain(encode + " --output " + dir.file("new.safetensors"), dir, "umask 077;");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(modeOf(dir.file("new.safetensors")), 0600u);
  run = taehvTrain("roundtrip --variant taehv --weights " + weights() + " --input " + dir.file("in.mp4") +
                       " --output " + dir.file("new.mp4"),
                   dir, "umask 027;");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(modeOf(dir.file("new.mp4")), 0640u);
  std::ofstream(dir.file("secret.safetensors")) << "old";
  ASSERT_EQ(::chmod(dir.file("secret.safetensors").c_str(), 0600), 0);
  run = taehvTrain(encode + " --output " + dir.file("secret.safetensors"), dir, "umask 022;");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(modeOf(dir.file("secret.safetensors")), 0600u) << "the replaced file became readable by others";
  EXPECT_EQ(readSafetensors(dir.file("secret.safetensors")).count("latents"), 1u);
}

// Issue 38, defect 11: a FIFO as --weights or --input blocked taehv-train for ever (opened before its type was
// checked). Now each is one line at once. `timeout` ends the old behaviour (status 124) instead of the suite.
TEST(HostileModelFiles, AFifoAsWeightsOrInputIsOneLineAtOnce) {
  TempDir dir;
  testing::makeTestVideo(dir.file("in.mp4"), 64, 48, 5, "10");
  ASSERT_EQ(::mkfifo(dir.file("taehv.safetensors").c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo(dir.file("fifo.mp4").c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo(dir.file("fifo.safetensors").c_str(), 0600), 0);
  struct Case {
    std::string args;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {"encode --weights " + dir.file("taehv.safetensors") + " --input " + dir.file("in.mp4") + " --output " +
                dir.file("o.safetensors"),
            "--weights " + dir.file("taehv.safetensors") + ": a FIFO (named pipe), not a regular file"},
           {"roundtrip --variant taehv --weights " + weights() + " --input " + dir.file("fifo.mp4") + " --output " +
                dir.file("o.mp4"),
            "--input " + dir.file("fifo.mp4") + ": a FIFO (named pipe), not a regular file"},
           {"decode --variant taehv --weights " + weights() + " --input " + dir.file("fifo.safetensors") +
                " --output " + dir.file("o.safetensors"),
            "--input " + dir.file("fifo.safetensors") + ": a FIFO (named pipe), not a regular file"}}) {
    const auto start = std::chrono::steady_clock::now();
    const CommandRun run = taehvTrain(c.args, dir, "timeout 30");
    EXPECT_EQ(run.status, 2) << c.args << ": " << run.err;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20)) << c.args;
    EXPECT_NE(run.err.find(c.says), std::string::npos) << run.err;
  }
}

// Issue 38, defect 8: output names of image, HLS and DASH muxers (.png, .m3u8, .mpd) skipped the temporary-then-
// rename write: an existing file was overwritten although the command failed, and .m3u8/.mpd exited 0 with segment
// files beside them (an existing o0.ts was overwritten). Each is refused before any work, and nothing in the folder
// changes.
TEST(HostileModelFiles, MuxersThatWriteFilesOfTheirOwnAreRefusedAndNothingChanges) {
  TempDir dir;
  testing::makeTestVideo(dir.file("in.mp4"), 64, 48, 5, "10");
  for (const char* name : {"o.png", "o.m3u8", "o.mpd", "o0.ts", "o-%d.png"}) std::ofstream(dir.file(name)) << "keep";
  const auto listing = [&] {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir.file(""))) {
      const std::string name = e.path().filename().string();
      if (name != "stdout" && name != "stderr") names.push_back(name + "=" + testing::readAll(e.path().string()).substr(0, 4));
    }
    std::sort(names.begin(), names.end());
    return names;
  };
  const auto before = listing();
  for (const char* name : {"o.png", "o.m3u8", "o.mpd", "o-%d.png"}) {
    const CommandRun run = taehvTrain("roundtrip --variant taehv --weights " + weights() + " --input " +
                                          dir.file("in.mp4") + " --output " + dir.file(name),
                                      dir);
    EXPECT_EQ(run.status, 2) << name << ": " << run.err;
    EXPECT_EQ(listing(), before) << name;
  }
}
}  // namespace
}  // namespace taehv
