// Communication tuning: tiers by node count, the user's settings winning, the interface that routes to the master
// (real kernel routing for loopback; fabricated /proc/net/route tables and a fake sysfs tree for the rest).
#include "taehv/sizing/tuning.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "taehv/sizing/network.h"

namespace taehv::sizing {
namespace {
namespace fs = std::filesystem;

Checked<RouteChoice> fakeRoute(const std::string& iface) {
  Checked<RouteChoice> r;
  r.value.interface = iface;
  r.value.local_address = "10.0.0.5";
  r.value.how = "fake route via " + iface;
  return r;
}

TuningInput gpuJob(int nnodes) {
  TuningInput in;
  in.nnodes = nnodes;
  in.master_addr = "node0";
  in.use_gpus = true;
  in.sysfs_root = "/nonexistent-sysfs";
  in.find_interface = [](const std::string&) { return fakeRoute("ib0"); };
  return in;
}

std::string value(const Tuning& t, const std::string& name) {
  auto it = t.env.find(name);
  return it == t.env.end() || !it->second.has() ? "<unset>" : *it->second.value;
}

TEST(SizingTuning, TiersFollowTheNodeCount) {
  struct Case {
    int nodes;
    const char* timeout;
    const char* buffsize;
  };
  for (Case c : {Case{1, "3600", "16777216"}, Case{2, "7200", "16777216"}, Case{7, "7200", "16777216"},
                 Case{8, "14400", "33554432"}, Case{64, "14400", "33554432"}}) {
    Tuning t = computeTuning(gpuJob(c.nodes));
    EXPECT_EQ(value(t, kCollectiveTimeoutEnv), c.timeout) << c.nodes << " nodes";
    EXPECT_EQ(value(t, "NCCL_BUFFSIZE"), c.buffsize) << c.nodes << " nodes";
  }
  Tuning t = computeTuning(gpuJob(3));
  EXPECT_NE(t.env[kCollectiveTimeoutEnv].source.find("default for 2-7 nodes (this job: 3 nodes)"), std::string::npos)
      << t.env[kCollectiveTimeoutEnv].source;
}

TEST(SizingTuning, FlagsOverrideTheTiers) {
  TuningPolicy p;
  p.collective_timeout.set(std::chrono::seconds(900), "flag --collective-timeout");
  p.nccl_buffsize_bytes.set(64ull << 20, "flag --nccl-buffsize");
  Tuning t = computeTuning(gpuJob(8), p);
  EXPECT_EQ(value(t, kCollectiveTimeoutEnv), "900");
  EXPECT_EQ(value(t, "NCCL_BUFFSIZE"), "67108864");
  EXPECT_NE(t.env["NCCL_BUFFSIZE"].source.find("flag --nccl-buffsize (64 MiB)"), std::string::npos);
}

TEST(SizingTuning, CustomTiers) {
  TuningPolicy p;
  p.tiers = {{1, std::chrono::seconds(60), 1 << 20}, {4, std::chrono::seconds(120), 2 << 20}};
  EXPECT_EQ(value(computeTuning(gpuJob(3), p), kCollectiveTimeoutEnv), "60");
  EXPECT_EQ(value(computeTuning(gpuJob(4), p), kCollectiveTimeoutEnv), "120");
}

TEST(SizingTuning, TheUsersSettingsWin) {
  TuningInput in = gpuJob(8);
  in.env = {{"NCCL_BUFFSIZE", "4194304"},
            {"NCCL_SOCKET_IFNAME", "eth1"},
            {kCollectiveTimeoutEnv, "100"},
            {"NCCL_DEBUG", "INFO"}};
  Tuning t = computeTuning(in);
  EXPECT_EQ(value(t, "NCCL_BUFFSIZE"), "4194304");
  EXPECT_NE(t.env["NCCL_BUFFSIZE"].source.find("set in your environment, kept (taehv-run would use 33554432"),
            std::string::npos)
      << t.env["NCCL_BUFFSIZE"].source;
  EXPECT_EQ(value(t, "NCCL_SOCKET_IFNAME"), "eth1");
  EXPECT_EQ(value(t, kCollectiveTimeoutEnv), "100");
  EXPECT_EQ(value(t, "GLOO_SOCKET_IFNAME"), "ib0") << "not set by the user, so chosen";
  EXPECT_EQ(value(t, "NCCL_DEBUG"), "INFO");
  EXPECT_NE(t.env["NCCL_DEBUG"].source.find("passed through"), std::string::npos);
}

TEST(SizingTuning, InterfaceUsesNcclExactMatchSyntaxAndPlainNameForGloo) {
  Tuning t = computeTuning(gpuJob(2));
  EXPECT_EQ(value(t, "NCCL_SOCKET_IFNAME"), "=ib0");
  EXPECT_EQ(value(t, "GLOO_SOCKET_IFNAME"), "ib0");
  EXPECT_NE(t.env["GLOO_SOCKET_IFNAME"].source.find("fake route via ib0"), std::string::npos);
}

TEST(SizingTuning, CpuJobsGetNoNcclVariables) {
  TuningInput in = gpuJob(2);
  in.use_gpus = false;
  in.env = {{"NCCL_DEBUG", "INFO"}};
  Tuning t = computeTuning(in);
  EXPECT_EQ(value(t, "NCCL_BUFFSIZE"), "<unset>");
  EXPECT_EQ(value(t, "NCCL_SOCKET_IFNAME"), "<unset>");
  EXPECT_EQ(value(t, "GLOO_SOCKET_IFNAME"), "ib0");
  EXPECT_EQ(value(t, kCollectiveTimeoutEnv), "7200");
}

TEST(SizingTuning, RealRouteToLoopbackMasterIsLo) {
  TuningInput in;
  in.nnodes = 1;
  in.master_addr = "127.0.0.1";
  in.use_gpus = true;
  in.sysfs_root = "/nonexistent-sysfs";
  Tuning t = computeTuning(in);
  EXPECT_EQ(value(t, "NCCL_SOCKET_IFNAME"), "=lo");
  EXPECT_EQ(value(t, "GLOO_SOCKET_IFNAME"), "lo");
}

TEST(SizingTuning, LoopbackMasterForSeveralNodesIsFlagged) {
  TuningInput in = gpuJob(2);
  in.find_interface = [](const std::string&) { return fakeRoute("lo"); };
  Tuning t = computeTuning(in);
  bool flagged = false;
  for (const auto& n : t.notes) flagged |= n.find("other nodes cannot reach it") != std::string::npos;
  EXPECT_TRUE(flagged);
}

TEST(SizingTuning, UnresolvableMasterLeavesInterfacesToTheLibraries) {
  TuningInput in = gpuJob(2);
  in.find_interface = nullptr;
  in.master_addr = "no-such-host.invalid";
  Tuning t = computeTuning(in);
  EXPECT_EQ(value(t, "GLOO_SOCKET_IFNAME"), "<unset>");
  ASSERT_FALSE(t.notes.empty());
  EXPECT_NE(t.notes[0].find("cannot resolve"), std::string::npos) << t.notes[0];
}

class SizingFakeSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/taehv-sizing-sysfs-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }
  void hca(const std::string& name, const std::vector<std::string>& port_states) {
    for (std::size_t i = 0; i < port_states.size(); ++i) {
      fs::path port = fs::path(root_) / "class/infiniband" / name / "ports" / std::to_string(i + 1);
      fs::create_directories(port);
      std::ofstream(port / "state") << port_states[i] << "\n";
    }
  }
  std::string root_;
};

