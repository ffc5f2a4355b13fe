// Supervision with real processes and real signals: process_supervise_driver runs supervise() over
// process_test_child workers; the test starts the driver, signals or kill -9s it, and reads its output, the
// files the workers write and the process table.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "infra/built_programs.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

const std::string kChild = TAEHV_TEST_CHILD;
const std::string kDriver = TAEHV_TEST_DRIVER;

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> splitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) lines.push_back(line);
  return lines;
}

/// A unique token for this test, put into argv so that /proc can be scanned for exactly our processes.
std::string uniqueMarker() {
  std::random_device rd;
  return "taehv-proc-test-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
}

/// Pids of live (non-zombie) processes whose command line contains token.
std::vector<pid_t> processesWith(const std::string& token) {
  std::vector<pid_t> found;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return found;
  while (dirent* e = ::readdir(dir)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0 || pid == ::getpid()) continue;
    std::string cmdline = readFile(fs::path("/proc") / e->d_name / "cmdline");
    for (char& c : cmdline) c = c == '\0' ? ' ' : c;
    if (cmdline.find(token) == std::string::npos) continue;
    const std::string stat = readFile(fs::path("/proc") / e->d_name / "stat");
    const std::size_t close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z') continue;
    found.push_back(pid);
  }
  ::closedir(dir);
  return found;
}

/// How many zombie children (state Z) parent has.
int zombieChildrenOf(pid_t parent) {
  int zombies = 0;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return 0;
  while (dirent* e = ::readdir(dir)) {
    if (std::atoi(e->d_name) <= 0) continue;
    const std::string stat = readFile(fs::path("/proc") / e->d_name / "stat");
    const std::size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 2));
    char state = 0;
    long ppid = 0;
    rest >> state >> ppid;
    if (state == 'Z' && ppid == parent) ++zombies;
  }
  ::closedir(dir);
  return zombies;
}

