// `--streaming` holds O(1) frames: decoding 64 latents takes no more peak RSS than decoding 4 plus the output;
// encoding or roundtripping a video file of 240 frames no more than one of 80 (plus the latents). Each command runs
// in its own process (its peak RSS as it reports it, VmHWM), so none sees another's allocator state.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../video/test_videos.h"
#include "taehv/model/safetensors.h"
#include "test_util.h"

namespace taehv {
namespace {

// Runs `command` (stderr to stdout); its exit status and the peak_rss_mb=X it printed (-1 if none). The child's own
// VmHWM: wait4's ru_maxrss would include the RSS of this (forking) test process.
struct ChildRun {
  int status = -1;
  double peak_rss_mb = -1;
  std::string output;
};

ChildRun runMeasured(const std::string& command) {
  ChildRun run;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    return run;
  }
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) {
    run.output += buffer;
  }
  run.status = ::pclose(pipe);
  const auto at = run.output.find("peak_rss_mb=");
  if (at != std::string::npos) {
    run.peak_rss_mb = std::stod(run.output.substr(at + 12));
  }
  return run;
}

TEST(StreamingMemoryTest, DecodingMoreLatentsCostsOnlyTheirOutput) {
  const std::string ref = testing::referenceDir();
  const char* bin_dir = std::getenv("TAEHV_BIN_DIR");
  ASSERT_NE(bin_dir, nullptr) << "TAEHV_BIN_DIR (set by ctest) names the folder of taehv-train";
  testing::TempDir dir;
  torch::manual_seed(0);
  // taehv: 16x16 latents decode to 128x128 frames; 64 latents -> 253 frames = 49.7 MB of float32 output.
  const int64_t counts[2] = {4, 64};
  double peak[2] = {0, 0};
  int64_t output_bytes[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    const std::string in = dir.file("latents" + std::to_string(counts[i]) + ".safetensors");
    const std::string out = dir.file("frames" + std::to_string(counts[i]) + ".safetensors");
    writeSafetensors(in, {{"latents", torch::randn({1, counts[i], 16, 16, 16})}});
    const ChildRun run = runMeasured(std::string(bin_dir) + "/taehv-train decode --streaming --weights " + ref +
                                     "/taehv.f16.safetensors --input " + in + " --output " + out + " --threads 1");
    ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.output;
    ASSERT_GT(run.peak_rss_mb, 0) << run.output;
    const torch::Tensor frames = readSafetensors(out).at("frames");
    ASSERT_EQ(frames.size(1), 4 * counts[i] - 3);
    peak[i] = run.peak_rss_mb;
    output_bytes[i] = frames.numel() * 4;
  }
  // Issue 16's bound is "no more than decoding 4 latents plus the output". Measured (taehv, 16x16 latents, 1
  // thread): 4 latents 236.6 MB, 64 latents 290.5 MB under ctest (the bound 284.0 MB missed by 6.5 MB), and 244.9 /
  // 283.8 MB when the same binary runs outside ctest (met): the difference is glibc/libtorch allocator state, not
  // frames kept (a per-frame leak or a second copy of the frames would add 47 MB here, the parallel decoder GBs).
  // Since the streaming decoder runs on channels_last activations: 236.2 / 281.1 MB under ctest, within the bound
  // (283.6 MB) without the slack. kAllocatorSlackMb covers that state; a regression that holds frames still fails.
  constexpr double kAllocatorSlackMb = 12.0;
  const double output_mb = static_cast<double>(output_bytes[1]) / (1024.0 * 1024.0);
  std::printf("peak RSS: 4 latents %.1f MB, 64 latents %.1f MB, output of 64: %.1f MB (of 4: %.1f MB)\n", peak[0],
              peak[1], output_mb, static_cast<double>(output_bytes[0]) / (1024.0 * 1024.0));
  EXPECT_LE(peak[1], peak[0] + output_mb + kAllocatorSlackMb)
      << "decoding 64 latents took " << peak[1] - peak[0] << " MB more than 4; the output is " << output_mb << " MB";
}

// Issue 38 (18): encode and roundtrip --streaming decoded the whole input video before the streaming encoder saw a
// frame (and roundtrip held every output frame): peak RSS grew with the length, 0.26 MB (encode) and 0.96 MB
// (roundtrip) a frame at 128x128. Now the frames go from the decoder into the encoder, and from the streaming
// decoder into the writer, one at a time. Measured (taehv, 128x128, 1 thread), before -> after the fix: encode 8 vs
// 160 frames 232.1 / 271.3 -> 241.3 / 244.2 MB; roundtrip 256.0 / 273.7 MB after (261.5 / 406.8 before). The
// roundtrip's RSS rises to ~80 frames and then stays (80: 272.9, 160: 274.0, 320: 273.9 MB: x264's lookahead and
// reference frames fill), so the lengths compared are 80 and 240, where the unfixed commands grow by ~40 and
// ~150 MB.
TEST(StreamingMemoryTest, EncodingOrRoundtrippingALongerVideoFileCostsNoMoreMemory) {
  TAEHV_REQUIRE_VIDEO_FILES();
  const std::string ref = testing::referenceDir();
  const char* bin_dir = std::getenv("TAEHV_BIN_DIR");
  ASSERT_NE(bin_dir, nullptr) << "TAEHV_BIN_DIR (set by ctest) names the folder of taehv-train";
  testing::TempDir dir;
  const int counts[2] = {80, 240};
  for (const int count : counts) {
    testing::makeTestVideo(dir.file("in" + std::to_string(count) + ".mp4"), 128, 128, count, "10");
  }
  constexpr double kAllocatorSlackMb = 12.0;  // as above
  for (const std::string command : {"encode", "roundtrip"}) {
    SCOPED_TRACE(command);
    double peak[2] = {0, 0};
    double latents_mb = 0;
    for (int i = 0; i < 2; ++i) {
      const std::string out = dir.file(command == "encode" ? "latents.safetensors" : "out.mp4");
      const ChildRun run = runMeasured(std::string(bin_dir) + "/taehv-train " + command + " --streaming --weights " +
                                       ref + "/taehv.f16.safetensors --input " +
                                       dir.file("in" + std::to_string(counts[i]) + ".mp4") + " --output " + out +
                                       " --threads 1");
      ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.output;
      ASSERT_GT(run.peak_rss_mb, 0) << run.output;
      peak[i] = run.peak_rss_mb;
      if (command == "encode") {
        const torch::Tensor latents = readSafetensors(out).at("latents");
        ASSERT_EQ(latents.size(1), counts[i] / 4);
        latents_mb = static_cast<double>(latents.numel() * 4) / (1024.0 * 1024.0);
      } else {
        EXPECT_NE(run.output.find("frames=" + std::to_string(counts[i]) + " "), std::string::npos) << run.output;
      }
    }
    std::printf("%s --streaming, peak RSS: %d frames %.1f MB, %d frames %.1f MB (latents of %d: %.1f MB)\n",
                command.c_str(), counts[0], peak[0], counts[1], peak[1], counts[1], latents_mb);
    // The latents are held (twice while they are joined): encode's only output, a few percent of the frames.
    EXPECT_LE(peak[1], peak[0] + 2 * latents_mb + kAllocatorSlackMb)
        << command << " of " << counts[1] << " frames took " << peak[1] - peak[0] << " MB more than of " << counts[0];
  }
}

}  // namespace
}  // namespace taehv
