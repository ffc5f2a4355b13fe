// The encode / decode commands end to end (files in, files out) on the reference vectors, and their answers to
// bad input: exit status 2 and one message saying what is wrong.
#include "taehv/model/commands.h"

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "taehv/model/safetensors.h"
#include "test_util.h"

namespace taehv {
namespace {

using testing::maxAbsDiff;
using testing::TempDir;

// Runs a command capturing stderr.
int run(int (*command)(const std::vector<std::string>&), const std::vector<std::string>& args, std::string* err) {
  ::testing::internal::CaptureStderr();
  ::testing::internal::CaptureStdout();
  const int rc = command(args);
  *err = ::testing::internal::GetCapturedStderr();
  ::testing::internal::GetCapturedStdout();
  return rc;
}

TEST(CommandsTest, EncodeThenDecodeFilesMatchTheReference) {
  const std::string ref = testing::referenceDir();
  TempDir dir;
  std::string err;
  const std::string weights = ref + "/taehv.f16.safetensors";
  ASSERT_EQ(run(encodeCommand,
                {"--variant", "taehv", "--weights", weights, "--input", ref + "/taehv.public.io.safetensors",
                 "--output", dir.file("latents.safetensors"), "--threads", "1"},
                &err),
            0)
      << err;
  const auto io = readSafetensors(ref + "/taehv.public.io.safetensors");
  const auto latents = readSafetensors(dir.file("latents.safetensors"));
  ASSERT_EQ(latents.count("latents"), 1u);
  EXPECT_EQ(latents.at("latents").dtype(), torch::kFloat);
  EXPECT_LE(maxAbsDiff(latents.at("latents"), io.at("latents")), 2e-5);

  // Decode what encode wrote, streaming, with the preview switches on the CLI.
  ASSERT_EQ(run(decodeCommand,
                {"--variant=taehv", "--weights", weights, "--input", ref + "/taehv_preview.public.io.safetensors",
                 "--output", dir.file("frames.safetensors"), "--streaming", "--decoder-time-upscale", "0,0",
                 "--threads=1"},
                &err),
            0)
      << err;
  // taehv_preview's file has `latents`, decoded by upstream with time upscale off.
  const auto preview = readSafetensors(ref + "/taehv_preview.public.io.safetensors");
  const auto frames = readSafetensors(dir.file("frames.safetensors"));
  ASSERT_EQ(frames.at("frames").sizes(), preview.at("frames").sizes());
  EXPECT_LE(maxAbsDiff(frames.at("frames"), preview.at("frames")), 2e-5);
}

TEST(CommandsTest, BadInputGivesOneClearMessageAndStatus2) {
  const std::string ref = testing::referenceDir();
  TempDir dir;
  const std::string weights = ref + "/taehv.f16.safetensors";
  const std::string out = dir.file("out.safetensors");
  std::string err;

  // A frames file whose values are in [-1, 1], and a latents file with the wrong channel count.
  writeSafetensors(dir.file("signed.safetensors"), {{"input", torch::rand({1, 4, 3, 16, 16}) * 2 - 1}});
  writeSafetensors(dir.file("lat48.safetensors"), {{"latents", torch::randn({1, 2, 48, 2, 2})}});
  writeSafetensors(dir.file("nan.safetensors"), {{"latents", torch::full({1, 2, 16, 2, 2}, NAN)}});

  struct Case {
    int (*command)(const std::vector<std::string>&);
    std::vector<std::string> args;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {encodeCommand, {"--variant", "taehv9", "--weights", weights, "--input", "x", "--output", out}, "taehv1_5"},
      {encodeCommand, {"--variant", "taehv", "--weights", weights, "--output", out}, "missing required option --input"},
      {encodeCommand, {"--variant", "taehv", "--wieghts", weights}, "did you mean '--weights'"},
      {encodeCommand,
       {"--variant", "taew2_2", "--weights", weights, "--input", dir.file("signed.safetensors"), "--output", out},
       "wrong --variant"},
      {encodeCommand,
       {"--variant", "taehv", "--weights", weights, "--input", dir.file("signed.safetensors"), "--output", out},
       "must be in [0, 1]"},
      {encodeCommand,
       {"--variant", "taehv", "--weights", weights, "--input", dir.file("lat48.safetensors"), "--output", out},
       "has no tensor 'input'"},
      {decodeCommand,
       {"--variant", "taehv", "--weights", weights, "--input", dir.file("lat48.safetensors"), "--output", out},
       "(N, L, 16, h, w)"},
      {decodeCommand,
       {"--variant", "taehv", "--weights", weights, "--input", dir.file("nan.safetensors"), "--output", out},
       "NaN"},
      {decodeCommand,
       {"--variant", "taehv", "--weights", weights, "--input", dir.file("lat48.safetensors"), "--output", out,
        "--decoder-time-upscale", "1,2"},
       "switches"},
      {decodeCommand,
       {"--variant", "taehv", "--weights", dir.file("missing.safetensors"), "--input", "x", "--output", out},
       "cannot read it"},
      {decodeCommand,
       {"--weights", ref + "/taeh3.f16.safetensors", "--input", ref + "/taeh3.public.io.safetensors", "--output", out,
        "--streaming"},
       "taeh3 has no streaming mode"},
      {decodeCommand, {"--weights", dir.file("w.safetensors"), "--input", "x", "--output", out},
       "missing --variant: the weights file name"},
      {benchCommand, {"--variant", "taeltx_2", "--size", "48"}, "--size must be a multiple of 32"},
      {benchCommand, {"--device", "tpu"}, "--device must be cpu or cuda"},
      {benchCommand, {"--steps", "zero"}, "--steps must be an integer"},
      {benchCommand, {"--peak-tflops", "-1"}, "--peak-tflops must be a positive number"},
      {benchCommand, {"--memory-format", "nhwc"}, "--memory-format must be auto, channels_last or contiguous"},
      {benchCommand, {"--precision", "bf16", "--conv", "winograd"}, "Winograd convolutions are for fp32 steps"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(run(c.command, c.args, &err), 2) << c.needle;
    EXPECT_NE(err.find(c.needle), std::string::npos) << "'" << c.needle << "' not in: " << err;
  }
  EXPECT_FALSE(std::filesystem::exists(out));  // nothing written on failure
}

// An input of 0 clips, shape (0, T, C, H, W): encode said libtorch's "min(): Expected reduction dim to be specified
// for input.numel() == 0", decode died of SIGFPE. Now one error naming the tensor and its shape, exit 2.
TEST(HostileCommands, AnInputOfZeroClipsIsOneLineNotACrash) {
  const std::string ref = testing::referenceDir();
  TempDir dir;
  const std::string weights = ref + "/taehv.f16.safetensors";
  const std::string out = dir.file("out.safetensors");
  writeSafetensors(dir.file("frames0.safetensors"), {{"input", torch::zeros({0, 4, 3, 16, 16})}});
  writeSafetensors(dir.file("latents0.safetensors"), {{"latents", torch::zeros({0, 1, 16, 2, 2})}});
  std::string err;
  struct Case {
    int (*command)(const std::vector<std::string>&);
    std::string input, tensor;
  };
  for (const Case& c : {Case{encodeCommand, dir.file("frames0.safetensors"), "input"},
                        Case{decodeCommand, dir.file("latents0.safetensors"), "latents"}}) {
    EXPECT_EQ(run(c.command, {"--variant", "taehv", "--weights", weights, "--input", c.input, "--output", out}, &err),
              2)
        << err;
    EXPECT_NE(err.find("tensor '" + c.tensor + "' holds 0 clips (shape [0, "), std::string::npos) << err;
    EXPECT_EQ(err.find("error:"), err.rfind("error:")) << "one error line (then the usage):\n" << err;
  }
  EXPECT_FALSE(std::filesystem::exists(out));
}

// Issue 38 (1): a safetensors file whose header nests a shape 500,000 arrays deep, as --weights or as --input of
// encode and decode: exit status 2 and one message naming the option and the file (it was a SIGSEGV).
TEST(HostileModelCommands, ADeeplyNestedSafetensorsHeaderIsOneMessageAsWeightsOrInput) {
  const std::string ref = testing::referenceDir();
  TempDir dir;
  const std::string weights = ref + "/taehv.f16.safetensors";
  const std::string nested = dir.file("nested.safetensors");
  const std::size_t depth = 500'000;
  const std::string json = R"({"input":{"dtype":"F32","shape":)" + std::string(depth, '[') + "1" +
                           std::string(depth, ']') + R"(,"data_offsets":[0,4]}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<std::size_t>(i)] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  std::ofstream(nested, std::ios::binary) << bytes << json << std::string(4, '\0');
  const std::string out = dir.file("out.safetensors");
  std::string err;
  for (const auto command : {encodeCommand, decodeCommand}) {
    EXPECT_EQ(run(command, {"--variant", "taehv", "--weights", nested, "--input", "x", "--output", out}, &err), 2);
    EXPECT_NE(err.find("--weights: safetensors file '" + nested + "': header nests JSON"), std::string::npos) << err;
    EXPECT_EQ(run(command, {"--variant", "taehv", "--weights", weights, "--input", nested, "--output", out}, &err), 2);
    EXPECT_NE(err.find("--input: safetensors file '" + nested + "': header nests JSON"), std::string::npos) << err;
  }
  EXPECT_FALSE(std::filesystem::exists(out));
}

// Issue 38 (20): a decoder switch the variant's weights cannot have (time upscaling in a stage the variant does not
// upscale, a super decoder's space upscaling changed) is named as that, not as "wrong --variant for these weights".
TEST(HostileModelCommands, DecoderSwitchesTheWeightsCannotHaveAreNamedAsSuch) {
  const std::string ref = testing::referenceDir();
  TempDir dir;
  const std::string out = dir.file("out.safetensors");
  std::string err;
  EXPECT_EQ(run(decodeCommand,
                {"--weights", ref + "/taehv.f16.safetensors", "--input", ref + "/taehv.public.io.safetensors",
                 "--output", out, "--decoder-time-upscale", "1,1,1"},
                &err),
            2);
  EXPECT_NE(err.find("--decoder-time-upscale 1,1,1: stage 0 of taehv's decoder does not upscale time"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("(taehv: 0,1,1)"), std::string::npos) << err;
  EXPECT_EQ(err.find("wrong --variant"), std::string::npos) << err;
  EXPECT_EQ(run(decodeCommand,
                {"--weights", ref + "/taew2_2_super.f16.safetensors", "--input",
                 ref + "/taew2_2_super.public.io.safetensors", "--output", out, "--decoder-space-upscale", "1,1,0"},
                &err),
            2);
  EXPECT_NE(err.find("--decoder-space-upscale 1,1,0: taew2_2_super's super decoder"), std::string::npos) << err;
  EXPECT_EQ(err.find("wrong --variant"), std::string::npos) << err;
  EXPECT_FALSE(std::filesystem::exists(out));
  // What the weights have stays allowed: taeltx_2 upscales time in all three stages, taehv's space switches are free.
  EXPECT_EQ(run(decodeCommand,
                {"--weights", ref + "/taeltx_2.f16.safetensors", "--input", ref + "/taeltx_2.public.io.safetensors",
                 "--output", out, "--decoder-time-upscale", "1,1,1", "--threads", "1"},
                &err),
            0)
      << err;
  EXPECT_EQ(run(decodeCommand,
                {"--weights", ref + "/taehv.f16.safetensors", "--input", ref + "/taehv.public.io.safetensors",
                 "--output", out, "--decoder-space-upscale", "1,1,0", "--threads", "1"},
                &err),
            0)
      << err;
}

// encode --streaming then decode --streaming, the variant taken from the weights file's name: upstream
// StreamingTAEHV's stream_latents and stream_frames.
TEST(CommandsTest, StreamingEncodeDecodeMatchUpstreamStreamingTAEHV) {
  testing::useTestThreads();
  const std::string ref = testing::referenceDir();
  TempDir dir;
  std::string err;
  for (const std::string name : {"taew2_2_super", "taeltx_2"}) {
    const std::string weights = ref + "/" + name + ".f16.safetensors";
    const std::string latents = dir.file(name + ".latents.safetensors");
    const std::string frames = dir.file(name + ".frames.safetensors");
    ASSERT_EQ(run(encodeCommand,
                  {"--weights", weights, "--input", ref + "/" + name + ".public.io.safetensors", "--output", latents,
                   "--streaming"},
                  &err),
              0)
        << err;
    ASSERT_EQ(run(decodeCommand, {"--weights", weights, "--input", latents, "--output", frames, "--streaming"}, &err), 0)
        << err;
    const auto io = readSafetensors(ref + "/" + name + ".public.io.safetensors");
    const torch::Tensor z = readSafetensors(latents).at("latents");
    ASSERT_EQ(z.sizes(), io.at("stream_latents").sizes()) << name;
    EXPECT_LE(maxAbsDiff(z, io.at("stream_latents")), 2e-5) << name;
    const torch::Tensor x = readSafetensors(frames).at("frames");
    ASSERT_EQ(x.sizes(), io.at("stream_frames").sizes()) << name;
    EXPECT_LE(maxAbsDiff(x, io.at("stream_frames")), 2e-5) << name;
  }
}

// The bare step is the job's step: by default the bench trains in taehv-train's layout (channels_last under bf16,
// contiguous in fp32); either can still be asked for. A bf16 step reports oneDNN's direct convolutions, what it runs.
TEST(CommandsTest, BenchTrainsInTheTrainersLayoutUnlessToldOtherwise) {
  testing::useTestThreads();
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"--precision", "bf16"}, "memory_format=channels_last conv=direct"},
      {{"--precision", "fp32"}, "memory_format=contiguous"},
      {{"--precision", "bf16", "--memory-format", "contiguous"}, "memory_format=contiguous"},
      {{"--precision", "fp32", "--memory-format", "channels_last"}, "memory_format=channels_last"}};
  for (const auto& [extra, expected] : cases) {
    std::vector<std::string> args{"--batch", "1", "--frames", "1", "--size", "16", "--steps", "1", "--warmup", "0",
                                  "--threads", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    ::testing::internal::CaptureStdout();
    const int rc = benchCommand(args);
    const std::string out = ::testing::internal::GetCapturedStdout();
    ASSERT_EQ(rc, 0) << out;
    const std::string header = out.substr(0, out.find('\n'));
    EXPECT_NE(header.find(" " + expected + " "), std::string::npos) << extra[1] << ": " << header;
  }
}

TEST(CommandsTest, BenchRunsATrainingStepAndPrintsTheSummaryLast) {
  testing::useTestThreads();
  ::testing::internal::CaptureStdout();
  const int rc = benchCommand({"--variant", "taehv", "--batch", "1", "--frames", "4", "--size", "16", "--steps", "1",
                               "--warmup", "0", "--threads", "1"});
  const std::string out = ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(rc, 0) << out;
  const std::string last = out.substr(out.rfind('\n', out.size() - 2) + 1);
  EXPECT_EQ(last.rfind("frames_per_s=", 0), 0u) << out;
  EXPECT_NE(last.find(" step_s="), std::string::npos) << out;
  EXPECT_NE(last.find(" peak_rss_mb="), std::string::npos) << out;
  EXPECT_NE(out.find("model_gflop_per_step="), std::string::npos) << out;
  // Issue 40: the roofline, per phase, against the peak measured in the same process.
  EXPECT_NE(out.find("flops: model_forward="), std::string::npos) << out;
  EXPECT_NE(out.find("peak: fp32_peak_gflops="), std::string::npos) << out;
  EXPECT_NE(out.find("phase forward: forward_s="), std::string::npos) << out;
  EXPECT_NE(out.find("phase backward: backward_s="), std::string::npos) << out;
  EXPECT_NE(out.find("phase optimizer: optimizer_s="), std::string::npos) << out;
  if (!torch::cuda::is_available()) {
    std::string err;
    EXPECT_EQ(run(benchCommand, {"--device", "cuda", "--steps", "1"}, &err), 2);
    EXPECT_NE(err.find("no CUDA device"), std::string::npos) << err;
  }
}

std::string readText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Issue 38, defect 16: `bench --profile` to /dev/full, a folder, a missing folder or a read-only file system exited 0
// with no trace (the profiler's own file writer reports nothing). Each is now one line and status 2 before any step;
// a write that fails later is one line and status 1.
TEST(HostileBenchProfile, AProfileThatCannotBeWrittenIsOneLineAndNotExitZero) {
  testing::useTestThreads();
  TempDir dir;
  const std::vector<std::string> bench = {"--variant", "taehv", "--batch", "1", "--frames", "4", "--size", "16",
                                          "--steps", "1", "--warmup", "0", "--threads", "1", "--profile"};
  std::filesystem::create_directory(dir.file("folder"));
  struct Case {
    std::string profile;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{{"/dev/full", "--profile: cannot write '/dev/full': it is a character device"},
                                         {dir.file("folder"), "it is a folder"},
                                         {dir.file("missing/trace.json"), "No such file or directory"}}) {
    std::vector<std::string> args = bench;
    args.push_back(c.profile);
    std::string err;
    EXPECT_EQ(run(benchCommand, args, &err), 2) << c.profile;
    EXPECT_NE(err.find(c.says), std::string::npos) << err;
  }
  std::vector<std::string> args = bench;
  args.push_back(dir.file("trace.json"));
  std::string err;
  ASSERT_EQ(run(benchCommand, args, &err), 0) << err;
  EXPECT_EQ(readText(dir.file("trace.json")).rfind("[", 0), 0u) << "a chrome trace is a JSON array";
}

// The read-only file system through the real binary, in a private mount namespace (root, as CI runs).
TEST(HostileBenchProfile, AProfileOnAReadOnlyFileSystemIsOneLine) {
  const char* bin = std::getenv("TAEHV_BIN_DIR");
  const std::string exe = std::string(bin ? bin : "") + "/taehv-train";
  TempDir dir;
  std::filesystem::create_directory(dir.file("ro"));
  const std::string command = "unshare -m sh -c 'mount -t tmpfs -o ro none " + dir.file("ro") + " && exec " + exe +
                              " bench --variant taehv --batch 1 --frames 4 --size 16 --steps 1 --warmup 0 "
                              "--threads 1 --profile " + dir.file("ro/trace.json") + "' 2> " + dir.file("err");
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  const std::string err = readText(dir.file("err"));
  EXPECT_NE(err.find("--profile: cannot write '" + dir.file("ro/trace.json") + "': its folder " + dir.file("ro") +
                     " is not writable (Read-only file system)"),
            std::string::npos)
      << err;
}

}  // namespace
}  // namespace taehv

