// The ssh backend against real OpenSSH sshd hosts in network namespaces (tests/infra/ssh/sshd_hosts.sh):
// the real taehv-run on both sides, real ssh clients, real signals. All namespaces share this machine's PID
// namespace and filesystem, so "no process left on any host" is checked by a marker unique to each test
// (TAEHV_TEST_MARKER=<unique>, forwarded with --env, inherited by every remote process of the job), both on
// /proc here and over ssh on each host.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <regex>
#include <thread>

#include "infra/built_programs.h"
#include "netns_hosts.h"
#include "proc_marker.h"

namespace taehv::ssh {
namespace {

using testing::countMarker;
using testing::Launched;
using testing::NetnsHosts;
using testing::readFile;
using testing::waitMarker;
using Clock = std::chrono::steady_clock;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

class SshHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    bin_ = taehv::testing::builtProgram("taehv-run");
    ASSERT_PROGRAM_BUILT(bin_);
    char tmpl[] = "/tmp/taehv-ssh-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    marker_value_ = "taehv-ssh-" + std::to_string(::getpid()) + "-" + std::to_string(std::random_device{}());
    marker_ = "TAEHV_TEST_MARKER=" + marker_value_;
  }
  void TearDown() override {
    if (launcher_.pid > 0) {
      ::kill(launcher_.pid, SIGKILL);
      launcher_.wait();
    }
    hosts_.reset();
    if (!dir_.empty()) std::system(("rm -rf '" + dir_ + "'").c_str());
  }

  void startHosts(int n, const std::string& hide = "") {
    hosts_ = std::make_unique<NetnsHosts>(n, hide);
    if (!hosts_->skipReason().empty()) GTEST_SKIP() << hosts_->skipReason();
    ASSERT_TRUE(hosts_->ready()) << hosts_->error();
  }

  std::string writeHostfile(const std::string& text) {
    const std::string path = dir_ + "/hostfile";
    std::ofstream(path) << text;
    return path;
  }

