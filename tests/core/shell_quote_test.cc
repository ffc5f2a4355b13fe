// taehv/shell_quote.h: the one shell quoter of the SSH fan-out's remote command, the sbatch script and PAI-DLC's
// UserCommand, judged by a real /bin/sh.
#include "taehv/shell_quote.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

namespace taehv {
namespace {

/// Runs `script` with /bin/sh and returns its stdout (the real shell is the only honest judge of quoting).
std::string runSh(const std::string& script) {
  const std::string cmd = "/bin/sh -c " + shellQuote(script);
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return "<popen failed>";
  std::string out;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

const std::vector<std::string> kHostile = {
    "plain", "", "two words", "semi;colon", "$(touch /tmp/taehv-pwned)", "`id`", "it's", "\"dq\"", "new\nline",
    "back\\slash", "$HOME", "*", "~", "#hash", "a=b", "-n", "'''", "tab\there", "!bang", "{a,b}", "\\'\\\"",
    "--opt=a b", "=x", "x=$(id)", "--resume={ckpt}",
};

TEST(ShellQuote, EveryHostileWordReadsBackExactlyThroughARealShell) {
  for (const auto& word : kHostile) {
    // printf '%s\0' prints each argument raw, NUL-terminated: exactly one argument, byte-identical.
    const std::string out = runSh("printf '%s\\0' " + shellQuote(word));
    EXPECT_EQ(out, word + std::string(1, '\0')) << "word: " << word;
  }
  std::string all;
  for (const auto& word : kHostile) all += word + std::string(1, '\0');
  EXPECT_EQ(runSh("printf '%s\\0' " + shellJoin(kHostile)), all);
}

TEST(ShellQuote, SurvivesTwoShellLevelsLikeTheSshRemoteCommand) {
  // ssh hands the remote login shell one string; the fan-out wraps the script in `/bin/sh -c '...'` again.
  for (const auto& word : kHostile) {
    const std::string inner = "printf '%s\\0' " + shellQuote(word);
    const std::string out = runSh("exec /bin/sh -c " + shellQuote(inner));
    EXPECT_EQ(out, word + std::string(1, '\0')) << "word: " << word;
  }
}

TEST(ShellQuote, SafeWordsStayReadable) {
  EXPECT_EQ(shellQuote("/usr/bin/taehv-run"), "/usr/bin/taehv-run");
  EXPECT_EQ(shellQuote("--nproc-per-node"), "--nproc-per-node");
  EXPECT_EQ(shellQuote("plain-word_1.2=x"), "plain-word_1.2=x");
  EXPECT_EQ(shellQuote("--account=abc"), "--account=abc");
  EXPECT_EQ(shellQuote("a b"), "'a b'");
  EXPECT_EQ(shellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(shellQuote("it's $HOME"), "'it'\\''s $HOME'");
  EXPECT_EQ(shellQuote(""), "''");
  EXPECT_EQ(shellQuote("A=1"), "'A=1'");
  EXPECT_EQ(shellQuote("=x"), "'=x'");
  EXPECT_EQ(shellJoin({"a", "b c"}), "a 'b c'");
}

// A word NAME=VALUE left bare in command position would be an assignment and run nothing (exit 0); quoted it is a
// command the shell looks for (exit 127).
TEST(ShellQuote, AnAssignmentLikeWordIsACommandWordNotAnAssignment) {
  EXPECT_EQ(runSh(shellQuote("A=1") + " 2>/dev/null; echo $?"), "127\n");
  EXPECT_EQ(runSh("A=1 2>/dev/null; echo $?"), "0\n") << "the shell this test runs assigns bare NAME=VALUE";
}

TEST(ShellName, Validation) {
  EXPECT_TRUE(isShellName("NCCL_DEBUG"));
  EXPECT_TRUE(isShellName("_x1"));
  EXPECT_FALSE(isShellName("1X"));
  EXPECT_FALSE(isShellName("A-B"));
  EXPECT_FALSE(isShellName("A;B"));
  EXPECT_FALSE(isShellName(""));
}

}  // namespace
}  // namespace taehv