namespace taehv {
namespace {

// The real executable, as a user runs it: taehv-train decode ... (dispatch by trainer/main.cc).
TEST(CommandsTest, TaehvTrainBinaryDecodesAndRejectsBadInput) {
  const char* bin = std::getenv("TAEHV_BIN_DIR");
  const std::string exe = std::string(bin ? bin : "") + "/taehv-train";
  ASSERT_TRUE(bin && std::filesystem::exists(exe)) << "taehv-train not built at " << exe;
  const std::string ref = testing::referenceDir();
  TempDir dir;
  const std::string out = dir.file("frames.safetensors");
  const std::string base = exe + " decode --variant taehv --weights " + ref + "/taehv.f16.safetensors --input " + ref +
                           "/taehv.public.io.safetensors --threads 1 --output " + out;
  ASSERT_EQ(std::system((base + " > " + dir.file("log") + " 2>&1").c_str()), 0);
  const auto io = readSafetensors(ref + "/taehv.public.io.safetensors");
  EXPECT_LE(maxAbsDiff(readSafetensors(out).at("frames"), io.at("frames")), 2e-5);
  // Wrong variant for the latents: exit status 2 and a message naming the expected shape.
  const int status = std::system((exe + " decode --variant taew2_2 --weights " + ref + "/taew2_2.f16.safetensors --input " +
                                  ref + "/taehv.public.io.safetensors --output " + dir.file("x.safetensors") + " 2> " +
                                  dir.file("err"))
                                     .c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  std::ifstream err(dir.file("err"));
  std::stringstream message_stream;
  message_stream << err.rdbuf();
  const std::string message = message_stream.str();
  EXPECT_NE(message.find("(N, L, 48, h, w)"), std::string::npos) << message;
}

}  // namespace
}  // namespace taehv
