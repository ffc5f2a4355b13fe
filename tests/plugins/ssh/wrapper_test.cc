// The remote wrapper (fanout.h remoteScript) run by a real /bin/sh on this machine, exactly as sshd would run
// it (the login shell gets remoteCommand()'s string), without ssh: quoting of hostile values, exit status, and
// the stdin-EOF watchdog that tears the job's process group down.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <sstream>

#include "taehv/ssh/fanout.h"
#include "proc_marker.h"
#include "taehv/shell_quote.h"

namespace taehv::ssh {
namespace {

using testing::countMarker;
using testing::waitMarker;

class SshWrapper : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/taehv-ssh-wrapper-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    marker_ = "TAEHV_TEST_MARKER=taehv-wrap-" + std::to_string(::getpid()) + "-" + std::to_string(std::random_device{}());
    // A stand-in for taehv-run: prints each argument NUL-terminated, the variables we forward, and then runs
    // whatever MODE asks for.
    bin_ = dir_ + "/fake-taehv-run";
    std::ofstream(bin_) << "#!/bin/sh\n"
                           "printf '%s\\0' \"$@\" > \"$OUT_DIR/args\"\n"
                           "printf '%s\\0' \"$HOSTILE\" > \"$OUT_DIR/env\"\n"
                           "pwd > \"$OUT_DIR/pwd\"\n"
                           "printf '%s' \"$TAEHV_JOB_TOKEN\" > \"$OUT_DIR/token\"\n"
                           "case \"$MODE\" in\n"
                           "  exit) exit 7 ;;\n"
                           "  sleep) sleep 300 & wait ;;\n"
                           "  stubborn) trap '' TERM; sleep 300 & wait; sleep 300 ;;\n"
                           "esac\n";
    ::chmod(bin_.c_str(), 0755);
  }
  void TearDown() override {
    if (stdin_fd_ >= 0) ::close(stdin_fd_);  // lets the watchdog take down whatever a failed test left
    stdin_fd_ = -1;
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (stdin_fd_ >= 0) ::close(stdin_fd_);
    std::system(("rm -rf " + shellQuote(dir_)).c_str());
  }

  /// Starts the wrapper like sshd does: `/bin/sh -c COMMAND` with a pipe as stdin (we hold the write end).
  void start(RemoteJob job) {
    job.remote_bin = bin_;
    job.env["OUT_DIR"] = dir_;
    job.env["TAEHV_TEST_MARKER"] = marker_.substr(marker_.find('=') + 1);
    const std::string command = remoteCommand(remoteScript(job));
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::dup2(fds[0], 0);
      ::close(fds[0]);
      ::close(fds[1]);
      ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(fds[0]);
    stdin_fd_ = fds[1];
  }
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  std::string read(const std::string& name) {
    std::ifstream in(dir_ + "/" + name, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  std::string dir_;
  std::string bin_;
  std::string marker_;
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
};

TEST_F(SshWrapper, HostileArgumentsAndEnvironmentArriveVerbatimAndRunNothing) {
  const std::string pwned = dir_ + "/pwned";
  const std::string hostile = "a;touch " + pwned + "; $(touch " + pwned + ") `touch " + pwned + "` 'q' \"d\" \n" +
                              "touch " + pwned + "\n$HOME \\";
  RemoteJob job;
  job.cwd = dir_;
  job.env["HOSTILE"] = hostile;
  job.env["MODE"] = "exit0";
  job.taehv_args = {"--x", hostile, "", "-- ;"};
  start(job);  // stdin stays open (closing it now would tear the job down before it ran)
  EXPECT_EQ(wait(), 0);
  std::string want_args;
  for (const auto& a : job.taehv_args) want_args += a + std::string(1, '\0');
  EXPECT_EQ(read("args"), want_args);
  EXPECT_EQ(read("env"), hostile + std::string(1, '\0'));
  EXPECT_EQ(read("pwd"), dir_ + "\n");
  EXPECT_NE(::access(pwned.c_str(), F_OK), 0) << "a hostile value ran a command";
}

TEST_F(SshWrapper, JobTokenComesFromStdinNotTheCommandLineAndTheWatchdogStillWorks) {
  const std::string token = "0123456789abcdef0123456789abcdef-from-stdin";
  RemoteJob job;
  job.cwd = dir_;
  job.env["MODE"] = "sleep";
  job.token_on_stdin = true;
  EXPECT_EQ(remoteCommand(remoteScript(job)).find(token), std::string::npos);
  start(job);
  const std::string line = token + "\n";
  ASSERT_EQ(::write(stdin_fd_, line.data(), line.size()), static_cast<ssize_t>(line.size()));
  for (int i = 0; i < 100 && read("token").empty(); ++i) ::usleep(20000);
  EXPECT_EQ(read("token"), token);
  ::close(stdin_fd_);  // the watchdog (reading the rest of stdin) sees EOF and ends the job
  stdin_fd_ = -1;
  EXPECT_NE(wait(), 0);
}

TEST_F(SshWrapper, NoJobTokenOnStdinFailsClearly) {
  RemoteJob job;
  job.cwd = dir_;
  job.token_on_stdin = true;
  start(job);
  ::close(stdin_fd_);
  stdin_fd_ = -1;
  EXPECT_EQ(wait(), 125);
  EXPECT_EQ(read("args"), "");  // taehv-run never started
}

TEST_F(SshWrapper, ExitStatusOfTheJobIsTheWrappersAndStdinStaysOpen) {
  RemoteJob job;
  job.cwd = dir_;
  job.env["MODE"] = "exit";
  start(job);  // we keep stdin open: the wrapper must end when the job ends, not wait for EOF
  EXPECT_EQ(wait(), 7);
}

TEST_F(SshWrapper, MissingWorkingDirectoryFailsClearly) {
  RemoteJob job;
  job.cwd = dir_ + "/does-not-exist";
  start(job);
  EXPECT_EQ(wait(), 126);
}

TEST_F(SshWrapper, StdinEofTerminatesTheWholeProcessGroup) {
  RemoteJob job;
  job.cwd = dir_;
  job.env["MODE"] = "sleep";
  start(job);
  ASSERT_EQ(waitMarker(marker_, 2, std::chrono::seconds(5)), 2);  // the fake taehv-run and its sleep
  ::close(stdin_fd_);  // what happens when the ssh client or the launcher dies
  stdin_fd_ = -1;
  EXPECT_EQ(waitMarker(marker_, 0, std::chrono::seconds(3)), 0);
  EXPECT_EQ(wait(), 128 + SIGTERM);
}

TEST_F(SshWrapper, StdinEofKillsAJobThatIgnoresSigtermAfterTheGrace) {
  RemoteJob job;
  job.cwd = dir_;
  job.env["MODE"] = "stubborn";
  job.grace_seconds = 1;
  start(job);
  ASSERT_EQ(waitMarker(marker_, 2, std::chrono::seconds(5)), 2);
  ::close(stdin_fd_);
  stdin_fd_ = -1;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(countMarker(marker_), 2) << "SIGTERM is ignored: must survive until the grace ends";
  EXPECT_EQ(waitMarker(marker_, 0, std::chrono::seconds(3)), 0);
  EXPECT_EQ(wait(), 128 + SIGKILL);
}

}  // namespace
}  // namespace taehv::ssh
