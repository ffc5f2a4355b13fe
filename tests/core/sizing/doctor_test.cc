// The doctor's checks: the failure path of every check, and the pass path, on real sockets (loopback), real
// files and real libraries where this machine has them; facts that cannot occur here (a GPU decision, an
// interface that is down) are made up and passed in, as the CLI passes its own.
#include "taehv/sizing/doctor.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

namespace taehv::sizing {
namespace {
namespace fs = std::filesystem;
using std::chrono::milliseconds;

/// A TCP listener on 127.0.0.1 with the given backlog; port() is its port.
class Listener {
 public:
  explicit Listener(int backlog = 16) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, backlog);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~Listener() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

/// A port on 127.0.0.1 with nothing listening (bound, then released).
int closedPort() {
  Listener l;
  return l.port();
}

class SizingDoctorFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/taehv-sizing-doctor-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

DescriptorFacts goodDescriptor(int nnodes = 1, int node_rank = 0, const std::string& master = "127.0.0.1") {
  DescriptorFacts f;
  f.nnodes.set(nnodes, "flag --nnodes");
  f.node_rank.set(node_rank, "flag --node-rank");
  f.nproc_per_node.set(2, "flag --nproc-per-node");
  f.master_addr.set(master, "flag --master-addr");
  f.master_port.set(29500, "default");
  return f;
}

TEST(SizingCheckEnvironment, TieFailsAndNamesTheFix) {
  CheckResult r = checkEnvironment({{"slurm", 90, "SLURM_JOB_ID"}, {"k8s", 90, "JOB_COMPLETION_INDEX"}}, {}, "",
                                   "both slurm and k8s claim this environment");
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_NE(r.fix.find("--backend"), std::string::npos);
}

TEST(SizingCheckEnvironment, PluginLoadErrorsWarnAndADetectionPasses) {
  EXPECT_EQ(checkEnvironment({}, {"taehv_plugin_x.so: wrong API version"}, "local", "").status, CheckStatus::kWarn);
  CheckResult r = checkEnvironment({{"slurm", 95, "SLURM_JOB_ID=4"}}, {}, "slurm", "");
  EXPECT_EQ(r.status, CheckStatus::kPass);
  EXPECT_NE(r.detail.find("SLURM_JOB_ID=4"), std::string::npos) << r.detail;
}

TEST(SizingCheckDescriptor, ResolveErrorFails) {
  DescriptorFacts f;
  f.error = "--node-rank 3 is out of range for --nnodes 2";
  CheckResult r = checkDescriptor(f);
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_EQ(r.detail, f.error);
  EXPECT_FALSE(r.fix.empty());
}

TEST(SizingCheckDescriptor, IncompletePlanFails) {
  DescriptorFacts f = goodDescriptor();
  f.master_addr = {};
  EXPECT_EQ(checkDescriptor(f).status, CheckStatus::kFail);
}

TEST(SizingCheckDescriptor, LoopbackMasterForSeveralNodesFails) {
  CheckResult r = checkDescriptor(goodDescriptor(2, 1, "127.0.0.1"));
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_NE(r.detail.find("loopback"), std::string::npos) << r.detail;
  EXPECT_EQ(checkDescriptor(goodDescriptor(1, 0, "127.0.0.1")).status, CheckStatus::kPass);
}

TEST(SizingCheckDescriptor, StaleLauncherVariablesWarn) {
  DescriptorFacts f = goodDescriptor();
  f.env = {{"WORLD_SIZE", "8"}, {"RANK", "1"}};
  CheckResult r = checkDescriptor(f);
  EXPECT_EQ(r.status, CheckStatus::kWarn);
  EXPECT_NE(r.fix.find("WORLD_SIZE=8"), std::string::npos) << r.fix;
  EXPECT_EQ(r.fix.find("RANK=1"), std::string::npos) << "RANK=1 fits a world of 2";
}

TEST(SizingCheckMaster, UnresolvableNameFails) {
  CheckResult r = checkMasterReachable("no-such-host.invalid", 29500, false, milliseconds(500));
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_NE(r.detail.find("does not resolve"), std::string::npos) << r.detail;
}

TEST(SizingCheckMaster, ListeningPortPasses) {
  Listener l;
  EXPECT_EQ(checkMasterReachable("127.0.0.1", l.port(), false, milliseconds(1000)).status, CheckStatus::kPass);
}

TEST(SizingCheckMaster, RefusedPortWarns) {
  CheckResult r = checkMasterReachable("127.0.0.1", closedPort(), false, milliseconds(1000));
  EXPECT_EQ(r.status, CheckStatus::kWarn) << r.detail;
  EXPECT_NE(r.detail.find("refused"), std::string::npos) << r.detail;
}

TEST(SizingCheckMaster, DroppedConnectionsFailAfterTheTimeout) {
  // A listener whose accept queue is full drops new SYNs: from outside that looks like a firewall.
  Listener l(0);
  std::vector<int> fillers;
  for (int i = 0; i < 8; ++i) {
    if (probeTcpConnect("127.0.0.1", l.port(), milliseconds(100)).outcome != ConnectOutcome::kAccepted) break;
    // probeTcpConnect closes its socket; keep real ones open so the queue stays full.
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(l.port()));
    ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    fillers.push_back(fd);
    ::usleep(20000);
  }
  const auto start = std::chrono::steady_clock::now();
  CheckResult r = checkMasterReachable("127.0.0.1", l.port(), false, milliseconds(300));
  const auto took = std::chrono::steady_clock::now() - start;
  for (int fd : fillers) ::close(fd);
  EXPECT_EQ(r.status, CheckStatus::kFail) << r.detail;
  EXPECT_NE(r.fix.find("dropped"), std::string::npos) << r.fix;
  EXPECT_LT(took, std::chrono::seconds(2)) << "the timeout bounds the check";
}

TEST(SizingCheckMaster, MasterNodeMustOwnTheAddress) {
  EXPECT_EQ(checkMasterReachable("127.0.0.1", 29500, true, milliseconds(100)).status, CheckStatus::kPass);
  CheckResult r = checkMasterReachable("203.0.113.5", 29500, true, milliseconds(100));  // TEST-NET-3, not ours
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_NE(r.fix.find("--node-rank"), std::string::npos);
}

TEST(SizingCheckMasterPortFree, PortInUseFails) {
  Listener l;
  CheckResult r = checkMasterPortFree(l.port());
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_NE(r.detail.find("in use"), std::string::npos) << r.detail;
  EXPECT_NE(r.fix.find("another --master-port"), std::string::npos);
  EXPECT_EQ(checkMasterPortFree(closedPort()).status, CheckStatus::kPass);
}

TEST(SizingCheckGpus, RefusedWorkerCountFails) {
  NprocInput in;
  in.visible_gpus = 8;
  in.nnodes = 2;
  in.requested.set(16, "flag --nproc-per-node");
  CheckResult r = checkGpus({}, {}, decideNprocPerNode(in));
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_NE(r.detail.find("did you mean --nnodes 2 --nproc-per-node 8?"), std::string::npos) << r.detail;
}

TEST(SizingCheckGpus, VisibleDeviceWarningsWarnAndCpuPasses) {
  VisibleGpus v;
  v.warnings.push_back("CUDA_VISIBLE_DEVICES entry 2: index 9 does not exist");
  NprocDecision d;
  d.nproc_per_node.set(1, "auto");
  EXPECT_EQ(checkGpus({}, v, d).status, CheckStatus::kWarn);
  EXPECT_EQ(checkGpus({}, {}, d).status, CheckStatus::kPass);
  GpuInventory broken;
  broken.error = "libcuda.so.1: cuInit failed, error 803";
  EXPECT_EQ(checkGpus(broken, {}, d).status, CheckStatus::kWarn);
}

TEST(SizingCheckNccl, MissingNcclFailsOnlyForGpuWorkers) {
  NcclProbe p = probeNccl({"/nonexistent/libnccl.so.2"});
  EXPECT_FALSE(p.found);
  CheckResult r = checkNccl(p, true);
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_NE(r.fix.find("LD_LIBRARY_PATH"), std::string::npos);
  EXPECT_EQ(checkNccl(p, false).status, CheckStatus::kSkip);
}

TEST(SizingCheckNccl, ALibraryThatIsNotNcclIsNotAccepted) {
  NcclProbe p = probeNccl({"libm.so.6"});
  EXPECT_FALSE(p.found);
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_NE(p.notes[0].find("no ncclGetVersion"), std::string::npos);
}

TEST(SizingCheckNccl, RealNcclReportsItsVersionWithoutAGpu) {
#if defined(TAEHV_TEST_NCCL_LIBRARY)
  NcclProbe p = probeNccl({TAEHV_TEST_NCCL_LIBRARY});
  ASSERT_TRUE(p.found) << TAEHV_TEST_NCCL_LIBRARY << ": " << (p.notes.empty() ? "" : p.notes.front());
#else
  NcclProbe p = probeNccl({kNcclLibrary});
  if (!p.found) GTEST_SKIP() << "no NCCL on this machine (scripts/setup.sh --cuda installs the nvidia-nccl wheel)";
#endif
  EXPECT_GE(p.version_code, 20000);
  EXPECT_EQ(p.version, ncclVersionText(p.version_code));
  EXPECT_EQ(checkNccl(p, true).status, CheckStatus::kPass);
}

TEST(SizingNcclVersionText, BothEncodings) {
  EXPECT_EQ(ncclVersionText(22809), "2.28.9");
  EXPECT_EQ(ncclVersionText(2708), "2.7.8");
}

InterfaceState fakeState(const std::string& name) {
  InterfaceState s;
  if (name == "eth0") s = {true, true, true, {"10.0.0.5"}};
  if (name == "eth1") s = {true, false, false, {}};
  if (name == "eth2") s = {true, true, false, {}};
  return s;
}
std::vector<std::string> fakeNames() { return {"lo", "eth0", "eth1", "eth2"}; }

TEST(SizingCheckInterface, MissingInterfaceFailsAndListsTheRealOnes) {
  CheckResult r = checkInterface("NCCL_SOCKET_IFNAME", "=ib0", fakeState, fakeNames);
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_NE(r.detail.find("no interface ib0"), std::string::npos) << r.detail;
  EXPECT_NE(r.detail.find("eth0"), std::string::npos) << r.detail;
}

TEST(SizingCheckInterface, DownOrNoCarrierFails) {
  CheckResult r = checkInterface("GLOO_SOCKET_IFNAME", "eth1", fakeState, fakeNames);
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_NE(r.fix.find("ip link set eth1 up"), std::string::npos) << r.fix;
  EXPECT_EQ(checkInterface("GLOO_SOCKET_IFNAME", "eth2", fakeState, fakeNames).status, CheckStatus::kFail);
}

TEST(SizingCheckInterface, NcclSyntax) {
  EXPECT_EQ(checkInterface("NCCL_SOCKET_IFNAME", "=eth0", fakeState, fakeNames).status, CheckStatus::kPass);
  EXPECT_EQ(checkInterface("NCCL_SOCKET_IFNAME", "^docker", fakeState, fakeNames).status, CheckStatus::kSkip);
  // Without '=', NCCL treats names as prefixes: "eth" matches eth0 (up) and eth1 (down).
  EXPECT_EQ(checkInterface("NCCL_SOCKET_IFNAME", "eth", fakeState, fakeNames).status, CheckStatus::kWarn);
  EXPECT_EQ(checkInterface("NCCL_SOCKET_IFNAME", "=eth0,ib0", fakeState, fakeNames).status, CheckStatus::kWarn);
  // Gloo takes exact names: "eth" is not an interface.
  EXPECT_EQ(checkInterface("GLOO_SOCKET_IFNAME", "eth", fakeState, fakeNames).status, CheckStatus::kFail);
}

TEST(SizingCheckInterface, RealLoopbackIsUp) {
  EXPECT_EQ(checkInterface("GLOO_SOCKET_IFNAME", "lo").status, CheckStatus::kPass);
  EXPECT_EQ(checkInterface("GLOO_SOCKET_IFNAME", "taehv-nonexistent0").status, CheckStatus::kFail);
}

TEST_F(SizingDoctorFiles, OutputDirChecks) {
  EXPECT_EQ(checkOutputDir(dir_).status, CheckStatus::kPass);
  EXPECT_EQ(checkOutputDir(dir_ + "/runs/new").status, CheckStatus::kPass) << "can be created";
  EXPECT_TRUE(fs::is_empty(dir_)) << "the check leaves nothing behind and creates nothing";
  std::ofstream(dir_ + "/file") << "x";
  CheckResult r = checkOutputDir(dir_ + "/file");
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_NE(r.detail.find("not a directory"), std::string::npos);
  r = checkOutputDir(dir_ + "/file/sub/dir");
  EXPECT_EQ(r.status, CheckStatus::kFail) << r.detail;
  EXPECT_EQ(checkOutputDir("").status, CheckStatus::kSkip);
}

TEST_F(SizingDoctorFiles, OutputDirWithoutWritePermissionFails) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes anywhere; permission failures cannot happen as root";
  fs::create_directory(dir_ + "/ro");
  fs::permissions(dir_ + "/ro", fs::perms::owner_read | fs::perms::owner_exec);
  EXPECT_EQ(checkOutputDir(dir_ + "/ro").status, CheckStatus::kFail);
  EXPECT_EQ(checkOutputDir(dir_ + "/ro/sub").status, CheckStatus::kFail);
  fs::permissions(dir_ + "/ro", fs::perms::owner_all);
}

