// GPU detection. This machine has no GPU and no NVIDIA driver: the real NVML/CUDA libraries are absent, which is
// the "no GPU -> CPU workers" path tested here for real. GPU counts > 0 come from a fake inventory (a GpuProbe
// test double) or from tests/core/sizing/fake_nvml.cc, a fake libnvidia-ml loaded through the real dlopen path.
#include "taehv/sizing/gpu.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

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
