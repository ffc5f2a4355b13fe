// runProgram/runPrograms with real programs (/bin/sh): output captured whole, no deadlock on a full pipe,
// deadlines, programs that cannot start.
#include "taehv/process/run.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace taehv::process {
namespace {

using namespace std::chrono_literals;

const std::map<std::string, std::string> kEnv = {{"PATH", "/usr/bin:/bin"}};

RunRequest shell(const std::string& script) { return {{"/bin/sh", "-c", script}, kEnv, std::nullopt, true}; }

// Reading stdout to its end before stderr deadlocks here: the child blocks on a full stderr pipe (64 KiB) and
// never closes stdout. The deadline only turns such a hang into a failure.
TEST(RunProgram, ReadsAMegabyteOfStderrWithoutDeadlock) {
  const auto r = runProgram(shell("head -c 1048576 /dev/zero | tr '\\0' e >&2; echo done"), 30s);
  ASSERT_TRUE(r.started()) << r.spawn_error;
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "done\n");
  EXPECT_EQ(r.err, std::string(1048576, 'e'));
}

// Writing all of stdin before reading deadlocks once the child's stdout pipe is full (cat writes as it reads).
TEST(RunProgram, FeedsAMegabyteOfInputWhileReadingOutput) {
  RunRequest cat = shell("cat; echo end >&2");
  cat.input = std::string(1048576, 'i');
  const auto r = runProgram(cat, 30s);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.status(), 0);
  EXPECT_EQ(r.out, *cat.input);
  EXPECT_EQ(r.err, "end\n");
}

TEST(RunProgram, AProgramThatIgnoresItsInputIsNoError) {
  RunRequest quit = shell("exit 4");
  quit.input = std::string(1048576, 'i');  // more than a pipe holds: the write gets EPIPE, not SIGPIPE
  const auto r = runProgram(quit, 30s);
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_EQ(r.status(), 4);
}

TEST(RunProgram, LooksTheProgramUpOnItsOwnPath) {
  const auto r = runProgram({{"sh", "-c", "echo $0"}, kEnv, std::nullopt, true});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "sh\n");
  const auto missing = runProgram({{"sh", "-c", "true"}, {{"PATH", "/nonexistent"}}, std::nullopt, true});
  EXPECT_FALSE(missing.started());
  EXPECT_NE(missing.spawn_error.find("'sh'"), std::string::npos) << missing.spawn_error;
  EXPECT_EQ(missing.status(), 127);
}

TEST(RunProgram, ReportsTheSignalThatEndedIt) {
  const auto r = runProgram(shell("kill -TERM $$"));
  EXPECT_EQ(r.signal, 15);
  EXPECT_EQ(r.status(), 143);
}

TEST(RunPrograms, CapturesEachAndEnforcesOneDeadline) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = runPrograms({shell("echo out; echo err >&2; exit 3"), shell("exec sleep 30"),
                              {{"/nonexistent/binary"}, kEnv, std::nullopt, true},
                              shell("exec >&- 2>&-; exec sleep 30")},  // closes its output, then hangs
                             500ms);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].exit_code, 3);
  EXPECT_EQ(r[0].out, "out\n");
  EXPECT_EQ(r[0].err, "err\n");
  EXPECT_FALSE(r[0].timed_out);
  EXPECT_TRUE(r[1].timed_out);
  EXPECT_EQ(r[1].signal, 9);
  EXPECT_NE(r[2].spawn_error.find("No such file"), std::string::npos) << r[2].spawn_error;
  EXPECT_TRUE(r[3].timed_out);
  EXPECT_LT(took, 5s);
}

// Was SshFindInPath.UsesTheGivenEnvironment (plugins/ssh had its own lookup).
TEST(FindExecutable, SearchesTheGivenPath) {
  EXPECT_EQ(findExecutable("sh", "/nonexistent:/bin"), "/bin/sh");
  EXPECT_EQ(findExecutable("sh", "/nonexistent"), "");
  EXPECT_EQ(findExecutable("/x/y", ""), "/x/y");
  EXPECT_EQ(findProgram("sh", {{"PATH", "/nonexistent:/bin"}}), "/bin/sh");
  EXPECT_EQ(findProgram("sh", {{"PATH", "/nonexistent"}}), "");
  EXPECT_EQ(findProgram("/x/y", {}), "/x/y");
}

// Issue 17, kind 8: thousands of programs at once (one ssh per host) exhausted memory; the deadline was per
// program, not for the call.
TEST(HostileRunPrograms, AtMostNRunAtOnceAndTheNextStartsAsOneEnds) {
  char templ[] = "/tmp/taehv-run-test-XXXXXX";
  ASSERT_NE(::mkdtemp(templ), nullptr);
  const std::string dir = templ;
  std::vector<RunRequest> requests;
  for (int i = 0; i < 6; ++i) {
    // Each counts the programs running beside it (marker files), holds its slot 0.2 s, then leaves.
    requests.push_back(shell("touch " + dir + "/" + std::to_string(i) + "; ls " + dir +
                             " | wc -l; sleep 0.2; rm " + dir + "/" + std::to_string(i)));
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto results = runPrograms(requests, 30s, 2);
  const auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(results.size(), 6u);
  for (const auto& r : results) {
    EXPECT_EQ(r.status(), 0) << r.err;
    EXPECT_LE(std::stoi(r.out), 2) << "more than 2 ran at once";
    EXPECT_FALSE(r.not_started);
  }
  EXPECT_GE(took, 600ms);  // three rounds of two
  ::rmdir(dir.c_str());
}

TEST(HostileRunPrograms, TheDeadlineIsForTheWholeCallAndLateOnesNeverStart) {
  std::vector<RunRequest> requests(10, shell("exec sleep 30"));
  const auto t0 = std::chrono::steady_clock::now();
  const auto results = runPrograms(requests, 500ms, 2);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  ASSERT_EQ(results.size(), 10u);
  for (std::size_t i = 0; i < results.size(); ++i) {
    EXPECT_TRUE(results[i].timed_out) << i;
    EXPECT_EQ(results[i].not_started, i >= 2) << i;
    if (i < 2) {
      EXPECT_TRUE(results[i].started()) << i;
    }
  }
}

}  // namespace
}  // namespace taehv::process