  /// Starts taehv-run --backend ssh with our ssh config, the marker and a short remote grace.
  void start(const std::string& hostfile_text, std::vector<std::string> extra, const std::vector<std::string>& command,
             const std::map<std::string, std::string>& launcher_env = {}) {
    std::vector<std::string> argv = {bin_,      "--backend", "ssh", "--hostfile", writeHostfile(hostfile_text),
                                     "--ssh-opts", "-F " + hosts_->sshConfig(), "--env", marker_,
                                     "--remote-grace", "3"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    if (!command.empty()) {
      argv.push_back("--");
      argv.insert(argv.end(), command.begin(), command.end());
    }
    launcher_ = testing::launch(argv, dir_, launcher_env, dir_);
  }

  int finish(int seconds) {
    int code = -1;
    EXPECT_TRUE(launcher_.waitFor(seconds, &code)) << "launcher still running after " << seconds << " s";
    return code;
  }

  /// Waits until every rank 0..n-1 has written started.RANK in the test folder (the job runs everywhere).
  bool waitStarted(int n, int seconds) {
    const auto end = Clock::now() + std::chrono::seconds(seconds);
    for (;;) {
      int ok = 0;
      for (int r = 0; r < n; ++r) ok += ::access((dir_ + "/started." + std::to_string(r)).c_str(), F_OK) == 0;
      if (ok == n) return true;
      if (Clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  /// Processes of this test's job on `host`, counted over ssh on that host.
  int remoteCount(const std::string& host) {
    int rc = 0;
    const std::string out =
        hosts_->runOn(host, "grep -lzsx '" + marker_ + "' /proc/[0-9]*/environ | wc -l", &rc);
    return rc == 0 ? std::atoi(out.c_str()) : -1;
  }

  std::string bin_;
  std::string dir_;
  std::string marker_;
  std::string marker_value_;
  std::unique_ptr<NetnsHosts> hosts_;
  Launched launcher_;
};

TEST_F(SshHosts, TwoHostsRunWithRanksPrefixedOutputAndForwardedEnvironment) {
  startHosts(2);
  const std::string hostile = "x;touch " + dir_ + "/pwned $(touch " + dir_ + "/pwned) `id` 'q' \"d\"\nline2 \\";
  std::ofstream(dir_ + "/.taehv_env") << "# forwarded like DeepSpeed's .deepspeed_env\nFROM_FILE=file value\n";
  const std::string script =
      "printf 'report rank=%s world=%s local=%s master=%s host=%s fwd=%s file=%s\\n' \"$RANK\" \"$WORLD_SIZE\" "
      "\"$LOCAL_RANK\" \"$MASTER_ADDR\" \"$(hostname)\" \"$TAEHV_FWD_TEST\" \"$FROM_FILE\"; "
      "printf '%s' \"$HOSTILE\" > hostile-env.$RANK; printf '%s' \"$1\" > hostile-arg.$RANK";
  start("# two hosts\nh1 slots=2\nh2 slots=2\n", {"--env", "HOSTILE=" + hostile},
        {"/bin/sh", "-c", script, "worker", hostile}, {{"TAEHV_FWD_TEST", "yes"}});
  const int code = finish(60);
  const std::string out = launcher_.out();
  EXPECT_EQ(code, 0) << out << launcher_.err();
  for (int rank = 0; rank < 4; ++rank) {
    const std::string host = rank < 2 ? "h1" : "h2";
    const std::string want = "report rank=" + std::to_string(rank) + " world=4 local=" + std::to_string(rank % 2) +
                             " master=10.77.0.2 host=" + host + " fwd=yes file=file value";
    EXPECT_NE(out.find(want), std::string::npos) << "missing: " << want << "\n" << out << launcher_.err();
    // Output comes back prefixed with the host and node: "[h1:0] ..." for node 0.
    const std::regex line("\\[" + host + ":" + std::to_string(rank / 2) + "\\][^\\n]*" + want);
    EXPECT_TRUE(std::regex_search(out, line)) << "not prefixed [" << host << ":" << rank / 2 << "]:\n" << out;
    EXPECT_EQ(readFile(dir_ + "/hostile-env." + std::to_string(rank)), hostile);
    EXPECT_EQ(readFile(dir_ + "/hostile-arg." + std::to_string(rank)), hostile);
  }
  EXPECT_NE(::access((dir_ + "/pwned").c_str(), F_OK), 0) << "a hostile value ran a command";
}

TEST_F(SshHosts, TwoHostTaehvTrainingOverGlooAcrossTheNamespaces) {
  SKIP_WITHOUT_TRAINER_OR_ASSERT_BUILT();
  const std::string train = taehv::testing::builtProgram("taehv-train");
  startHosts(2);
  const std::string out_dir = dir_ + "/train";
  // Gloo binds the interface of the namespace's address (10.77.0.x), not its loopback.
  start("h1 slots=1\nh2 slots=1\n", {"--env", "GLOO_SOCKET_IFNAME=eth0"},
        {train, "--set", "train.steps=2", "--set", "train.batch_per_rank=1", "--set", "data.frames=4", "--set",
         "data.size=32", "--set", "output.dir=" + out_dir});
  const int code = finish(170);
  const std::string out = launcher_.out();
  ASSERT_EQ(code, 0) << out << launcher_.err();
  EXPECT_TRUE(std::regex_search(out, std::regex("\\[h1:0\\][^\\n]*done: 2/2 steps"))) << out;
  // Rank 0 logs for all; "2 rank(s)" means h2's worker (node 1) joined the Gloo group and trained with it.
  EXPECT_TRUE(std::regex_search(out, std::regex("\\[h1:0\\][^\\n]*taehv-train: 2 rank\\(s\\), backend gloo"))) << out;
  EXPECT_NE(readFile(out_dir + "/weights.safetensors"), "");
  EXPECT_EQ(waitMarker(marker_, 0, std::chrono::seconds(5)), 0);
}

TEST_F(SshHosts, UnevenSlotsTwoAndOneGiveContiguousRanksAndTrain) {
  startHosts(2);
  // h1 slots=2, h2 slots=1: ranks 0-1 on h1 (local 0-1 of 2), rank 2 on h2 (local 0 of 1), world 3. Then an
  // --include subset of h1's slots (0 and 2 of 3) counts as h1's processes and is its CUDA_VISIBLE_DEVICES.
  const std::string script =
      "printf 'report rank=%s local=%s world=%s local_world=%s group=%s host=%s cvd=%s\\n' \"$RANK\" \"$LOCAL_RANK\" "
      "\"$WORLD_SIZE\" \"$LOCAL_WORLD_SIZE\" \"$GROUP_RANK\" \"$(hostname)\" \"${CUDA_VISIBLE_DEVICES-unset}\"";
  struct Case {
    std::string hostfile;
    std::vector<std::string> extra;
    std::string h1_devices;
  };
  for (const Case& c : {Case{"h1 slots=2\nh2 slots=1\n", {}, "unset"},
                        Case{"h1 slots=3\nh2 slots=1\n", {"--include", "h1:0,2@h2"}, "0,2"}}) {
    start(c.hostfile, c.extra, {"/bin/sh", "-c", script});
    const int code = finish(60);
    const std::string out = launcher_.out();
    ASSERT_EQ(code, 0) << out << launcher_.err();
    for (int rank = 0; rank < 3; ++rank) {
      const bool first = rank < 2;
      const std::string want = "report rank=" + std::to_string(rank) + " local=" + std::to_string(first ? rank : 0) +
                               " world=3 local_world=" + (first ? "2" : "1") + " group=" + (first ? "0" : "1") +
                               " host=" + (first ? "h1" : "h2") + " cvd=" + (first ? c.h1_devices : "unset");
      EXPECT_NE(out.find(want), std::string::npos) << "missing: " << want << "\n" << out << launcher_.err();
    }
  }

  // A real training over Gloo across the namespaces with 2 + 1 workers.
  SKIP_WITHOUT_TRAINER_OR_ASSERT_BUILT();
  const std::string train = taehv::testing::builtProgram("taehv-train");
  const std::string out_dir = dir_ + "/train";
  start("h1 slots=2\nh2 slots=1\n", {"--env", "GLOO_SOCKET_IFNAME=eth0"},
        {train, "--set", "train.steps=2", "--set", "train.batch_per_rank=1", "--set", "data.frames=4", "--set",
         "data.size=32", "--set", "output.dir=" + out_dir});
  const int code = finish(240);
  const std::string out = launcher_.out();
  ASSERT_EQ(code, 0) << out << launcher_.err();
  EXPECT_TRUE(std::regex_search(out, std::regex("\\[h1:0\\][^\\n]*taehv-train: 3 rank\\(s\\), backend gloo"))) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("\\[h1:0\\][^\\n]*done: 2/2 steps"))) << out;
  EXPECT_NE(readFile(out_dir + "/weights.safetensors"), "");
  EXPECT_EQ(waitMarker(marker_, 0, std::chrono::seconds(5)), 0);
}

TEST_F(SshHosts, CrashOnHost2TearsDownHost1) {
  startHosts(2);
  const auto t0 = Clock::now();
  start("h1 slots=1\nh2 slots=1\n", {},
        {"/bin/sh", "-c", "if [ \"$RANK\" = 1 ]; then sleep 2; echo crashing >&2; exit 3; fi; exec sleep 300"});
  const int code = finish(30);
  EXPECT_EQ(code, 3) << launcher_.out() << launcher_.err();
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(20));
  // Within the remote grace (3 s) plus slack, nothing of the job is left on any host.
  EXPECT_EQ(waitMarker(marker_, 0, std::chrono::seconds(6)), 0);
  EXPECT_EQ(remoteCount("h1"), 0);
  EXPECT_EQ(remoteCount("h2"), 0);
}

// --max-restarts restarts the whole job: after rank 1 (h2) fails, rank 0 on h1 is stopped and started again too,
// with TORCHELASTIC_RESTART_COUNT=1 everywhere and the next master port. (Each host restarting only its own
// workers would leave rank 0 in its first run, sleeping: the launcher would not end.)
TEST_F(SshHosts, MaxRestartsRestartsTheWholeJobOnEveryHost) {
  startHosts(2);
  start("h1 slots=1\nh2 slots=1\n", {"--max-restarts", "1"},
        {"/bin/sh", "-c",
         "r=$TORCHELASTIC_RESTART_COUNT; echo \"max=$TORCHELASTIC_MAX_RESTARTS port=$MASTER_PORT\" > run.$RANK.$r; "
         "if [ \"$r\" = 0 ]; then if [ \"$RANK\" = 1 ]; then sleep 1; exit 3; fi; exec sleep 300; fi; echo finished"});
  const int code = finish(45);
  const std::string out = launcher_.out();
  EXPECT_EQ(code, 0) << out << launcher_.err();
  for (int rank = 0; rank < 2; ++rank) {
    const std::string first = readFile(dir_ + "/run." + std::to_string(rank) + ".0");
    const std::string second = readFile(dir_ + "/run." + std::to_string(rank) + ".1");
    ASSERT_NE(first, "") << "rank " << rank << " did not run first\n" << out << launcher_.err();
    ASSERT_NE(second, "") << "rank " << rank << " was not restarted\n" << out << launcher_.err();
    EXPECT_NE(second.find("max=1 "), std::string::npos) << second;
    std::smatch a, b;
    ASSERT_TRUE(std::regex_search(first, a, std::regex("port=(\\d+)"))) << first;
    ASSERT_TRUE(std::regex_search(second, b, std::regex("port=(\\d+)"))) << second;
    EXPECT_EQ(std::stoi(b[1]), std::stoi(a[1]) + 1) << "the restart uses the next master port";
  }
  EXPECT_TRUE(std::regex_search(out, std::regex("\\[h1:0\\][^\\n]*finished"))) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex("\\[h2:1\\][^\\n]*finished"))) << out;
  EXPECT_EQ(waitMarker(marker_, 0, std::chrono::seconds(8)), 0);
}

