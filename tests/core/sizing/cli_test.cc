// taehv-run with sizing wired in: real taehv-run processes and real workers. GPUs: this machine has none, so the
// GPU cases load tests/core/sizing/fake_nvml.cc (a fake libnvidia-ml reporting 8 H100s) through the product's
// own override, TAEHV_NVML_LIBRARY; everything else (CPU-only sizing, workers, sockets, files) is real.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace {
namespace fs = std::filesystem;

std::string env(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

std::string taehvRun() { return env("TAEHV_BIN_DIR", TAEHV_TEST_BUILD_DIR "/bin") + "/taehv-run"; }
std::string configsDir() { return env("TAEHV_SOURCE_DIR", TAEHV_TEST_SOURCE_DIR) + "/examples/configs"; }

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct RunResult {
  int code = -1;
  std::string out;  // stdout and stderr together
};

/// Runs taehv-run with `args` under `env` (NAME=VALUE words, added to a clean environment with PATH and HOME), killed
/// (code 137) when it runs longer than `limit_s` seconds.
RunResult run(const std::string& env_words, const std::string& args, int limit_s = 60) {
  const std::string cmd = "env -i PATH=/usr/bin:/bin HOME=/tmp " + env_words + " timeout -s KILL " +
                          std::to_string(limit_s) + " " + quote(taehvRun()) + " " + args + " 2>&1";
  RunResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

/// The line of `text` containing `needle`, or "".
std::string lineWith(const std::string& text, const std::string& needle) {
  auto at = text.find(needle);
  if (at == std::string::npos) return "";
  auto begin = text.rfind('\n', at);
  begin = begin == std::string::npos ? 0 : begin + 1;
  return text.substr(begin, text.find('\n', at) - begin);
}

const std::string kFakeGpus = std::string("TAEHV_NVML_LIBRARY=") + TAEHV_FAKE_NVML_PATH;
const std::string kNoGpus =
    "TAEHV_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 "
    "TAEHV_CUDA_DRIVER_LIBRARY=/nonexistent/libcuda.so.1";

class SizingCli : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/taehv-sizing-cli-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(SizingCli, CpuNodeAutoIsOneGlooWorkerAndWorkersGetTheTuning) {
  // The worker prints what it got; a real process started by taehv-run.
  RunResult r = run(kNoGpus,
              "--backend local --standalone -- /bin/sh -c "
              "'echo DEV=$TAEHV_DEVICE T=$TAEHV_COLLECTIVE_TIMEOUT_S IF=$GLOO_SOCKET_IFNAME W=$WORLD_SIZE'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("DEV=cpu T=3600 IF=lo W=1"), std::string::npos) << r.out;
}

TEST_F(SizingCli, MoreWorkersThanGpusIsRefusedBeforeAnythingStarts) {
  const std::string marker = dir_ + "/started";
  RunResult r = run(kFakeGpus,
              "--backend local --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --nproc-per-node 16 -- "
              "/bin/sh -c " +
                  quote("touch " + marker));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("did you mean --nnodes 2 --nproc-per-node 8?"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(marker)) << "no worker may start";
}

TEST_F(SizingCli, AutoStartsOneWorkerPerGpuEachWithItsDevice) {
  RunResult r = run(kFakeGpus,
              "--backend local --standalone -- /bin/sh -c 'echo R=$LOCAL_RANK D=$TAEHV_DEVICE "
              "B=$NCCL_BUFFSIZE S=$NCCL_SOCKET_IFNAME'");
  EXPECT_EQ(r.code, 0) << r.out;
  for (int i = 0; i < 8; ++i) {
    const std::string want = "R=" + std::to_string(i) + " D=cuda:" + std::to_string(i) + " B=16777216 S==lo";
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  }
  EXPECT_EQ(r.out.find("R=8"), std::string::npos) << r.out;
}

TEST_F(SizingCli, VisibleDevicesBindingGivesEachWorkerOnlyItsGpu) {
  RunResult r = run(kFakeGpus + " CUDA_VISIBLE_DEVICES=5,2",
              "--backend local --standalone --gpu-binding visible-devices -- /bin/sh -c "
              "'echo R=$LOCAL_RANK C=$CUDA_VISIBLE_DEVICES D=$TAEHV_DEVICE'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("R=0 C=5 D=cuda:0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("R=1 C=2 D=cuda:0"), std::string::npos) << r.out;
}

TEST_F(SizingCli, DescribeShowsEachValueAndWhy) {
  RunResult r = run(kFakeGpus + " NCCL_BUFFSIZE=4194304",
              "describe --backend local --nnodes 8 --node-rank 3 --master-addr 127.0.0.1 -- /bin/true");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("TAEHV_COLLECTIVE_TIMEOUT_S=14400    <- default for 8+ nodes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NCCL_BUFFSIZE=4194304    <- set in your environment, kept (taehv-run would use 33554432"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("nproc_per_node = 8    <- auto: one worker per visible GPU"), std::string::npos) << r.out;
}

TEST_F(SizingCli, FlagsOverrideTheTuning) {
  RunResult r = run(kFakeGpus,
              "describe --json --backend local --standalone --nproc-per-node 1 --collective-timeout 90 "
              "--nccl-buffsize 8M -- /bin/true");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"TAEHV_COLLECTIVE_TIMEOUT_S\": \"90\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"NCCL_BUFFSIZE\": \"8388608\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("flag --collective-timeout"), std::string::npos) << r.out;
}

TEST_F(SizingCli, BadSizingFlagsAreUsageErrors) {
  RunResult r = run(kNoGpus, "describe --backend local --gpu-binding visible -- /bin/true");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("--gpu-binding 'visible'"), std::string::npos) << r.out;
  r = run(kNoGpus, "describe --backend local --nccl-buffsize lots -- /bin/true");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("16M"), std::string::npos) << r.out;
  r = run(kNoGpus, "describe --backend local --config /nonexistent/configs -- /bin/true");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("no such file or folder"), std::string::npos) << r.out;
}