TEST_F(SizingFakeSysfs, ActiveHcasBecomeNcclIbHca) {
  hca("mlx5_1", {"4: ACTIVE"});
  hca("mlx5_0", {"1: DOWN", "4: ACTIVE"});
  hca("mlx5_2", {"1: DOWN"});
  TuningInput in = gpuJob(2);
  in.sysfs_root = root_;
  Tuning t = computeTuning(in);
  EXPECT_EQ(value(t, "NCCL_IB_HCA"), "=mlx5_0,mlx5_1");
  bool noted = false;
  for (const auto& n : t.notes) noted |= n.find("mlx5_2") != std::string::npos;
  EXPECT_TRUE(noted) << "the HCA without an active port is mentioned";
}

TEST_F(SizingFakeSysfs, NoHcaOnAMultiNodeJobIsNoted) {
  TuningInput in = gpuJob(2);
  in.sysfs_root = root_;
  Tuning t = computeTuning(in);
  EXPECT_EQ(value(t, "NCCL_IB_HCA"), "<unset>");
  bool noted = false;
  for (const auto& n : t.notes) noted |= n.find("TCP sockets") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(SizingParseByteSize, UnitsAndErrors) {
  EXPECT_EQ(parseByteSize("16M"), 16ull << 20);
  EXPECT_EQ(parseByteSize("32 MiB"), 32ull << 20);
  EXPECT_EQ(parseByteSize("4194304"), 4194304ull);
  EXPECT_EQ(parseByteSize("1g"), 1ull << 30);
  EXPECT_FALSE(parseByteSize("").has_value());
  EXPECT_FALSE(parseByteSize("16X").has_value());
  EXPECT_FALSE(parseByteSize("-1M").has_value());
  EXPECT_FALSE(parseByteSize("0").has_value());
}

TEST(SizingRouteTable, LongestPrefixWins) {
  const std::string table =
      "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
      "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"  // default via 192.0.2.1
      "eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"  // 192.0.2.0/24
      "ib0\t0000000A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n"   // 10.0.0.0/16
      "ib1\t0001000A\t00000000\t0000\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";  // 10.0.1.0/24, not up
  EXPECT_EQ(routeInterfaceFromTable(table, "10.0.3.7"), "ib0");
  EXPECT_EQ(routeInterfaceFromTable(table, "10.0.1.7"), "ib0") << "a route that is not up is skipped";
  EXPECT_EQ(routeInterfaceFromTable(table, "192.0.2.9"), "eth0");
  EXPECT_EQ(routeInterfaceFromTable(table, "8.8.8.8"), "eth0");
  EXPECT_FALSE(routeInterfaceFromTable("Iface\n", "8.8.8.8").has_value());
  EXPECT_FALSE(routeInterfaceFromTable(table, "not-an-ip").has_value());
}

TEST(SizingRouteTable, KernelAndTableAgreeOnThisMachine) {
  // Cross-check the connected-UDP method against this machine's own routing table for its default route.
  std::ifstream f("/proc/net/route");
  std::stringstream text;
  text << f.rdbuf();
  auto via_table = routeInterfaceFromTable(text.str(), "203.0.113.7");  // TEST-NET-3: only a default route fits
  if (!via_table) GTEST_SKIP() << "no default route here";
  Checked<RouteChoice> r = interfaceForDestination("203.0.113.7");  // no packet is sent
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.value.interface, *via_table);
}

}  // namespace
}  // namespace taehv::sizing
