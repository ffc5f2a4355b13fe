// --nproc-per-node auto, the GPU-vs-workers refusal and per-worker GPU binding. GPU counts are plain numbers here
// (no GPU exists on the test machines; see gpu_test.cc for how counts are detected).
#include "taehv/sizing/workers.h"

#include <gtest/gtest.h>

namespace taehv::sizing {
namespace {

NprocInput node(int gpus, int nnodes = 1) {
  NprocInput in;
  in.visible_gpus = gpus;
  in.gpu_source = "all GPUs over NVML (" + std::to_string(gpus) + " GPUs)";
  in.nnodes = nnodes;
  return in;
}

NprocInput asked(NprocInput in, int n) {
  in.requested.set(n, "flag --nproc-per-node");
  return in;
}

TEST(SizingNproc, AutoIsOnePerVisibleGpu) {
  NprocDecision d = decideNprocPerNode(node(8));
  ASSERT_TRUE(d.ok()) << d.error;
  EXPECT_EQ(*d.nproc_per_node.value, 8);
  EXPECT_TRUE(d.use_gpus);
  EXPECT_NE(d.nproc_per_node.source.find("one worker per visible GPU"), std::string::npos);
}

TEST(SizingNproc, AutoOnACpuNodeIsOneGlooWorker) {
  NprocDecision d = decideNprocPerNode(node(0));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d.nproc_per_node.value, 1);
  EXPECT_FALSE(d.use_gpus);
  EXPECT_NE(d.nproc_per_node.source.find("Gloo"), std::string::npos);
}

TEST(SizingNproc, CpuNodeTakesAnyWorkerCount) {
  NprocDecision d = decideNprocPerNode(asked(node(0), 4));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d.nproc_per_node.value, 4);
  EXPECT_FALSE(d.use_gpus);
}

// Issue 17, kind 3: --nproc-per-node 100000 on a 2-core CPU node forked until fork failed.
TEST(HostileCpuWorkers, FarMoreCpuWorkersThanCoresNeedOversubscribe) {
  NprocInput in = asked(node(0), 100000);
  in.gpu_source = "no GPU (NVML: no driver)";
  in.cpu_cores = 2;
  NprocDecision d = decideNprocPerNode(in);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error.find("--nproc-per-node 100000 (flag --nproc-per-node) asks for 100000 CPU workers"),
            std::string::npos)
      << d.error;
  EXPECT_NE(d.error.find("2 usable cores; at most 8 (4 per core) start without --oversubscribe"), std::string::npos)
      << d.error;
  EXPECT_NE(d.error.find("use --nproc-per-node 2 or fewer, or add --oversubscribe"), std::string::npos) << d.error;

  in.requested.set(9, "flag --nproc-per-node");
  EXPECT_FALSE(decideNprocPerNode(in).ok());
  in.oversubscribe = true;  // the user says they mean it
  d = decideNprocPerNode(in);
  ASSERT_TRUE(d.ok()) << d.error;
  EXPECT_EQ(*d.nproc_per_node.value, 9);
  ASSERT_EQ(d.notes.size(), 1u);
  EXPECT_NE(d.notes[0].find("9 CPU workers share 2 cores"), std::string::npos) << d.notes[0];
}

TEST(HostileCpuWorkers, UpToFourPerCoreStartWithANoteAndNoneAtOrBelowTheCores) {
  NprocInput in = asked(node(0), 8);
  in.cpu_cores = 2;
  NprocDecision d = decideNprocPerNode(in);
  ASSERT_TRUE(d.ok()) << d.error;
  EXPECT_EQ(d.notes.size(), 1u);
  in.requested.set(2, "flag --nproc-per-node");
  d = decideNprocPerNode(in);
  ASSERT_TRUE(d.ok()) << d.error;
  EXPECT_TRUE(d.notes.empty());
  // A platform that starts every worker itself (one task each) has made its processes already.
  in.requested.set(64, "env SLURM_NTASKS_PER_NODE");
  in.single_worker = true;
  EXPECT_TRUE(decideNprocPerNode(in).ok());
}

TEST(SizingNproc, FewerWorkersThanGpusIsFineWithANote) {
  NprocDecision d = decideNprocPerNode(asked(node(8), 2));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d.nproc_per_node.value, 2);
  EXPECT_EQ(d.nproc_per_node.source, "flag --nproc-per-node");
  EXPECT_EQ(d.notes.size(), 1u);
}

TEST(SizingNproc, TotalGpusGivenPerNodeOnTwoNodesIsRefusedWithTheFix) {
  // (default binding: local-rank)
  // The seeds' "CUDA error: invalid device ordinal": 16 = 2 nodes x 8 GPUs given as the per-node count.
  NprocDecision d = decideNprocPerNode(asked(node(8, 2), 16));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error.find("did you mean --nnodes 2 --nproc-per-node 8?"), std::string::npos) << d.error;
  EXPECT_NE(d.error.find("has 8 GPUs"), std::string::npos) << d.error;
  EXPECT_NE(d.error.find("one of 2 nodes"), std::string::npos) << d.error;
}

TEST(SizingNproc, TotalGpusOnASingleNodeJobSuggestsTheNodeCount) {
  NprocDecision d = decideNprocPerNode(asked(node(8, 1), 64));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error.find("did you mean --nnodes 8 --nproc-per-node 8?"), std::string::npos) << d.error;
}

TEST(SizingNproc, UnevenOversubscriptionSuggestsTheGpuCount) {
  NprocDecision d = decideNprocPerNode(asked(node(8), 12));
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error.find("use --nproc-per-node 8"), std::string::npos) << d.error;
}

