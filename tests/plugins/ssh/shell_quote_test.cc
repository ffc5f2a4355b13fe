#include "taehv/ssh/shell_quote.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace taehv::ssh {
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
};

TEST(SshShellQuote, EveryHostileWordReadsBackExactlyThroughARealShell) {
  for (const auto& word : kHostile) {
    // printf '%s\0' prints each argument raw, NUL-terminated: exactly one argument, byte-identical.
    const std::string out = runSh("printf '%s\\0' " + shellQuote(word));
    EXPECT_EQ(out, word + std::string(1, '\0')) << "word: " << word;
  }
}

TEST(SshShellQuote, SurvivesTwoShellLevelsLikeTheSshRemoteCommand) {
  // ssh hands the remote login shell one string; we wrap the script in `/bin/sh -c '...'` again.
  for (const auto& word : kHostile) {
    const std::string inner = "printf '%s\\0' " + shellQuote(word);
    const std::string out = runSh("exec /bin/sh -c " + shellQuote(inner));
    EXPECT_EQ(out, word + std::string(1, '\0')) << "word: " << word;
  }
}

TEST(SshShellQuote, SafeWordsStayReadable) {
  EXPECT_EQ(shellQuote("/usr/bin/taehv-run"), "/usr/bin/taehv-run");
  EXPECT_EQ(shellQuote("--nproc-per-node"), "--nproc-per-node");
  EXPECT_EQ(shellQuote("a b"), "'a b'");
  EXPECT_EQ(shellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(shellQuote(""), "''");
  EXPECT_EQ(shellQuote("A=1"), "'A=1'");  // never an assignment in command position
  EXPECT_EQ(shellJoin({"a", "b c"}), "a 'b c'");
}

TEST(SshSplitWords, SplitsLikeAShellWithoutExpanding) {
  auto r = splitWords("-p 2222  -o 'ProxyJump a b' -F \"my cfg\" x\\ y $(id) `id` $HOME");
  ASSERT_TRUE(r.error.empty());
  EXPECT_EQ(r.value, (std::vector<std::string>{"-p", "2222", "-o", "ProxyJump a b", "-F", "my cfg", "x y", "$(id)",
                                               "`id`", "$HOME"}));
  EXPECT_TRUE(splitWords("   ").value.empty());
  EXPECT_EQ(splitWords("''").value, (std::vector<std::string>{""}));
  EXPECT_NE(splitWords("-o 'unterminated").error.find("unterminated ' quote"), std::string::npos);
  EXPECT_NE(splitWords("-o \"x").error.find("unterminated \" quote"), std::string::npos);
}

TEST(SshHostName, Validation) {
  EXPECT_EQ(hostNameError("node-01.cluster_a"), "");
  EXPECT_EQ(hostNameError("10.77.0.2"), "");
  EXPECT_NE(hostNameError(""), "");
  EXPECT_NE(hostNameError("-oProxyCommand=sh"), "");
  EXPECT_NE(hostNameError("a b"), "");
  EXPECT_NE(hostNameError("a\nb"), "");
  EXPECT_NE(hostNameError(std::string(254, 'a')), "");
}

TEST(SshEnvName, Validation) {
  EXPECT_TRUE(isValidEnvName("NCCL_DEBUG"));
  EXPECT_TRUE(isValidEnvName("_x1"));
  EXPECT_FALSE(isValidEnvName("1X"));
  EXPECT_FALSE(isValidEnvName("A-B"));
  EXPECT_FALSE(isValidEnvName("A;B"));
  EXPECT_FALSE(isValidEnvName(""));
}

}  // namespace
}  // namespace taehv::ssh