TEST_F(SizingCli, ConfigFolderPicksTheProfileAndTheTrainerGetsIt) {
  // A stand-in taehv-train (named so, as taehv-run recognises the trainer by name) that prints its arguments.
  const std::string trainer = dir_ + "/taehv-train";
  std::ofstream(trainer) << "#!/bin/sh\necho ARGS: \"$@\"\n";
  fs::permissions(trainer, fs::perms::owner_all);
  RunResult r = run(kFakeGpus, "--backend local --standalone --config " + quote(configsDir()) + " -- " + quote(trainer) +
                             " --set train.steps=5");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("profile h100-1x8 matches the world size"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ARGS: --config " + configsDir() + "/h100-1x8.yaml --set train.steps=5"), std::string::npos)
      << r.out;

  r = run(kNoGpus,
          "--backend local --standalone --nproc-per-node 2 --config " + quote(configsDir()) + " -- " + quote(trainer));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("ARGS: --config " + configsDir() + "/h100-1x8.yaml --set train.lr=2.5e-05"), std::string::npos)
      << "derived by linear scaling for 2 workers\n"
      << r.out;
  EXPECT_NE(r.out.find("derived from the base profile h100-1x8"), std::string::npos) << r.out;
}

TEST_F(SizingCli, DoctorPassesOnAHealthyNodeAndFailsWithTheFix) {
  RunResult r = run(kNoGpus, "doctor --backend local --standalone --output-dir " + quote(dir_));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("0 failed"), std::string::npos) << r.out;

  r = run(kNoGpus,
          "doctor --backend local --standalone --output-dir " + quote(dir_) + " --data " + quote(dir_ + "/missing"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("does not exist on this node"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fix:"), std::string::npos) << r.out;

  r = run(kFakeGpus,
          "doctor --backend local --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --nproc-per-node 16 "
          "--connect-timeout 0.5 --output-dir " +
              quote(dir_));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("did you mean --nnodes 2 --nproc-per-node 8?"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cannot be reached from other nodes"), std::string::npos) << r.out;
}

// Issue 38, defect 5: TAEHV_NVML_LIBRARY naming a file cut short killed describe, the launch and doctor (SIGBUS); a
// FIFO hung them. Now each runs on (CPU workers) and says why the library was not loaded.
using HostileSizingCli = SizingCli;
TEST_F(HostileSizingCli, ABrokenOrBlockingNvmlLibraryIsNamedAndNothingDies) {
  const std::string cut = dir_ + "/libnvidia-ml.so.1";
  fs::copy_file(TAEHV_FAKE_NVML_PATH, cut);
  fs::resize_file(cut, fs::file_size(cut) / 2);
  const std::string fifo = dir_ + "/fifo.so";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const auto& [library, why] : {std::pair<std::string, std::string>{cut, "(cut short"},
                                     {fifo, "is a FIFO (named pipe), not a regular file"}}) {
    const std::string env_words = "TAEHV_NVML_LIBRARY=" + quote(library) + " TAEHV_CUDA_DRIVER_LIBRARY=/nonexistent/x";
    RunResult r = run(env_words, "describe --backend local --standalone -- /bin/true", 20);
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("sizing: GPU driver problem: " + library + ": NVML library "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(why), std::string::npos) << r.out;
    r = run(env_words, "--backend local --standalone -- /bin/sh -c 'echo DEV=$TAEHV_DEVICE'", 20);
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("DEV=cpu"), std::string::npos) << r.out;
    r = run(env_words, "doctor --backend local --standalone --output-dir " + quote(dir_), 20);
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find(why), std::string::npos) << r.out;
  }
}

TEST_F(SizingCli, DoctorOnNodeZeroFailsWhenTheMasterPortIsTaken) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const int port = ntohs(a.sin_port);
  RunResult r = run(kNoGpus, "doctor --backend local --master-port " + std::to_string(port) + " --output-dir " + quote(dir_));
  ::close(fd);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(lineWith(r.out, "master port free").find(" fail "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("another --master-port"), std::string::npos) << r.out;
}

}  // namespace