bool waitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto end = Clock::now() + timeout;
  while (Clock::now() < end) {
    if (condition()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return condition();
}

class TempDir {
 public:
  TempDir() {
    std::string templ = (fs::temp_directory_path() / "taehv-process-test-XXXXXX").string();
    path_ = ::mkdtemp(templ.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

struct Finished {
  int exit_code = -1;  ///< -1 when killed by a signal
  int signal = 0;
  std::string out;
  std::string err;
  double seconds = 0;
};

/// The driver as a real process with stdout/stderr in files.
class Driver {
 public:
  Driver(const TempDir& dir, std::vector<std::string> args, const std::map<std::string, std::string>& env = {},
         const std::string& program = kDriver)
      : out_(dir.path() / "driver.out"), err_(dir.path() / "driver.err") {
    args.insert(args.begin(), program);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    started_ = Clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      const int out = ::open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err = ::open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(out, 1);
      ::dup2(err, 2);
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      ::execv(argv[0], argv.data());
      ::_exit(126);
    }
  }
  ~Driver() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  pid_t pid() const { return pid_; }
  std::string out() const { return readFile(out_); }
  std::string err() const { return readFile(err_); }
  void signal(int sig) const { ::kill(pid_, sig); }

  /// Waits for the driver to end; on timeout kills it and fails the test.
  Finished wait(std::chrono::milliseconds timeout = 20s) {
    Finished f;
    int status = 0;
    const auto end = Clock::now() + timeout;
    pid_t r = 0;
    while ((r = ::waitpid(pid_, &status, WNOHANG)) == 0 && Clock::now() < end) std::this_thread::sleep_for(5ms);
    if (r == 0) {
      ADD_FAILURE() << "driver did not finish within " << timeout.count() << " ms; stderr:\n" << err();
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
    }
    pid_ = -1;
    f.seconds = std::chrono::duration<double>(Clock::now() - started_).count();
    if (WIFEXITED(status)) f.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) f.signal = WTERMSIG(status);
    f.out = out();
    f.err = err();
    return f;
  }

 private:
  fs::path out_;
  fs::path err_;
  pid_t pid_ = -1;
  Clock::time_point started_;
};

/// A /bin/sh command line that runs `fail` as rank 1 and `others` as every other rank.
std::vector<std::string> rankSplit(const std::string& fail, const std::string& others) {
  return {"/bin/sh", "-c", "if [ \"$RANK\" = 1 ]; then exec " + fail + "; else exec " + others + "; fi"};
}

std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(Supervisor, AllSucceedAndOutputIsPrefixed) {
  TempDir dir;
  Driver d(dir, {"--nproc", "3", "--", kChild, "exit", "0"});
  const Finished f = d.wait();
  EXPECT_EQ(f.exit_code, 0) << f.err;
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(f.out.find("[0:" + std::to_string(r) + "] out of rank " + std::to_string(r) + "\n"), std::string::npos) << f.out;
    EXPECT_NE(f.err.find("[0:" + std::to_string(r) + "] err of rank " + std::to_string(r) + "\n"), std::string::npos) << f.err;
  }
  EXPECT_NE(f.err.find("driver: exit_code=0 restarts=0 interrupt=0 first_failure_rank=-1"), std::string::npos);
}

TEST(Supervisor, FailFastStopsTheOthersAndSummarises) {
  TempDir dir;
  const std::string marker = uniqueMarker();
  Driver d(dir, cat({"--nproc", "4", "--grace-ms", "10000", "--"},
                    rankSplit(kChild + " exit 3 300", kChild + " sleep 60 " + marker)));
  const Finished f = d.wait();
  EXPECT_EQ(f.exit_code, 3) << f.err;
  // The sleepers die of the SIGTERM at once, well within the grace period (no SIGKILL was needed).
  EXPECT_LT(f.seconds, 8.0) << f.err;
  EXPECT_EQ(f.err.find("shutdown grace elapsed"), std::string::npos) << f.err;
  EXPECT_NE(f.err.find("rank 1 [0:1] on testhost exited with code 3; stopping the other 3"), std::string::npos) << f.err;
  EXPECT_NE(f.err.find("taehv-run: first failure: rank 1\n"), std::string::npos) << f.err;
  EXPECT_NE(f.err.find("taehv-run: label: 0:1\n"), std::string::npos) << f.err;
  EXPECT_NE(f.err.find("taehv-run: host: testhost\n"), std::string::npos) << f.err;
  EXPECT_NE(f.err.find("taehv-run: exit code: 3\n"), std::string::npos) << f.err;
  EXPECT_NE(f.err.find("  | err of rank 1\n"), std::string::npos) << f.err;
  EXPECT_NE(f.err.find("first_failure_rank=1"), std::string::npos) << f.err;
  EXPECT_TRUE(processesWith(marker).empty());
}

TEST(Supervisor, FailFastSendsSigkillAfterTheGracePeriod) {
  TempDir dir;
  const std::string marker = uniqueMarker();
  Driver d(dir, cat({"--nproc", "3", "--grace-ms", "700", "--"},
                    rankSplit(kChild + " exit 5 300", kChild + " ignore-term 60 " + marker)));
  const Finished f = d.wait();
  EXPECT_EQ(f.exit_code, 5) << f.err;
  EXPECT_GE(f.seconds, 0.7 + 0.3 - 0.05) << f.err;  // the failure at ~0.3 s, then the whole grace
  EXPECT_LT(f.seconds, 8.0) << f.err;
  EXPECT_NE(f.err.find("shutdown grace elapsed; sending SIGKILL"), std::string::npos) << f.err;
  EXPECT_TRUE(processesWith(marker).empty());
}

// The node group's stop (an outside stop) waits out the whole shutdown grace for workers that do not leave on
// SIGTERM, unless it asks for a shorter one (a node was lost: no collective of theirs can finish).
TEST(Supervisor, AnOutsideStopTakesTheShorterGraceItAsksFor) {
  TempDir dir;
  const std::string marker = uniqueMarker();
  Driver whole(dir, {"--nproc", "2", "--grace-ms", "2000", "--external-stop-ms", "300", "--", kChild, "ignore-term",
                     "60", marker});
  const Finished w = whole.wait();
  EXPECT_GE(w.seconds, 0.3 + 2.0 - 0.05) << w.err;
  EXPECT_NE(w.err.find("stopped from the test; stopping 2 local worker(s) (SIGTERM, SIGKILL after 2000 ms)"),
            std::string::npos)
      << w.err;
  Driver lost(dir, {"--nproc", "2", "--grace-ms", "2000", "--external-stop-ms", "300", "--external-grace-ms", "200",
                    "--", kChild, "ignore-term", "60", marker});
  const Finished l = lost.wait();
  EXPECT_GE(l.seconds, 0.3 + 0.2 - 0.05) << l.err;
  EXPECT_LT(l.seconds, 0.3 + 2.0 - 0.2) << l.err;
  EXPECT_NE(l.err.find("stopped from the test; stopping 2 local worker(s) (SIGTERM, SIGKILL after 200 ms: a node "
                       "was lost, no collective can finish)"),
            std::string::npos)
      << l.err;
  EXPECT_NE(l.err.find("shutdown grace elapsed; sending SIGKILL"), std::string::npos) << l.err;
  EXPECT_TRUE(processesWith(marker).empty());
}

TEST(Supervisor, DeathBySignalIsReportedWithItsName) {
  TempDir dir;
  Driver d(dir, cat({"--nproc", "2", "--grace-ms", "3000", "--"},
                    rankSplit(kChild + " crash 11 100", kChild + " sleep 60")));
  const Finished f = d.wait();
  EXPECT_EQ(f.exit_code, 128 + SIGSEGV) << f.err;
  EXPECT_NE(f.err.find("died by signal SIGSEGV (11)"), std::string::npos) << f.err;
  EXPECT_NE(f.err.find("taehv-run: signal: SIGSEGV (11)\n"), std::string::npos) << f.err;
  EXPECT_NE(f.err.find("  | about to die by signal 11\n"), std::string::npos) << f.err;
}

TEST(Supervisor, ForwardsSignalsToEveryWorker) {
  for (int end_signal : {SIGINT, SIGTERM, SIGHUP}) {
    SCOPED_TRACE(end_signal);
    TempDir dir;
    const std::string rec = (dir.path() / "sig").string();
    Driver d(dir, {"--nproc", "3", "--grace-ms", "3000", "--", kChild, "record", rec + "{rank}", "30"});
    auto allReady = [&] {
      for (int r = 0; r < 3; ++r) {
        if (!fs::exists(rec + std::to_string(r) + ".ready")) return false;
      }
      return true;
    };
    ASSERT_TRUE(waitFor(allReady, 10s)) << d.err();
    auto allContain = [&](const std::string& text) {
      return waitFor(
          [&] {
            for (int r = 0; r < 3; ++r) {
              if (readFile(rec + std::to_string(r)) != text) return false;
            }
            return true;
          },
          5s);
    };
    d.signal(SIGUSR1);
    EXPECT_TRUE(allContain("SIGUSR1\n")) << readFile(rec + "0");
    d.signal(SIGUSR2);
    EXPECT_TRUE(allContain("SIGUSR1\nSIGUSR2\n")) << readFile(rec + "0");
    d.signal(end_signal);
    const Finished f = d.wait();
    const std::string name = end_signal == SIGINT ? "SIGINT" : end_signal == SIGTERM ? "SIGTERM" : "SIGHUP";
    for (int r = 0; r < 3; ++r) EXPECT_EQ(readFile(rec + std::to_string(r)), "SIGUSR1\nSIGUSR2\n" + name + "\n");
    EXPECT_EQ(f.exit_code, 128 + end_signal) << f.err;
    // Workers ending because of the forwarded signal are not a worker failure.
    EXPECT_NE(f.err.find("interrupt=" + std::to_string(end_signal) + " first_failure_rank=-1"), std::string::npos) << f.err;
    EXPECT_EQ(f.err.find("first failure"), std::string::npos) << f.err;
  }
}

TEST(Supervisor, Kill9OfTheSupervisorLeavesNoProcess) {
  TempDir dir;
  const std::string marker = uniqueMarker();
  Driver d(dir, {"--nproc", "2", "--", kChild, "tree", marker, "60"});
  // Both workers have started their grandchild: driver + 2 workers + 2 grandchildren (+ the guardian, a fork
  // of the driver) carry the marker.
  ASSERT_TRUE(waitFor([&] { return splitLines(d.out()).size() == 2; }, 10s)) << d.out();
  ASSERT_GE(processesWith(marker).size(), 5u) << d.err();
  d.signal(SIGKILL);
  const Finished f = d.wait();
  EXPECT_EQ(f.signal, SIGKILL);
  EXPECT_TRUE(waitFor([&] { return processesWith(marker).empty(); }, 5s))
      << processesWith(marker).size() << " processes with the marker survived kill -9 of the supervisor";
}

TEST(Supervisor, RestartsEverythingWithAnIncreasingRestartCount) {
  TempDir dir;
  const std::string file = (dir.path() / "restarts").string();
  Driver d(dir, {"--nproc", "2", "--max-restarts", "3", "--grace-ms", "2000", "--", kChild, "restart-check", file, "2"});
  const Finished f = d.wait();
  EXPECT_EQ(f.exit_code, 0) << f.err;
  EXPECT_NE(f.err.find("driver: exit_code=0 restarts=2 "), std::string::npos) << f.err;
  EXPECT_NE(f.err.find("restarting all workers (restart 1 of 3)"), std::string::npos) << f.err;
  EXPECT_NE(f.err.find("restarting all workers (restart 2 of 3)"), std::string::npos) << f.err;
  EXPECT_EQ(f.err.find("(restart 3 of 3)"), std::string::npos) << f.err;
  const std::string seen = readFile(file);
  for (const char* line : {"rank=0 restart=2\n", "rank=1 restart=2\n"}) EXPECT_NE(seen.find(line), std::string::npos) << seen;
  EXPECT_NE(seen.find("restart=0\n"), std::string::npos) << seen;
  EXPECT_NE(seen.find("restart=1\n"), std::string::npos) << seen;
  EXPECT_EQ(seen.find("restart=3"), std::string::npos) << seen;
}

TEST(Supervisor, GivesUpWhenRestartsAreUsedUp) {
  TempDir dir;
  const std::string file = (dir.path() / "restarts").string();
  Driver d(dir, {"--nproc", "2", "--max-restarts", "1", "--", kChild, "restart-check", file, "5"});
  const Finished f = d.wait();
  EXPECT_EQ(f.exit_code, 1) << f.err;
  EXPECT_NE(f.err.find("driver: exit_code=1 restarts=1 "), std::string::npos) << f.err;
  EXPECT_NE(f.err.find("taehv-run: restarts: 1 of 1 used"), std::string::npos) << f.err;
}

TEST(Supervisor, HeavyConcurrentOutputKeepsEveryLineWholeAndPrefixed) {
  TempDir dir;
  constexpr int kRanks = 4;
  constexpr int kLines = 3000;
  constexpr int kLength = 1500;
  Driver d(dir, {"--nproc", std::to_string(kRanks), "--", kChild, "spew", std::to_string(kLines), std::to_string(kLength)});
  const Finished f = d.wait(60s);
  ASSERT_EQ(f.exit_code, 0) << f.err.substr(0, 2000);
  // Every line: "[0:R] R i <one repeated letter> i R", of the length the worker wrote.
  const std::regex line_re(R"(\[0:(\d)\] (\d) (\d+) ([a-z]+) (\d+) (\d))");
  std::map<int, std::vector<int>> seen;  // rank -> how often each line index was seen
  for (int r = 0; r < kRanks; ++r) seen[r].assign(kLines, 0);
  int foreign = 0;
  for (const std::string* text : {&f.out, &f.err}) {
    for (const std::string& line : splitLines(*text)) {
      if (line.rfind("driver: ", 0) == 0) continue;
      std::smatch m;
      if (!std::regex_match(line, m, line_re)) {
        if (++foreign < 3) ADD_FAILURE() << "mangled line (" << line.size() << " bytes): " << line.substr(0, 120);
        continue;
      }
      const int rank = std::stoi(m[1]);
      const int index = std::stoi(m[3]);
      const bool consistent = m[2] == m[1] && m[6] == m[1] && m[5] == m[3] &&
                              static_cast<int>(line.size()) == kLength + 6 &&
                              m[4].str().find_first_not_of(m[4].str()[0]) == std::string::npos && index < kLines;
      if (!consistent) {
        if (++foreign < 3) ADD_FAILURE() << "inconsistent line: " << line.substr(0, 120);
        continue;
      }
      ++seen[rank][static_cast<std::size_t>(index)];
    }
  }
  EXPECT_EQ(foreign, 0);
  for (int r = 0; r < kRanks; ++r) {
    for (int i = 0; i < kLines; ++i) {
      ASSERT_EQ(seen[r][static_cast<std::size_t>(i)], 1) << "rank " << r << " line " << i;
    }
  }
}

TEST(Supervisor, PrefixCanBeTurnedOffAndPartialLastLineIsFlushed) {
  TempDir dir;
  {
    Driver d(dir, {"--nproc", "1", "--no-prefix", "--", kChild, "exit", "0"});
    const Finished f = d.wait();
    EXPECT_EQ(f.out, "out of rank 0\n");
  }
  {
    Driver d(dir, {"--nproc", "1", "--", kChild, "partial", "no newline at the end"});
    const Finished f = d.wait();
    EXPECT_EQ(f.exit_code, 0);
    EXPECT_EQ(f.out, "[0:0] no newline at the end\n");
  }
}

TEST(Supervisor, OverlongLinesComeOutInPrefixedPiecesOfOneMebibyte) {
  TempDir dir;
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  Driver d(dir, {"--", kChild, "long", std::to_string(2 * kMiB + 1000)});
  const Finished f = d.wait();
  ASSERT_EQ(f.exit_code, 0) << f.err;
  const std::vector<std::string> lines = splitLines(f.out);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "[0:0] " + std::string(kMiB, 'x'));
  EXPECT_EQ(lines[1], "[0:0] " + std::string(kMiB, 'x'));
  EXPECT_EQ(lines[2], "[0:0] " + std::string(1000, 'x'));
}