TEST_F(SizingDoctorFiles, DataPathChecks) {
  EXPECT_EQ(checkDataPath("synthetic").status, CheckStatus::kPass);
  CheckResult r = checkDataPath(dir_ + "/videos");
  EXPECT_EQ(r.status, CheckStatus::kFail);
  EXPECT_NE(r.detail.find("does not exist"), std::string::npos);
  fs::create_directory(dir_ + "/videos");
  EXPECT_EQ(checkDataPath(dir_ + "/videos").status, CheckStatus::kFail) << "empty folder";
  std::ofstream(dir_ + "/videos/a.mp4") << "x";
  EXPECT_EQ(checkDataPath(dir_ + "/videos").status, CheckStatus::kPass);
  EXPECT_EQ(checkDataPath(dir_ + "/videos/a.mp4").status, CheckStatus::kPass);
}

TEST_F(SizingDoctorFiles, WholeRunOnThisMachine) {
  DoctorInputs in;
  in.backend = "local";
  in.descriptor = goodDescriptor(1, 0, "127.0.0.1");
  in.descriptor.master_port.set(closedPort(), "flag --master-port");
  NprocInput n;
  in.nproc = decideNprocPerNode(n);
  TuningInput t;
  t.master_addr = "127.0.0.1";
  in.tuning = computeTuning(t);
  in.nccl = probeNccl({"/nonexistent/libnccl.so.2"});
  in.output_dir = dir_;
  std::vector<CheckResult> rows = runDoctorChecks(in);
  std::string table = renderDoctorTable(rows);
  EXPECT_EQ(doctorExitCode(rows), 0) << table;
  EXPECT_NE(table.find("master port free"), std::string::npos) << table;
  EXPECT_NE(table.find("GLOO_SOCKET_IFNAME=lo"), std::string::npos) << table;
  EXPECT_NE(table.find("0 failed"), std::string::npos) << table;

  in.data_path = dir_ + "/missing";
  rows = runDoctorChecks(in);
  table = renderDoctorTable(rows);
  EXPECT_EQ(doctorExitCode(rows), 1);
  EXPECT_NE(table.find("fix:"), std::string::npos) << table;
  EXPECT_NE(table.find("1 failed"), std::string::npos) << table;
}

}  // namespace
}  // namespace taehv::sizing