// --nnodes 2:3 with one restart: one of 3 hosts is cut off mid-job (`ip link set <veth> down`); the remote node
// group stops the others, the fan-out checks every host again, leaves the cut one out and finishes on the 2 still
// ready (node ranks 0 and 1, world size 2, restart 1).
TEST_F(SshHosts, ElasticNnodesTwoToThreeFinishesAfterOneHostIsCutOff) {
  startHosts(3);
  start("h1 slots=1\nh2 slots=1\nh3 slots=1\n",
        {"--nnodes", "2:3", "--max-restarts", "1", "--node-timeout", "5", "--shutdown-grace", "2",
         "--preflight-timeout", "5"},
        {"/bin/sh", "-c",
         "r=$TORCHELASTIC_RESTART_COUNT; echo \"$RANK $WORLD_SIZE $GROUP_RANK $GROUP_WORLD_SIZE\" > run.$r.$RANK; "
         "touch started.$RANK; if [ \"$r\" = 0 ]; then exec sleep 300; fi; echo finished"});
  ASSERT_TRUE(waitStarted(3, 60)) << launcher_.err();
  const auto t0 = Clock::now();
  ASSERT_EQ(std::system("ip link set ri-h3-v down"), 0);  // h3: node 2
  const int code = finish(150);
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::string out = launcher_.out(), err = launcher_.err();
  std::printf("h3 cut off: the job finished on h1 and h2 %.1f s later (exit %d)\n", took, code);
  EXPECT_EQ(code, 0) << out << err;
  EXPECT_EQ(readFile(dir_ + "/run.0.2"), "2 3 2 3\n") << "all 3 hosts ran first";
  EXPECT_EQ(readFile(dir_ + "/run.1.0"), "0 2 0 2\n") << out << err;
  EXPECT_EQ(readFile(dir_ + "/run.1.1"), "1 2 1 2\n") << out << err;
  EXPECT_NE(::access((dir_ + "/run.1.2").c_str(), F_OK), 0) << "the cut host ran again";
  EXPECT_NE(err.find("host h3 left out (--nnodes 2:3)"), std::string::npos) << err;
  EXPECT_NE(err.find("restart 1 of 1: 2 host(s) ready"), std::string::npos) << err;
  EXPECT_TRUE(std::regex_search(out, std::regex("\\[h2:1\\][^\\n]*finished"))) << out;
}