TEST(Supervisor, LeftoversOfAFinishedWorkerDoNotHoldTheRunOpen) {
  TempDir dir;
  const std::string marker = uniqueMarker();
  // The worker exits 0 at once, but its background child keeps the worker's stdout open for 30 s.
  Driver d(dir, {"--", "/bin/sh", "-c", kChild + " sleep 30 " + marker + " & echo worker done"});
  const Finished f = d.wait();
  EXPECT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(f.out, "[0:0] worker done\n");
  EXPECT_LT(f.seconds, 10.0);
  EXPECT_TRUE(processesWith(marker).empty());
}

TEST(Supervisor, AsSubreaperReapsOrphansOfItsWorkers) {
  TempDir dir;
  const std::string marker = uniqueMarker();
  // Rank 1's shell starts a background process and replaces itself by a short sleep: the background process is
  // orphaned, comes to the driver (a subreaper, like PID 1 in a container) and ends at 0.3 s, while rank 0
  // keeps the run going for 2 s.
  Driver d(dir, cat({"--nproc", "2", "--subreaper", "--"},
                    rankSplit(kChild + " sleep 0.3 " + marker + " & exec " + kChild + " sleep 0.1",
                              kChild + " sleep 2")));
  std::this_thread::sleep_for(1200ms);
  EXPECT_EQ(zombieChildrenOf(d.pid()), 0) << "orphans of the workers were left as zombies of the supervisor";
  const Finished f = d.wait();
  EXPECT_EQ(f.exit_code, 0) << f.err;
}

