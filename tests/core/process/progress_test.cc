// The progress channel's protocol and the watch's bookkeeping (progress.h), with real Unix datagram sockets; the hang
// verdict itself runs with real workers in tests/trainer/train/hang_test.cc and tests/examples/progress_test.sh.
#include "taehv/process/progress.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <chrono>
#include <filesystem>
#include <thread>

#include "stacks.h"

namespace taehv::process {
namespace {

TEST(ProgressReport, ParsesEverySectionAndRoundTrips) {
  for (Section s : {Section::kStartup, Section::kData, Section::kForwardBackward, Section::kExchange,
                    Section::kOptimizer, Section::kEval, Section::kCheckpoint}) {
    const std::string text = formatProgressReport({41, s});
    const Checked<ProgressReport> back = parseProgressReport(text);
    ASSERT_TRUE(back.ok()) << text << back.error;
    EXPECT_EQ(back.value.step, 41);
    EXPECT_EQ(back.value.section, s);
  }
  EXPECT_EQ(formatProgressReport({7, Section::kForwardBackward}), "step=7 section=forward_backward\n");
  EXPECT_TRUE(parseProgressReport("step=0 section=data").ok()) << "the newline is optional";
}

TEST(ProgressReport, GarbageIsRefusedWithTheInputQuoted) {
  for (const std::string& bad : std::vector<std::string>{"", "\n", "step=1", "step= section=data", "step=-1 section=data", "step=1 section=bogus",
        "step=1  section=data", "step=1 section=data extra", "STEP=1 section=data", "step=99999999999999999999 section=data",
        std::string("step=1 section=da\0ta", 20)}) {
    const Checked<ProgressReport> r = parseProgressReport(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error.find("not a progress report (want 'step=<N> section=<name>')"), std::string::npos) << r.error;
  }
  const std::string long_text(500, 'x');
  EXPECT_LT(parseProgressReport(long_text).error.size(), 160u) << "at most 60 bytes of the input are quoted";
}

TEST(Stacks, TopFramesReadEuStackGdbAndPySpy) {
  const std::string eu =
      "PID 12 - process\nTID 12:\n#0  0x00007efc64b00df2 pause\n#1  0x00005592e5c865ed "
      "taehv::train::taehvTestHangForever()\n#2  0x00005592e5c867eb taehv::train::ProgressReporter::report(long, "
      "taehv::process::Section)\n#3  0x000055 taehv::train::(anonymous namespace)::TrainingRun::runMicroSteps(long, "
      "double)\n#4  0x1 main\nTID 13:\n#0  0x2 epoll_wait\n";
  EXPECT_EQ(topFrames(eu, 4),
            "pause < taehv::train::taehvTestHangForever < taehv::train::ProgressReporter::report < "
            "taehv::train::(anonymous namespace)::TrainingRun::runMicroSteps");
  const std::string gdb =
      "Thread 1 (Thread 0x7f (LWP 12) \"taehv-train\"):\n#0  0x00007f in pause () from /lib/libc.so.6\n"
      "#1  0x0000555 in taehv::train::taehvTestHangForever () at progress_report.cc:48\n";
  EXPECT_EQ(topFrames(gdb, 4), "pause < taehv::train::taehvTestHangForever");
  const std::string py =
      "Process 1817: python w.py\nPython v3.11.7\n\nThread 1817 (idle)\n    wait_forever_in_data (w.py:16)\n"
      "    main (w.py:27)\n    <module> (w.py:36)\n";
  EXPECT_EQ(topFrames(py, 2), "wait_forever_in_data < main");
  EXPECT_EQ(topFrames("eu-stack: cannot attach\n", 4), "");
}

/// Sends `text` to the socket at `path`.
void send(const std::string& path, const std::string& text) {
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  path.copy(addr.sun_path, path.size());
  ASSERT_EQ(::sendto(fd, text.data(), text.size(), 0, reinterpret_cast<sockaddr*>(&addr), sizeof addr),
            static_cast<ssize_t>(text.size()));
  ::close(fd);
}

/// A watch with a 60 s floor over one child per rank of `ranks`, each started as this process; `specs` gets their
/// environments (the socket paths).
std::unique_ptr<ProgressWatch> watchOver(const std::vector<int>& ranks, std::vector<ChildSpec>& specs) {
  Checked<std::unique_ptr<ProgressWatch>> created = ProgressWatch::create(std::chrono::seconds(60), {});
  EXPECT_TRUE(created.ok()) << created.error;
  if (!created.ok()) return nullptr;
  specs.assign(ranks.size(), ChildSpec{});
  for (std::size_t i = 0; i < ranks.size(); ++i) specs[i].rank = ranks[i];
  created.value->beginGeneration(specs);
  for (std::size_t i = 0; i < ranks.size(); ++i) created.value->started(i, ::getpid());
  return std::move(created.value);
}

TEST(ProgressWatch, EachRankHasItsOwnSocketAndGarbageChangesNothing) {
  std::vector<ChildSpec> specs;
  const std::unique_ptr<ProgressWatch> owned = watchOver({4, 5}, specs);
  ASSERT_TRUE(owned);
  ProgressWatch& watch = *owned;
  const std::string a = specs[0].env.at(kProgressSocketEnv), b = specs[1].env.at(kProgressSocketEnv);
  EXPECT_NE(a, b);
  send(a, "step=3 section=data\n");
  send(a, "step=3 section=forward_backward\n");
  EXPECT_FALSE(watch.check().has_value());  // reports are timed when read: supervise() reads them as they come
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  send(a, "step=4 section=data\n");
  send(b, "garbage");
  EXPECT_FALSE(watch.check().has_value()) << "a 60 s floor: nobody is hung";
  const std::vector<RankProgress> ranks = watch.ranks();
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[0].rank, 4);
  EXPECT_TRUE(ranks[0].reported);
  EXPECT_EQ(ranks[0].step, 4);
  EXPECT_EQ(ranks[0].section, Section::kData);
  EXPECT_GE(ranks[0].last_step_s, 0.09) << "step 3 took the 100 ms between its reports";
  EXPECT_GE(ranks[0].bound_s, 600) << "the loop's first step is warm-up: the start-up bound still holds";
  EXPECT_FALSE(ranks[1].reported) << "garbage is no report";
  EXPECT_EQ(ranks[1].bound_s, 0) << "a rank that never reported is not judged";
  // A new generation: new sockets, the old ones gone.
  watch.beginGeneration(specs);
  EXPECT_NE(specs[0].env.at(kProgressSocketEnv), a);
  EXPECT_NE(::access(a.c_str(), F_OK), 0);
}

TEST(ProgressWatch, BusyTimeIsTheStepWithoutItsExchange) {
  std::vector<ChildSpec> specs;
  const std::unique_ptr<ProgressWatch> owned = watchOver({0}, specs);
  ASSERT_TRUE(owned);
  ProgressWatch& watch = *owned;
  const std::string path = specs[0].env.at(kProgressSocketEnv);
  // Each step: 60 ms of data and forward/backward, then 120 ms waiting in the exchange (a faster rank waiting for a
  // slower one). Step 0 is warm-up; steps 1..5 count.
  const auto pause = [&watch](int ms) {
    watch.check();  // reports are timed when read: at once, as supervise() does
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  };
  for (int step = 0; step <= 6; ++step) {
    send(path, "step=" + std::to_string(step) + " section=data\n");
    pause(20);
    send(path, "step=" + std::to_string(step) + " section=forward_backward\n");
    pause(40);
    send(path, "step=" + std::to_string(step) + " section=exchange\n");
    pause(120);
  }
  send(path, "step=7 section=data\n");
  watch.check();
  const RankProgress p = watch.ranks().at(0);
  EXPECT_EQ(p.busy_steps, 6) << "steps 1..6, not the warm-up";
  EXPECT_GE(p.busy_s, 0.055);
  EXPECT_LT(p.busy_s, 0.110) << "the 120 ms in the exchange are not busy time";
  EXPECT_GE(p.last_step_s, 0.175) << "the step time includes the exchange";
}

/// A child that sleeps until killed (a rank to judge and to take stacks of), and its reaper.
struct Sleeper {
  pid_t pid = ::fork();
  Sleeper() {
    if (pid == 0) {
      ::execlp("sleep", "sleep", "60", static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~Sleeper() {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
};

/// `upto` steps of about 20 ms on each of `paths` (data, forward_backward, exchange), no hang named meanwhile.
void runSteps(ProgressWatch& watch, const std::vector<std::string>& paths, int upto) {
  for (int step = 0; step < upto; ++step) {
    for (const char* section : {"data", "forward_backward", "exchange"}) {
      for (const std::string& path : paths) send(path, "step=" + std::to_string(step) + " section=" + section);
      EXPECT_FALSE(watch.check().has_value());
      std::this_thread::sleep_for(std::chrono::milliseconds(7));
    }
  }
}

/// The description of the first hang check() names within `limit`, or a line saying none was.
std::string waitForHangOf(ProgressWatch& watch, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (std::optional<Hang> h = watch.check()) return h->description;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return "no hang named in " + std::to_string(limit.count()) + " ms";
}

/// Two ranks, 0.3 s floor, a few 20 ms steps (so each rank is past warm-up and bounded by the floor), then rank 0
/// reports the exchange of step 4 and, 200 ms later, rank 1 the data of step 4, and both go silent. Rank 0 has been
/// silent the longer, but it waits for rank 1 in the exchange: rank 1 is named. (The rule before, the longest silent,
/// named rank 0: what CI saw across two nodes, whose heartbeats age a peer's silence by up to a period.) Then a
/// peer on another node, heard at the data of step 4 200 ms after the local rank's last report in the exchange, is
/// named over that local rank.
TEST(ProgressWatch, TheRankFurthestBehindIsNamedNotTheOneSilentLongest) {
  Sleeper a, b;
  std::string stacks = (std::filesystem::temp_directory_path() / "taehv-behind-XXXXXX").string();
  ASSERT_NE(::mkdtemp(stacks.data()), nullptr);
  ProgressFiles files;
  files.stacks_dir = stacks;
  Checked<std::unique_ptr<ProgressWatch>> created =
      ProgressWatch::create(std::chrono::milliseconds(300), std::move(files));
  ASSERT_TRUE(created.ok()) << created.error;
  ProgressWatch& watch = *created.value;
  const auto steps = [&watch](const std::vector<std::string>& paths, int upto) { runSteps(watch, paths, upto); };
  const auto waitForHang = [&watch] { return waitForHangOf(watch, std::chrono::seconds(10)); };
  std::vector<ChildSpec> specs(2);
  specs[0].rank = 0;
  specs[1].rank = 1;
  watch.beginGeneration(specs);
  watch.started(0, a.pid);
  watch.started(1, b.pid);
  const std::string p0 = specs[0].env.at(kProgressSocketEnv), p1 = specs[1].env.at(kProgressSocketEnv);
  steps({p0, p1}, 4);
  send(p0, "step=4 section=data");
  send(p0, "step=4 section=forward_backward");
  send(p0, "step=4 section=exchange");
  watch.check();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  send(p1, "step=4 section=data");
  watch.check();
  const std::string local = waitForHang();
  EXPECT_EQ(local.rfind("rank 1 hung in section data of step 4", 0), 0u) << local;

  // A new generation, one local rank; the peer (rank 1 of node 1) is further behind though less silent.
  specs.resize(1);
  watch.beginGeneration(specs);
  watch.started(0, a.pid);
  const std::string q0 = specs[0].env.at(kProgressSocketEnv);
  steps({q0}, 4);
  send(q0, "step=4 section=data");
  send(q0, "step=4 section=forward_backward");
  send(q0, "step=4 section=exchange");
  watch.check();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // Heard 200 ms after the local rank's last report; rank 2 of node 1 has not reported yet (not judged).
  watch.setPeers({{2, 1, 0, "", 0.0}, {1, 1, 4, "data", 0.0}});
  const std::string peer = waitForHang();
  EXPECT_EQ(peer.rfind("rank 1 (node 1) hung in section data of step 4", 0), 0u) << peer;
  std::filesystem::remove_all(stacks);
}

/// One local rank hangs in the data of step 5 (0.3 s floor). The other node's view of its rank says the exchange of
/// step 4, made 1 s before the local rank's last report: both passed that collective since, so it names nobody; a
/// newer view (that rank waiting in the exchange of step 5) names the local rank. What CI saw before the view's age
/// was carried: a 4 s old view of rank 1 at the exchange of step 4 named it over rank 0, hung at step 5. Then, a
/// generation whose older view is never replaced: the peer is named after kPeerViewWait, with that view's age.
TEST(ProgressWatch, APeerBehindOnlyInAViewOlderThanTheLocalReportWaitsForANewerOne) {
  using namespace std::chrono_literals;
  Sleeper a;
  std::string stacks = (std::filesystem::temp_directory_path() / "taehv-stale-XXXXXX").string();
  ASSERT_NE(::mkdtemp(stacks.data()), nullptr);
  ProgressFiles files;
  files.stacks_dir = stacks;
  Checked<std::unique_ptr<ProgressWatch>> created = ProgressWatch::create(300ms, std::move(files));
  ASSERT_TRUE(created.ok()) << created.error;
  ProgressWatch& watch = *created.value;
  std::vector<ChildSpec> specs(1);
  specs[0].rank = 0;
  const auto hangInDataOfStep5 = [&] {
    watch.beginGeneration(specs);
    watch.started(0, a.pid);
    const std::string path = specs[0].env.at(kProgressSocketEnv);
    runSteps(watch, {path}, 5);
    send(path, "step=5 section=data");
    EXPECT_FALSE(watch.check().has_value());
    watch.setPeers({{1, 1, 4, "exchange", 1.0, 1.0}});  // its node read this 1 s ago
  };
  hangInDataOfStep5();
  // Past the 0.3 s bound by far, and still short of bound + kPeerViewWait: nobody is named on that view.
  EXPECT_EQ(waitForHangOf(watch, 1500ms), "no hang named in 1500 ms");
  watch.setPeers({{1, 1, 5, "exchange", 1.2, 0.1}});
  const std::string local = waitForHangOf(watch, 2s);
  EXPECT_EQ(local.rfind("rank 0 hung in section data of step 5", 0), 0u) << local;

  hangInDataOfStep5();
  const auto t0 = std::chrono::steady_clock::now();
  const std::string peer = waitForHangOf(watch, kPeerViewWait + 5s);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(peer.rfind("rank 1 (node 1) hung in section exchange of step 4", 0), 0u) << peer;
  EXPECT_NE(peer.find("as node 1 saw it "), std::string::npos) << peer;
  EXPECT_GE(took, std::chrono::duration<double>(kPeerViewWait).count()) << peer;
  std::filesystem::remove_all(stacks);
}

}  // namespace
}  // namespace taehv::process
