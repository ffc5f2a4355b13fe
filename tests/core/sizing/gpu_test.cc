// GPU detection. This machine has no GPU and no NVIDIA driver: the real NVML/CUDA libraries are absent, which is
// the "no GPU -> CPU workers" path tested here for real. GPU counts > 0 come from a fake inventory (a GpuProbe
// test double) or from tests/core/sizing/fake_nvml.cc, a fake libnvidia-ml loaded through the real dlopen path.
#include "taehv/sizing/gpu.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <functional>

#include "taehv/sizing/nccl.h"

namespace taehv::sizing {
namespace {

GpuInventory nvmlLike(int n) {
  GpuInventory inv;
  inv.source = "NVML (fake)";
  for (int i = 0; i < n; ++i) {
    GpuInfo g;
    g.ordinal = i;
    g.uuid = "GPU-" + std::string(1, static_cast<char>('a' + i)) + "0000000-1111-2222-3333-444455556666";
    g.name = "NVIDIA H100 80GB HBM3";
    g.memory_bytes = 80ull << 30;
    g.device_token = std::to_string(i);
    inv.gpus.push_back(g);
  }
  return inv;
}

std::vector<std::string> tokens(const VisibleGpus& v) {
  std::vector<std::string> out;
  for (const auto& g : v.gpus) out.push_back(g.device_token);
  return out;
}

TEST(SizingGpuProbe, AbsentLibrariesGiveNoGpusWithAReason) {
  NvmlGpuProbe nvml("/nonexistent/libnvidia-ml.so.1");
  GpuInventory a = nvml.probe();
  EXPECT_TRUE(a.gpus.empty());
  EXPECT_EQ(a.source, "none");
  EXPECT_TRUE(a.error.empty()) << "absent is not an error: " << a.error;
  ASSERT_EQ(a.notes.size(), 1u);
  EXPECT_NE(a.notes[0].find("not found"), std::string::npos) << a.notes[0];

  CudaDriverGpuProbe cuda("/nonexistent/libcuda.so.1");
  GpuInventory b = cuda.probe();
  EXPECT_TRUE(b.gpus.empty());
  EXPECT_NE(b.notes.at(0).find("not found"), std::string::npos) << b.notes[0];
}

TEST(SizingGpuProbe, SystemProbeOnThisMachineFindsNoGpu) {
  // The default sonames: neither libnvidia-ml.so.1 nor libcuda.so.1 is installed on the test machines.
  auto probe = makeSystemGpuProbe({});
  GpuInventory inv = probe->probe();
  if (!inv.gpus.empty()) GTEST_SKIP() << "this machine has GPUs: " << inv.source;
  EXPECT_EQ(inv.notes.size(), 2u) << "both libraries tried";
  VisibleGpus v = visibleGpus(inv, {});
  EXPECT_TRUE(v.gpus.empty());
  EXPECT_EQ(v.source, "no NVIDIA driver library found");
}

TEST(SizingGpuProbe, LibraryWithoutTheSymbolsIsAnError) {
  NvmlGpuProbe nvml("libm.so.6");  // loads, but is not NVML
  GpuInventory inv = nvml.probe();
  EXPECT_TRUE(inv.gpus.empty());
  EXPECT_NE(inv.error.find("not a usable NVML"), std::string::npos) << inv.error;
  CudaDriverGpuProbe cuda("libm.so.6");
  EXPECT_NE(cuda.probe().error.find("not a usable CUDA driver"), std::string::npos);
}

TEST(SizingGpuProbe, CudaToolkitStubDriverIsReportedAsStub) {
  // The CUDA toolkit ships a stub libcuda for linking; cuInit in it fails with CUDA_ERROR_STUB_LIBRARY (34).
  const std::string stub = "/usr/local/cuda-13.0/lib/stubs/libcuda.so";
  if (!std::filesystem::exists(stub)) GTEST_SKIP() << stub << " not installed";
  GpuInventory inv = CudaDriverGpuProbe(stub).probe();
  EXPECT_TRUE(inv.gpus.empty());
  EXPECT_NE(inv.error.find("cuInit failed"), std::string::npos) << inv.error;
  EXPECT_NE(inv.error.find("STUB"), std::string::npos) << inv.error;
}

TEST(SizingGpuProbe, FakeNvmlIsEnumeratedThroughDlopen) {
  GpuInventory inv = NvmlGpuProbe(TAEHV_FAKE_NVML_PATH).probe();
  ASSERT_EQ(inv.gpus.size(), 8u) << inv.error;
  EXPECT_EQ(inv.gpus[3].name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(inv.gpus[3].memory_bytes, 80ull << 30);
  EXPECT_EQ(inv.gpus[3].uuid, "GPU-abc00003-1111-2222-3333-444455556666");
  EXPECT_EQ(inv.gpus[3].device_token, "3");
  EXPECT_NE(inv.source.find("driver 550.54.15"), std::string::npos) << inv.source;
  EXPECT_FALSE(inv.filtered_by_process_env);
}

TEST(SizingGpuProbe, NvmlInitFailureIsAnErrorNotACrash) {
  ::setenv("TAEHV_FAKE_NVML_INIT_ERROR", "1", 1);
  GpuInventory inv = NvmlGpuProbe(TAEHV_FAKE_NVML_PATH).probe();
  ::unsetenv("TAEHV_FAKE_NVML_INIT_ERROR");
  EXPECT_TRUE(inv.gpus.empty());
  EXPECT_NE(inv.error.find("Driver Not Loaded"), std::string::npos) << inv.error;
}

TEST(SizingGpuProbe, FirstWorkingProbeWinsAndKeepsEarlierNotes) {
  std::vector<std::unique_ptr<GpuProbe>> probes;
  probes.push_back(std::make_unique<NvmlGpuProbe>("/nonexistent/libnvidia-ml.so.1"));
  probes.push_back(std::make_unique<NvmlGpuProbe>(TAEHV_FAKE_NVML_PATH));
  GpuInventory inv = FirstWorkingGpuProbe(std::move(probes)).probe();
  EXPECT_EQ(inv.gpus.size(), 8u);
  ASSERT_EQ(inv.notes.size(), 1u);
  EXPECT_NE(inv.notes[0].find("/nonexistent"), std::string::npos);
}

TEST(SizingGpuProbe, EnvironmentOverridesTheLibraryPath) {
  auto probe = makeSystemGpuProbe({{kNvmlLibraryEnv, TAEHV_FAKE_NVML_PATH}});
  EXPECT_EQ(probe->probe().gpus.size(), 8u);
}

// ---- Issue 38, defect 5: a library named by path passes the checks that guard plugins -----------------------------

/// Runs `probe` in a child process, so that a SIGBUS or a hang (what these inputs did) fails the test instead of
/// ending or stalling the runner: its result, or "died of signal N" (a hang ends with SIGALRM after 10 s).
std::string inChild(const std::function<std::string()>& probe) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(10);
    const std::string out = probe();
    (void)!::write(fds[1], out.data(), out.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return "died of signal " + std::to_string(WTERMSIG(status));
  return out;
}

/// What an NVML probe of `library` found: "<gpus> GPUs; error: <error>".
std::string nvmlProbe(const std::string& library) {
  return inChild([&] {
    const GpuInventory inv = NvmlGpuProbe(library).probe();
    return std::to_string(inv.gpus.size()) + " GPUs; error: " + inv.error;
  });
}

class HostileSizingLibrary : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/taehv-sizing-lib-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    lib_ = dir_ + "/libnvidia-ml.so.1";
    std::filesystem::copy_file(TAEHV_FAKE_NVML_PATH, lib_);
    ::chmod(lib_.c_str(), 0644);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
  std::string lib_;
};

TEST_F(HostileSizingLibrary, ACutShortFileAFifoOrAFolderIsRefusedWithoutLoadingOrWaiting) {
  ASSERT_EQ(nvmlProbe(lib_), "8 GPUs; error: ") << "the copy in a safe folder loads";
  std::filesystem::resize_file(lib_, std::filesystem::file_size(lib_) / 2);
  EXPECT_EQ(nvmlProbe(lib_).rfind("0 GPUs; error: " + lib_ + ": NVML library is not a shared library taehv-run can "
                                  "load (cut short",
                                  0),
            0u)
      << nvmlProbe(lib_);
  const std::string nccl = inChild([&] {
    const NcclProbe p = probeNccl({lib_});
    return p.notes.empty() ? std::string("no note") : p.notes.front();
  });
  EXPECT_NE(nccl.find(lib_ + ": NCCL library is not a shared library taehv-run can load (cut short"),
            std::string::npos)
      << nccl;

  const std::string fifo = dir_ + "/fifo.so";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(nvmlProbe(fifo), "0 GPUs; error: " + fifo +
                                 ": NVML library is a FIFO (named pipe), not a regular file; refusing to open it "
                                 "(reading a FIFO or a device can wait for ever): remove it, or name the library's "
                                 "file");
  std::filesystem::create_directory(dir_ + "/folder.so");
  EXPECT_NE(nvmlProbe(dir_ + "/folder.so").find("NVML library is a folder, not a regular file"),
            std::string::npos);
  EXPECT_EQ(nvmlProbe(dir_ + "/missing.so").rfind("0 GPUs; error: ", 0), 0u) << "absent is a note, not an error";
}

TEST_F(HostileSizingLibrary, ALibraryOthersCanChangeIsNotLoaded) {
  ::chmod(lib_.c_str(), 0666);
  EXPECT_EQ(nvmlProbe(lib_), "0 GPUs; error: " + lib_ +
                                 ": NVML library is writable by everyone (owner root, mode 0666); refusing to load "
                                 "code from it: run chmod o-w " + lib_);
  ::chmod(lib_.c_str(), 0664);
  EXPECT_NE(nvmlProbe(lib_).find(": NVML library is writable by its group"), std::string::npos) << nvmlProbe(lib_);
  ::chmod(lib_.c_str(), 0644);
  ::chmod(dir_.c_str(), 0770);
  EXPECT_NE(nvmlProbe(lib_).find(dir_ + ": folder holding the NVML library is writable by its group"),
            std::string::npos)
      << nvmlProbe(lib_);
  ::chmod(dir_.c_str(), 0700);
  ASSERT_EQ(::geteuid(), 0u) << "the owner cases need root (the suites run as root)";
  ASSERT_EQ(::chown(lib_.c_str(), 65534, 65534), 0) << std::strerror(errno);
  EXPECT_NE(nvmlProbe(lib_).find(": NVML library is owned by nobody, neither root nor root who runs taehv-run"),
            std::string::npos)
      << nvmlProbe(lib_);
  ASSERT_EQ(::chown(lib_.c_str(), 0, 0), 0);
  EXPECT_EQ(nvmlProbe(lib_), "8 GPUs; error: ") << "safe again: loads";

  // A link, as drivers install it (libnvidia-ml.so.1 -> libnvidia-ml.so.550.54.15): the folder of the file it points
  // to is checked too.
  const std::string link = dir_ + "/linked.so";
  ASSERT_EQ(::symlink(lib_.c_str(), link.c_str()), 0);
  EXPECT_EQ(nvmlProbe(link), "8 GPUs; error: ") << "a link beside its file loads";
  const std::string other = dir_ + "/other";
  std::filesystem::create_directory(other);
  std::filesystem::rename(lib_, other + "/libnvidia-ml.so.1");
  ASSERT_EQ(::symlink((other + "/libnvidia-ml.so.1").c_str(), lib_.c_str()), 0);
  ::chmod(other.c_str(), 0775);
  EXPECT_NE(nvmlProbe(lib_).find(other + ": folder of the file the NVML library links to is writable by its group"),
            std::string::npos)
      << nvmlProbe(lib_);
}

TEST(SizingVisibleGpus, AllWhenNothingRestricts) {
  VisibleGpus v = visibleGpus(nvmlLike(8), {});
  EXPECT_EQ(v.gpus.size(), 8u);
  EXPECT_TRUE(v.warnings.empty());
  EXPECT_NE(v.source.find("all GPUs"), std::string::npos);
}

TEST(SizingVisibleGpus, IndicesKeepTheirPhysicalToken) {
  VisibleGpus v = visibleGpus(nvmlLike(8), {{"CUDA_VISIBLE_DEVICES", "6, 2"}});
  EXPECT_EQ(tokens(v), (std::vector<std::string>{"6", "2"}));
  EXPECT_EQ(v.gpus[0].ordinal, 6);
  EXPECT_TRUE(v.warnings.empty());
}

TEST(SizingVisibleGpus, EmptyMeansNoGpu) {
  VisibleGpus v = visibleGpus(nvmlLike(8), {{"CUDA_VISIBLE_DEVICES", ""}});
  EXPECT_TRUE(v.gpus.empty());
}

TEST(SizingVisibleGpus, UuidsAndUniquePrefixes) {
  GpuInventory inv = nvmlLike(4);
  VisibleGpus v = visibleGpus(inv, {{"CUDA_VISIBLE_DEVICES", inv.gpus[2].uuid + ",GPU-b0"}});
  ASSERT_EQ(v.gpus.size(), 2u);
  EXPECT_EQ(v.gpus[0].ordinal, 2);
  EXPECT_EQ(v.gpus[0].device_token, inv.gpus[2].uuid);
  EXPECT_EQ(v.gpus[1].ordinal, 1);
  EXPECT_EQ(v.gpus[1].device_token, "GPU-b0");
}

TEST(SizingVisibleGpus, AmbiguousPrefixStopsTheList) {
  VisibleGpus v = visibleGpus(nvmlLike(4), {{"CUDA_VISIBLE_DEVICES", "1,GPU-,0"}});
  EXPECT_EQ(tokens(v), (std::vector<std::string>{"1"}));
  ASSERT_EQ(v.warnings.size(), 1u);
  EXPECT_NE(v.warnings[0].find("ambiguous"), std::string::npos) << v.warnings[0];
  EXPECT_NE(v.warnings[0].find("ignores 0"), std::string::npos) << v.warnings[0];
}

TEST(SizingVisibleGpus, InvalidIndexStopsTheListAsCudaDoes) {
  VisibleGpus v = visibleGpus(nvmlLike(8), {{"CUDA_VISIBLE_DEVICES", "0,1,9,2"}});
  EXPECT_EQ(tokens(v), (std::vector<std::string>{"0", "1"}));
  ASSERT_EQ(v.warnings.size(), 1u);
  EXPECT_NE(v.warnings[0].find("index 9 does not exist"), std::string::npos) << v.warnings[0];
  EXPECT_NE(v.warnings[0].find("ignores 2"), std::string::npos) << v.warnings[0];
}

TEST(SizingVisibleGpus, MinusOneHidesEverything) {
  VisibleGpus v = visibleGpus(nvmlLike(2), {{"CUDA_VISIBLE_DEVICES", "-1"}});
  EXPECT_TRUE(v.gpus.empty());
  EXPECT_EQ(v.warnings.size(), 1u);
}

TEST(SizingVisibleGpus, DuplicatesStopTheList) {
  VisibleGpus v = visibleGpus(nvmlLike(4), {{"CUDA_VISIBLE_DEVICES", "1,1,2"}});
  EXPECT_EQ(tokens(v), (std::vector<std::string>{"1"}));
  EXPECT_NE(v.warnings.at(0).find("repeats"), std::string::npos);
}

TEST(SizingVisibleGpus, MigInstancesCountOneEach) {
  VisibleGpus v = visibleGpus(nvmlLike(1), {{"CUDA_VISIBLE_DEVICES", "MIG-aaaa-bbbb,MIG-cccc-dddd"}});
  EXPECT_EQ(tokens(v), (std::vector<std::string>{"MIG-aaaa-bbbb", "MIG-cccc-dddd"}));
}

Sourced<std::string> schedulerList(const std::string& list, const std::string& source) {
  Sourced<std::string> out;
  out.set(list, source, Origin::kBackend);
  return out;
}

TEST(SizingVisibleGpus, SchedulerListWhenCudaVisibleDevicesUnset) {
  VisibleGpus v = visibleGpus(nvmlLike(8), {}, schedulerList("0,3", "env SLURM_STEP_GPUS"));
  EXPECT_EQ(tokens(v), (std::vector<std::string>{"0", "3"}));
  EXPECT_NE(v.source.find("SLURM_STEP_GPUS"), std::string::npos);
  EXPECT_TRUE(v.from_scheduler_list);
  v = visibleGpus(nvmlLike(8), {}, schedulerList("4-6", "env SLURM_JOB_GPUS"));
  EXPECT_EQ(tokens(v), (std::vector<std::string>{"4", "5", "6"}));
  v = visibleGpus(nvmlLike(8), {{"CUDA_VISIBLE_DEVICES", "1"}}, schedulerList("4-6", "env SLURM_JOB_GPUS"));
  EXPECT_EQ(tokens(v), (std::vector<std::string>{"1"})) << "CUDA_VISIBLE_DEVICES wins over the scheduler's list";
  // Sizing reads no scheduler's variables itself: only a backend's plan brings the list.
  v = visibleGpus(nvmlLike(8), {{"SLURM_JOB_GPUS", "4-6"}});
  EXPECT_EQ(v.gpus.size(), 8u);
  EXPECT_FALSE(v.from_scheduler_list);
}

TEST(SizingVisibleGpus, BadSchedulerListIsIgnoredWithAWarning) {
  VisibleGpus v = visibleGpus(nvmlLike(2), {}, schedulerList("gpu:a100:2", "env SLURM_JOB_GPUS"));
  EXPECT_EQ(v.gpus.size(), 2u);
  ASSERT_EQ(v.warnings.size(), 1u);
  EXPECT_NE(v.warnings[0].find("SLURM_JOB_GPUS"), std::string::npos) << v.warnings[0];
}

TEST(SizingVisibleGpus, CudaDriverInventoryIsAlreadyFiltered) {
  GpuInventory inv = nvmlLike(2);
  inv.filtered_by_process_env = true;
  VisibleGpus v = visibleGpus(inv, {{"CUDA_VISIBLE_DEVICES", "5,7"}});
  EXPECT_EQ(tokens(v), (std::vector<std::string>{"5", "7"})) << "device i maps back to the i-th entry";
}

TEST(SizingFormatBytes, GibAndMib) {
  EXPECT_EQ(formatBytes(80ull << 30), "80 GiB");
  EXPECT_EQ(formatBytes(512ull << 20), "512 MiB");
}

}  // namespace
}  // namespace taehv::sizing