// Issue 17, kind 9: a worker's grandchild that calls setsid() left the worker's group, so killing the group missed
// it and it outlived the run. The supervisor is now its subreaper and sweeps what is re-parented to it.
TEST(HostileOrphans, ADaemonAWorkerStartedDiesWithTheRun) {
  TempDir dir;
  const std::string marker = uniqueMarker();
  Driver d(dir, {"--", kChild, "escape", marker, "60", "300"});
  const Finished f = d.wait();
  EXPECT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(f.out, "[0:0] escaped\n");
  EXPECT_LT(f.seconds, 10.0);
  EXPECT_TRUE(waitFor([&] { return processesWith(marker).empty(); }, 2s))
      << processesWith(marker).size() << " process(es) a worker started outlived the run";
}

TEST(HostileOrphans, ADaemonOfASurvivingWorkerDiesWhenAnotherFails) {
  TempDir dir;
  const std::string marker = uniqueMarker();
  // Rank 0 starts a daemon and keeps running; rank 1 fails, so fail-fast stops rank 0: the daemon goes too.
  Driver d(dir, cat({"--nproc", "2", "--grace-ms", "5000", "--"},
                    rankSplit(kChild + " exit 3 500", kChild + " escape " + marker + " 60")));
  const Finished f = d.wait();
  EXPECT_EQ(f.exit_code, 3) << f.err;
  EXPECT_TRUE(waitFor([&] { return processesWith(marker).empty(); }, 2s))
      << processesWith(marker).size() << " process(es) a worker started outlived the run";
}