TEST(SizingNproc, BindingNoneAllowsSharingGpus) {
  NprocInput in = asked(node(2), 4);
  in.binding = GpuBinding::kNone;
  NprocDecision d = decideNprocPerNode(in);
  ASSERT_TRUE(d.ok()) << d.error;
  EXPECT_EQ(*d.nproc_per_node.value, 4);
}

TEST(SizingNproc, ZeroIsRefused) {
  NprocDecision d = decideNprocPerNode(asked(node(8), 0));
  EXPECT_FALSE(d.ok());
  EXPECT_NE(d.error.find("at least 1"), std::string::npos);
}

TEST(SizingNproc, SchedulerCountDifferingFromDetectedIsNoted) {
  NprocInput in = node(4);
  in.scheduler_gpus.set(8, "env SLURM_GPUS_ON_NODE");
  NprocDecision d = decideNprocPerNode(in);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d.nproc_per_node.value, 4);
  ASSERT_EQ(d.notes.size(), 1u);
  EXPECT_NE(d.notes[0].find("SLURM_GPUS_ON_NODE"), std::string::npos);
}

TEST(SizingGpuBindingName, RoundTrips) {
  for (GpuBinding b : {GpuBinding::kVisibleDevices, GpuBinding::kLocalRank, GpuBinding::kNone}) {
    EXPECT_EQ(parseGpuBinding(gpuBindingName(b)), b);
  }
  EXPECT_FALSE(parseGpuBinding("visible").has_value());
}

VisibleGpus twoOfEight() {
  VisibleGpus v;
  for (int i : {6, 2}) {
    GpuInfo g;
    g.ordinal = i;
    g.name = "NVIDIA H100 80GB HBM3";
    g.memory_bytes = 80ull << 30;
    g.device_token = std::to_string(i);
    v.gpus.push_back(g);
  }
  return v;
}

TEST(SizingWorkerGpu, VisibleDevicesGivesEachWorkerOnlyItsGpu) {
  WorkerGpu w = workerGpu(twoOfEight(), 1, true, GpuBinding::kVisibleDevices);
  EXPECT_EQ(w.device, "cuda:0");
  ASSERT_TRUE(w.env.count("CUDA_VISIBLE_DEVICES"));
  EXPECT_EQ(*w.env["CUDA_VISIBLE_DEVICES"].value, "2") << "the physical GPU of the second visible entry";
  EXPECT_NE(w.env["CUDA_VISIBLE_DEVICES"].source.find("local rank 1 owns GPU 2 (NVIDIA H100 80GB HBM3, 80 GiB)"),
            std::string::npos)
      << w.env["CUDA_VISIBLE_DEVICES"].source;
}

TEST(SizingWorkerGpu, LocalRankBindingIsTheTorchrunContract) {
  WorkerGpu w = workerGpu(twoOfEight(), 1, true, GpuBinding::kLocalRank);
  EXPECT_EQ(w.device, "cuda:1");
  EXPECT_EQ(w.env.count("CUDA_VISIBLE_DEVICES"), 0u) << "workers inherit the node's CUDA_VISIBLE_DEVICES";
  ASSERT_TRUE(w.env.count(kDeviceEnv));
  EXPECT_EQ(*w.env[kDeviceEnv].value, "cuda:1");
  EXPECT_EQ(NprocInput().binding, GpuBinding::kLocalRank) << "the default keeps unchanged PyTorch scripts working";
}

TEST(SizingWorkerGpu, SchedulerListIsExportedForLocalRankBinding) {
  VisibleGpus v = twoOfEight();
  v.from_scheduler_list = true;
  v.source = "SLURM_JOB_GPUS=6,2 over NVML (8 GPUs)";
  WorkerGpu w = workerGpu(v, 0, true, GpuBinding::kLocalRank);
  ASSERT_TRUE(w.env.count("CUDA_VISIBLE_DEVICES"));
  EXPECT_EQ(*w.env["CUDA_VISIBLE_DEVICES"].value, "6,2");
  EXPECT_EQ(w.device, "cuda:0");
}

TEST(SizingWorkerGpu, SingleWorkerTaskWithItsOwnGpuUsesCuda0) {
  VisibleGpus v = twoOfEight();
  v.gpus.resize(1);
  WorkerGpu w = workerGpu(v, 5, true, GpuBinding::kLocalRank);
  EXPECT_EQ(w.device, "cuda:0");
  EXPECT_EQ(*w.env[kDeviceEnv].value, "cuda:0");
  EXPECT_NE(w.env[kDeviceEnv].source.find("bound by the platform"), std::string::npos);
}

TEST(SizingNproc, SingleWorkerTasksSeeingOneGpuEachAreFine) {
  NprocInput in = asked(node(1), 8);
  in.single_worker = true;
  NprocDecision d = decideNprocPerNode(in);
  ASSERT_TRUE(d.ok()) << d.error;
  EXPECT_TRUE(d.use_gpus);
  in.single_worker = false;
  EXPECT_FALSE(decideNprocPerNode(in).ok()) << "8 workers started by taehv-run on a 1-GPU node are refused";
}

TEST(SizingWorkerGpu, CpuWorker) {
  WorkerGpu w = workerGpu({}, 0, false, GpuBinding::kLocalRank);
  EXPECT_EQ(w.device, "cpu");
  EXPECT_EQ(*w.env[kDeviceEnv].value, "cpu");
  EXPECT_EQ(w.env.size(), 1u);
}

TEST(SizingWorkerGpu, BindingNoneSetsNothing) {
  WorkerGpu w = workerGpu(twoOfEight(), 0, true, GpuBinding::kNone);
  EXPECT_TRUE(w.env.empty());
}

}  // namespace
}  // namespace taehv::sizing