TEST_F(SshHosts, SigintToTheLauncherTearsDownEveryHost) {
  startHosts(3);
  start("h1 slots=1\nh2 slots=1\nh3 slots=1\n", {}, {"/bin/sh", "-c", "touch started.$RANK; exec sleep 300"});
  ASSERT_TRUE(waitStarted(3, 30)) << launcher_.out() << launcher_.err();
  const int running = countMarker(marker_);
  EXPECT_GE(running, 6);  // per host at least taehv-run and its worker
  EXPECT_EQ(remoteCount("h2"), running);  // one PID namespace: every host sees them all
  ::kill(launcher_.pid, SIGINT);
  const int code = finish(15);
  EXPECT_NE(code, 0);
  EXPECT_EQ(waitMarker(marker_, 0, std::chrono::seconds(8)), 0);
  for (const char* h : {"h1", "h2", "h3"}) EXPECT_EQ(remoteCount(h), 0) << h;
}

TEST_F(SshHosts, SigkillOfTheLauncherLeavesNothingBehind) {
  startHosts(2);
  start("h1 slots=2\nh2 slots=2\n", {}, {"/bin/sh", "-c", "touch started.$RANK; exec sleep 300"});
  ASSERT_TRUE(waitStarted(4, 30)) << launcher_.out() << launcher_.err();
  EXPECT_GE(countMarker(marker_), 6);  // 2 x taehv-run + 4 workers at least
  ::kill(launcher_.pid, SIGKILL);
  EXPECT_EQ(launcher_.wait(), 128 + SIGKILL);
  // The launcher cannot clean up: the ssh clients die with it (PDEATHSIG), the hosts see EOF on stdin and
  // take their process groups down.
  EXPECT_EQ(waitMarker(marker_, 0, std::chrono::seconds(8)), 0);
  EXPECT_EQ(remoteCount("h1"), 0);
  EXPECT_EQ(remoteCount("h2"), 0);
}