TEST(Supervisor, LogFilesAndEchoFilter) {
  TempDir dir;
  const fs::path logs = dir.path() / "logs" / "nested";
  Driver d(dir, {"--nproc", "2", "--log-dir", logs.string(), "--echo-ranks", "1", "--", kChild, "exit", "0"});
  const Finished f = d.wait();
  EXPECT_EQ(f.exit_code, 0) << f.err;
  EXPECT_EQ(f.out, "[0:1] out of rank 1\n");
  EXPECT_EQ(f.err.find("[0:0]"), std::string::npos) << f.err;
  const std::string log0 = readFile(logs / "rank0.log");
  EXPECT_NE(log0.find("out of rank 0\n"), std::string::npos) << log0;
  EXPECT_NE(log0.find("err of rank 0\n"), std::string::npos) << log0;
  EXPECT_EQ(log0.find("[0:0]"), std::string::npos) << "log files are not prefixed";
  EXPECT_NE(readFile(logs / "rank1.log").find("out of rank 1\n"), std::string::npos);
}

TEST(Supervisor, MissingCommandIsAClearErrorAndIsNotRestarted) {
  TempDir dir;
  Driver d(dir, {"--nproc", "2", "--max-restarts", "3", "--", "no-such-command-taehv-xyz", "arg"});
  const Finished f = d.wait();
  EXPECT_EQ(f.exit_code, 127) << f.err;
  EXPECT_NE(f.err.find("cannot start rank 0 [0:0] on testhost: command not found: 'no-such-command-taehv-xyz'"),
            std::string::npos)
      << f.err;
  EXPECT_NE(f.err.find("driver: exit_code=127 restarts=0 "), std::string::npos) << f.err;
}

