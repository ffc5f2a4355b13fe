// --ssh-opts split into words, and the host names the hostfile takes (quoting itself: tests/core/shell_quote_test.cc).
#include "taehv/ssh/shell_words.h"

#include <gtest/gtest.h>

#include <string>

namespace taehv::ssh {
namespace {

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

}  // namespace
}  // namespace taehv::ssh
