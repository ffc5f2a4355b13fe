// sizeNode: the whole decision for a node. The GPU source is a test double (FixedGpuProbe): no GPU exists on the
// test machines, so a count > 0 can only be made up; the CPU-only path also runs with the real system probe.
#include "taehv/sizing/sizing.h"

#include <gtest/gtest.h>

namespace taehv::sizing {
namespace {

/// A fake GPU source with `n` H100s (see the file comment).
class FixedGpuProbe final : public GpuProbe {
 public:
  explicit FixedGpuProbe(int n) : n_(n) {}
  GpuInventory probe() const override {
    GpuInventory inv;
    inv.source = "fixed test probe";
    for (int i = 0; i < n_; ++i) {
      GpuInfo g;
      g.ordinal = i;
      g.name = "NVIDIA H100 80GB HBM3";
      g.memory_bytes = 80ull << 30;
      g.device_token = std::to_string(i);
      inv.gpus.push_back(g);
    }
    return inv;
  }

 private:
  int n_;
};

TEST(SizingNode, EightGpuNodeOfTwoWithAutoWorkers) {
  FixedGpuProbe probe(8);
  NodeSizingInput in;
  in.nnodes = 2;
  in.master_addr = "127.0.0.1";
  in.probe = &probe;
  NodeSizing s = sizeNode(in);
  ASSERT_TRUE(s.ok()) << s.error();
  EXPECT_EQ(*s.nproc.nproc_per_node.value, 8);
  auto env = s.nodeEnv();
  EXPECT_EQ(*env.at("TAEHV_COLLECTIVE_TIMEOUT_S").value, "7200");
  EXPECT_EQ(*env.at("NCCL_BUFFSIZE").value, "16777216");
  EXPECT_EQ(*env.at("NCCL_SOCKET_IFNAME").value, "=lo");
  EXPECT_EQ(*s.workerEnv(5).at(kDeviceEnv).value, "cuda:5");
  bool loopback_flagged = false;
  for (const auto& n : s.notes()) loopback_flagged |= n.find("other nodes cannot reach it") != std::string::npos;
  EXPECT_TRUE(loopback_flagged);
}

TEST(SizingNode, RefusalStillReportsTheTuningForTheDoctor) {
  FixedGpuProbe probe(8);
  NodeSizingInput in;
  in.nnodes = 2;
  in.nproc_requested.set(16, "flag --nproc-per-node");
  in.probe = &probe;
  NodeSizing s = sizeNode(in);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("did you mean --nnodes 2 --nproc-per-node 8?"), std::string::npos) << s.error();
  EXPECT_EQ(s.nodeEnv().count("NCCL_BUFFSIZE"), 1u);
}

TEST(SizingNode, CpuOnlyNodeWithTheRealProbe) {
  NodeSizingInput in;
  in.env = {{kNvmlLibraryEnv, "/nonexistent/libnvidia-ml.so.1"}, {kCudaDriverLibraryEnv, "/nonexistent/libcuda.so.1"}};
  in.master_addr = "127.0.0.1";
  NodeSizing s = sizeNode(in);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s.nproc.nproc_per_node.value, 1);
  EXPECT_FALSE(s.nproc.use_gpus);
  auto env = s.nodeEnv();
  EXPECT_EQ(env.count("NCCL_BUFFSIZE"), 0u);
  EXPECT_EQ(*env.at("GLOO_SOCKET_IFNAME").value, "lo");
  EXPECT_EQ(*s.workerEnv(0).at(kDeviceEnv).value, "cpu");
  ASSERT_FALSE(s.notes().empty());
  EXPECT_NE(s.notes()[0].find("not found"), std::string::npos) << s.notes()[0];
}

TEST(SizingNode, VisibleDevicesBinding) {
  FixedGpuProbe probe(4);
  NodeSizingInput in;
  in.env = {{"CUDA_VISIBLE_DEVICES", "3,1"}};
  in.binding = GpuBinding::kVisibleDevices;
  in.probe = &probe;
  NodeSizing s = sizeNode(in);
  ASSERT_TRUE(s.ok()) << s.error();
  EXPECT_EQ(*s.nproc.nproc_per_node.value, 2);
  auto w1 = s.workerEnv(1);
  EXPECT_EQ(*w1.at("CUDA_VISIBLE_DEVICES").value, "1");
  EXPECT_EQ(*w1.at(kDeviceEnv).value, "cuda:0");
}

}  // namespace
}  // namespace taehv::sizing