TEST(Supervisor, AWorkerThatCannotStartStopsTheOnesAlreadyStarted) {
  TempDir dir;
  const std::string marker = uniqueMarker();
  fs::create_symlink(kChild, dir.path() / "w0");  // rank 0's program exists, rank 1's (w1) does not
  Driver d(dir, {"--nproc", "2", "--grace-ms", "10000", "--", (dir.path() / "w{rank}").string(), "sleep", "60", marker});
  const Finished f = d.wait();
  EXPECT_EQ(f.exit_code, 127) << f.err;
  EXPECT_LT(f.seconds, 8.0) << f.err;
  EXPECT_NE(f.err.find("cannot start rank 1 [0:1] on testhost: cannot execute '" + (dir.path() / "w1").string() +
                       "': No such file or directory"),
            std::string::npos)
      << f.err;
  EXPECT_NE(f.err.find("first_failure_rank=1"), std::string::npos) << f.err;
  EXPECT_TRUE(processesWith(marker).empty());
}

TEST(Supervisor, NonExecutableFileAndBadDirectoryAreClearErrors) {
  TempDir dir;
  const fs::path text = dir.path() / "not-a-program";
  std::ofstream(text) << "hello\n";
  {
    Driver d(dir, {"--", text.string()});
    const Finished f = d.wait();
    EXPECT_EQ(f.exit_code, 127) << f.err;
    EXPECT_NE(f.err.find("cannot execute '" + text.string() + "'"), std::string::npos) << f.err;
    EXPECT_NE(f.err.find("Permission denied"), std::string::npos) << f.err;
  }
  {
    Driver d(dir, {"--cwd", (dir.path() / "missing").string(), "--", "/bin/pwd"});
    const Finished f = d.wait();
    EXPECT_EQ(f.exit_code, 127) << f.err;
    EXPECT_NE(f.err.find("cannot change directory to '" + (dir.path() / "missing").string() + "'"), std::string::npos) << f.err;
  }
  {
    Driver d(dir, {"--cwd", dir.path().string(), "--", "pwd"});
    const Finished f = d.wait();
    EXPECT_EQ(f.exit_code, 0) << f.err;
    EXPECT_EQ(f.out, "[0:0] " + fs::canonical(dir.path()).string() + "\n");
  }
}

TEST(Supervisor, ChildrenStartCleanInTheirOwnGroupWithParentDeathSignal) {
  TempDir dir;
  const std::string file = (dir.path() / "state").string();
  // While it supervises, the supervisor ignores SIGPIPE, catches INT/TERM/HUP/USR1/USR2/CHLD and blocks every
  // signal around fork(): none of that may reach the worker.
  Driver d(dir, {"--nproc", "1", "--", kChild, "sigstate", file});
  ASSERT_EQ(d.wait().exit_code, 0);
  const std::string state = readFile(file);
  EXPECT_NE(state.find("pgid_is_pid=1\n"), std::string::npos) << state;
  EXPECT_NE(state.find("pdeathsig=9\n"), std::string::npos) << state;
  EXPECT_NE(state.find("blocked=0\n"), std::string::npos) << state;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGPIPE, SIGCHLD}) {
    EXPECT_EQ(state.find("ignored=" + std::to_string(sig) + ","), std::string::npos) << state;
    EXPECT_EQ(state.find("," + std::to_string(sig) + ","), std::string::npos) << state;
  }
}

TEST(Supervisor, ChildrenGetTheEnvironmentOfTheirSpec) {
  TempDir dir;
  const std::string env = (dir.path() / "env").string();
  Driver d(dir, {"--nproc", "2", "--max-restarts", "0", "--", kChild, "env", env + "{rank}", "RANK", "WORLD_SIZE",
                 "TORCHELASTIC_RESTART_COUNT", "TAEHV_PROCESS_TEST_EXTRA"},
           {{"TAEHV_PROCESS_TEST_EXTRA", "from the driver's spec"}});
  ASSERT_EQ(d.wait().exit_code, 0);
  EXPECT_EQ(readFile(env + "1"),
            "RANK=1\nWORLD_SIZE=2\nTORCHELASTIC_RESTART_COUNT=0\nTAEHV_PROCESS_TEST_EXTRA=from the driver's spec\n");
}