TEST_F(SshHosts, InjectionAttemptsFailSafely) {
  startHosts(1);
  const std::string pwned = dir_ + "/pwned";
  const std::string touch = "touch " + pwned;
  // Hostile host names never reach ssh or a shell: the hostfile is refused.
  for (const std::string& host :
       std::vector<std::string>{"h1;" + touch, "$(" + touch + ")", "-oProxyCommand=" + touch, "h1'" + touch}) {
    start(host + " slots=1\n", {}, {"/bin/true"});
    EXPECT_EQ(finish(10), 2) << host;
    EXPECT_NE(launcher_.err().find("hostfile:1:"), std::string::npos) << launcher_.err();
  }
  // A hostile --include is only ever compared with hostfile names.
  start("h1 slots=1\n", {"--include", "h1;" + touch}, {"/bin/true"});
  EXPECT_EQ(finish(10), 2);
  EXPECT_NE(launcher_.err().find("is not in the hostfile"), std::string::npos) << launcher_.err();
  // A hostile working directory is a path that does not exist there, not a command.
  start("h1 slots=1\n", {"--remote-cwd", "/tmp;" + touch + ";"}, {"/bin/true"});
  EXPECT_EQ(finish(20), 2);
  EXPECT_NE(launcher_.err().find("does not exist"), std::string::npos) << launcher_.err();
  // Hostile --env names are refused; hostile values and arguments arrive verbatim (first test).
  start("h1 slots=1\n", {"--env", "A;" + touch + "=1"}, {"/bin/true"});
  EXPECT_EQ(finish(10), 2);
  EXPECT_NE(::access(pwned.c_str(), F_OK), 0) << "an injection attempt ran a command";
}

TEST_F(SshHosts, UnreachableHostFailsFastNamedAndStartsNothing) {
  startHosts(1);
  const auto t0 = Clock::now();
  start("h1 slots=1\nhdown slots=1\n", {"--preflight-timeout", "6"}, {"/bin/sh", "-c", "touch started.$RANK"});
  EXPECT_EQ(finish(20), 2);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
  const std::string err = launcher_.err();
  EXPECT_NE(err.find("host hdown: cannot log in over ssh: ssh: connect to host 10.77.0.250 port 22"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("host h1:"), std::string::npos) << err;
  EXPECT_NE(err.find("nothing was started"), std::string::npos) << err;
  EXPECT_NE(::access((dir_ + "/started.0").c_str(), F_OK), 0);
}

TEST_F(SshHosts, HostWithoutTaehvRunFailsNamedAndStartsNothing) {
  // h2 gets an empty tmpfs over the folder of taehv-run: a host where it is not installed.
  startHosts(2, "2:" + env("TAEHV_BIN_DIR"));
  start("h1 slots=1\nh2 slots=1\n", {}, {"/bin/sh", "-c", "touch started.$RANK"});
  EXPECT_EQ(finish(20), 2);
  const std::string err = launcher_.err();
  EXPECT_NE(err.find("host h2: taehv-run not found at " + bin_), std::string::npos) << err;
  EXPECT_EQ(err.find("host h1:"), std::string::npos) << err;
  EXPECT_NE(::access((dir_ + "/started.0").c_str(), F_OK), 0);
}

TEST_F(SshHosts, OtherVersionOfTaehvRunIsRefused) {
  startHosts(1);
  const std::string fake = dir_ + "/old-taehv-run";
  std::ofstream(fake) << "#!/bin/sh\necho 'taehv-run 0.0.9 (plugin API 1)'\n";
  ::chmod(fake.c_str(), 0755);
  start("h1 slots=1\n", {"--remote-bin", fake}, {"/bin/true"});
  EXPECT_EQ(finish(20), 2);
  EXPECT_NE(launcher_.err().find("host h1: taehv-run at " + fake + " is version 0.0.9, this one is"),
            std::string::npos)
      << launcher_.err();
}

}  // namespace
}  // namespace taehv::ssh
