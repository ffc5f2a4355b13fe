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

TEST(SizingNproc, FewerWorkersThanGpusIsFineWithANote) {
  NprocDecision d = decideNprocPerNode(asked(node(8), 2));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d.nproc_per_node.value, 2);
  EXPECT_EQ(d.nproc_per_node.source, "flag --nproc-per-node");
  EXPECT_EQ(d.notes.size(), 1u);
}

TEST(SizingNproc, TotalGpusGivenPerNodeOnTwoNodesIsRefusedWithTheFix) {
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

TEST(SizingWorkerGpu, LocalRankBindingSetsNoVariable) {
  WorkerGpu w = workerGpu(twoOfEight(), 1, true, GpuBinding::kLocalRank);
  EXPECT_EQ(w.device, "cuda:1");
  EXPECT_TRUE(w.env.empty());
}

TEST(SizingWorkerGpu, CpuWorker) {
  WorkerGpu w = workerGpu({}, 0, false, GpuBinding::kVisibleDevices);
  EXPECT_EQ(w.device, "cpu");
  EXPECT_TRUE(w.env.empty());
}

}  // namespace
}  // namespace taehv::sizing