TEST(Supervisor, StdinIsDevNullOrAHeldPipe) {
  TempDir dir;
  {
    Driver d(dir, {"--", "/bin/cat"});
    EXPECT_EQ(d.wait(5s).exit_code, 0);  // EOF at once
  }
  {
    Driver d(dir, {"--stdin-pipe", "--grace-ms", "2000", "--", "/bin/cat"});
    std::this_thread::sleep_for(300ms);
    int status = 0;
    EXPECT_EQ(::waitpid(d.pid(), &status, WNOHANG), 0) << "cat saw EOF although the supervisor holds its stdin";
    d.signal(SIGTERM);
    EXPECT_EQ(d.wait().exit_code, 128 + SIGTERM);
  }
}

TEST(Supervisor, WritesATorchelasticErrorFile) {
  TempDir dir;
  const std::string error_file = (dir.path() / "error.json").string();
  Driver d(dir, cat({"--nproc", "2", "--error-file", error_file, "--"},
                    rankSplit(kChild + " exit 7 100", kChild + " sleep 60")));
  const Finished f = d.wait();
  ASSERT_EQ(f.exit_code, 7) << f.err;
  const auto doc = nlohmann::json::parse(readFile(error_file));
  const auto& message = doc.at("message");
  EXPECT_EQ(message.at("message").get<std::string>(), "ChildFailedError: rank 1 (0:1) on host testhost exited with code 7");
  EXPECT_EQ(message.at("errorCode").get<int>(), 7);
  const std::string timestamp = message.at("extraInfo").at("timestamp").get<std::string>();
  EXPECT_NEAR(std::stoll(timestamp), static_cast<long long>(std::time(nullptr)), 60);
  EXPECT_NE(message.at("extraInfo").at("py_callstack").get<std::string>().find("err of rank 1\n"), std::string::npos);
}

TEST(Supervisor, ErrorFileCarriesTheWorkersOwnTorchelasticError) {
  TempDir dir;
  const std::string error_file = (dir.path() / "error.json").string();
  const std::string child_file = (dir.path() / "child-error.json").string();
  // The driver hands its environment to the workers: TORCHELASTIC_ERROR_FILE is in their ChildSpec::env.
  Driver d(dir, cat({"--nproc", "2", "--error-file", error_file, "--"},
                    rankSplit(kChild + " elastic-fail 9", kChild + " sleep 60")),
           {{"TORCHELASTIC_ERROR_FILE", child_file}});
  const Finished f = d.wait();
  ASSERT_EQ(f.exit_code, 9) << f.err;
  const auto doc = nlohmann::json::parse(readFile(error_file));
  EXPECT_EQ(doc.at("message").at("message").get<std::string>(), "ValueError: boom from rank 1");
  EXPECT_EQ(doc.at("message").at("errorCode").get<int>(), 9);
  EXPECT_EQ(doc.at("message").at("extraInfo").at("py_callstack").get<std::string>(), "Traceback: here");
}

TEST(Supervisor, InterruptWritesASignalExceptionErrorFile) {
  TempDir dir;
  const std::string error_file = (dir.path() / "error.json").string();
  const std::string rec = (dir.path() / "sig").string();
  Driver d(dir, {"--error-file", error_file, "--", kChild, "record", rec, "30"});
  ASSERT_TRUE(waitFor([&] { return fs::exists(rec + ".ready"); }, 10s));
  d.signal(SIGINT);
  const Finished f = d.wait();
  EXPECT_EQ(f.exit_code, 130) << f.err;
  const auto doc = nlohmann::json::parse(readFile(error_file));
  EXPECT_EQ(doc.at("message").at("message").get<std::string>().rfind("SignalException: Process ", 0), 0u);
  EXPECT_EQ(doc.at("message").at("errorCode").get<int>(), 130);
}

// Issue 38, defect 4: a worker's stderr with a Latin-1 byte (0xE9) ended the supervisor with nlohmann's type_error
// 316 (SIGABRT) while it wrote the error file. Now the file is valid JSON, the byte is U+FFFD and the file says so.
TEST(HostileErrorFile, AWorkersStderrThatIsNotUtf8IsReplacedAndSaidSo) {
  TempDir dir;
  const std::string error_file = (dir.path() / "error.json").string();
  Driver d(dir, {"--error-file", error_file, "--", "/bin/sh", "-c", "printf 'caf\\351 \\377 file\\n' >&2; exit 3"});
  const Finished f = d.wait();
  ASSERT_EQ(f.exit_code, 3) << f.err;
  const auto doc = nlohmann::json::parse(readFile(error_file));
  const auto& extra = doc.at("message").at("extraInfo");
  EXPECT_NE(extra.at("py_callstack").get<std::string>().find("caf\xEF\xBF\xBD \xEF\xBF\xBD file\n"), std::string::npos)
      << extra.dump();
  EXPECT_EQ(extra.at("utf8_note").get<std::string>(),
            "this error file: 2 byte sequences that are not valid UTF-8 written as U+FFFD (the first at "
            "/message/extraInfo/py_callstack)");
}

// ---- the same guarantees through the product: taehv-run --standalone ----------------------------------

std::string taehvRun() { return taehv::testing::builtProgram("taehv-run"); }

TEST(TaehvRunSupervision, Kill9OfTaehvRunLeavesNoWorker) {
  const std::string run = taehvRun();
  ASSERT_PROGRAM_BUILT(run);
  TempDir dir;
  const std::string marker = uniqueMarker();
  Driver d(dir, {"--standalone", "--nproc-per-node", "2", "--", kChild, "tree", marker, "60"}, {}, run);
  ASSERT_TRUE(waitFor([&] { return splitLines(d.out()).size() == 2; }, 10s)) << d.out() << d.err();
  ASSERT_GE(processesWith(marker).size(), 4u);
  d.signal(SIGKILL);
  EXPECT_EQ(d.wait().signal, SIGKILL);
  EXPECT_TRUE(waitFor([&] { return processesWith(marker).empty(); }, 5s))
      << processesWith(marker).size() << " processes survived kill -9 of taehv-run";
}

TEST(HostileOrphans, TaehvRunLeavesNoDaemonOfAWorker) {
  const std::string run = taehvRun();
  ASSERT_PROGRAM_BUILT(run);
  TempDir dir;
  const std::string marker = uniqueMarker();
  Driver d(dir, {"--standalone", "--nproc-per-node", "2", "--", kChild, "escape", marker, "60", "300"}, {}, run);
  const Finished f = d.wait();
  EXPECT_EQ(f.exit_code, 0) << f.err;
  EXPECT_TRUE(waitFor([&] { return processesWith(marker).empty(); }, 2s))
      << processesWith(marker).size() << " process(es) a worker started outlived taehv-run";
}

TEST(TaehvRunSupervision, FailFastAndSignalForwarding) {
  const std::string run = taehvRun();
  ASSERT_PROGRAM_BUILT(run);
  TempDir dir;
  {
    Driver d(dir, cat({"--standalone", "--nproc-per-node", "3", "--shutdown-grace", "10", "--"},
                      rankSplit(kChild + " exit 4 200", kChild + " sleep 60")),
             {}, run);
    const Finished f = d.wait();
    EXPECT_EQ(f.exit_code, 4) << f.err;
    EXPECT_LT(f.seconds, 8.0) << f.err;
    EXPECT_NE(f.err.find("taehv-run: first failure: rank 1\n"), std::string::npos) << f.err;
    EXPECT_NE(f.err.find("  | err of rank 1\n"), std::string::npos) << f.err;
  }
  {
    const std::string rec = (dir.path() / "sig").string();
    Driver d(dir, {"--standalone", "--nproc-per-node", "2", "--", "/bin/sh", "-c", "exec " + kChild + " record " + rec + "$RANK 30"},
             {}, run);
    ASSERT_TRUE(waitFor([&] { return fs::exists(rec + "0.ready") && fs::exists(rec + "1.ready"); }, 10s)) << d.err();
    d.signal(SIGUSR1);
    EXPECT_TRUE(waitFor([&] { return readFile(rec + "0") == "SIGUSR1\n" && readFile(rec + "1") == "SIGUSR1\n"; }, 5s));
    d.signal(SIGTERM);
    const Finished f = d.wait();
    EXPECT_EQ(f.exit_code, 128 + SIGTERM) << f.err;
    EXPECT_EQ(readFile(rec + "0"), "SIGUSR1\nSIGTERM\n");
    EXPECT_EQ(readFile(rec + "1"), "SIGUSR1\nSIGTERM\n");
  }
}

}  // namespace
