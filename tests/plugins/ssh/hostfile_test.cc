#include "taehv/ssh/hostfile.h"

#include <gtest/gtest.h>

namespace taehv::ssh {
namespace {

std::vector<std::string> names(const std::vector<HostEntry>& hosts) {
  std::vector<std::string> out;
  for (const auto& h : hosts) out.push_back(h.host);
  return out;
}

TEST(SshHostfile, ParsesDeepSpeedFormatWithCommentsAndBlankLines) {
  const auto r = parseHostfile("# cluster\n\nworker-0 slots=4\n  worker-1   slots=2  # spare\n\n", "hf");
  ASSERT_TRUE(r.ok()) << r.error;
  ASSERT_EQ(r.value.size(), 2u);
  EXPECT_EQ(r.value[0].host, "worker-0");
  EXPECT_EQ(r.value[0].slots, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(r.value[0].line, 3);
  EXPECT_EQ(r.value[1].host, "worker-1");
  EXPECT_EQ(r.value[1].slots_in_file, 2);
}

TEST(SshHostfile, KeepsFileOrderAsNodeRankOrder) {
  const auto r = parseHostfile("c slots=1\na slots=1\nb slots=1\n", "hf");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(names(r.value), (std::vector<std::string>{"c", "a", "b"}));
}

TEST(SshHostfile, RejectsBadLinesNamingFileAndLine) {
  EXPECT_EQ(parseHostfile("a slots=1\nb\n", "hf").error,
            "hf:2: expected 'HOST slots=N', got 'b' (add slots=N: the number of processes on that host)");
  EXPECT_NE(parseHostfile("a slots=x\n", "hf").error.find("hf:1: slots must be a whole number"), std::string::npos);
  EXPECT_NE(parseHostfile("a slots=0\n", "hf").error.find("hf:1: slots must be"), std::string::npos);
  EXPECT_NE(parseHostfile("a slots=-1\n", "hf").error.find("hf:1:"), std::string::npos);
  EXPECT_NE(parseHostfile("a gpus=2\n", "hf").error.find("hf:1: expected"), std::string::npos);
  EXPECT_NE(parseHostfile("a slots=1 extra\n", "hf").error.find("hf:1: expected"), std::string::npos);
  EXPECT_NE(parseHostfile("a slots=1\na slots=2\n", "hf").error.find("hf:2: host 'a' is listed twice"),
            std::string::npos);
  EXPECT_NE(parseHostfile("# only comments\n\n", "hf").error.find("no hosts"), std::string::npos);
}

TEST(SshHostfile, RejectsHostileHostNames) {
  for (const std::string bad : {"-oProxyCommand=x", "a;b", "$(id)", "a`id`", "a'b", "a\"b", "user@host", "a\\b",
                                "a|b", "a&b", ".hidden", "a>b", "h:1"}) {
    const auto r = parseHostfile(bad + " slots=1\n", "hf");
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error.rfind("hf:1: ", 0), 0u) << r.error;
  }
  EXPECT_NE(parseHostfile("user@host slots=1\n", "hf").error.find("~/.ssh/config"), std::string::npos);
}

std::vector<HostEntry> pool() {
  return parseHostfile("worker-0 slots=4\nworker-1 slots=4\nworker-2 slots=2\n", "hf").value;
}

TEST(SshHostFilter, NoFilterKeepsEverything) {
  const auto r = filterHosts(pool(), "", "");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value.size(), 3u);
}

TEST(SshHostFilter, IncludeHostsAndSlotsLikeDeepSpeed) {
  // DeepSpeed's docstring example: all slots of worker-0, slots 0 and 2 of worker-1.
  const auto r = filterHosts(pool(), "worker-1:0,2@worker-0", "");
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(names(r.value), (std::vector<std::string>{"worker-0", "worker-1"}));  // hostfile order
  EXPECT_EQ(r.value[0].slots, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(r.value[1].slots, (std::vector<int>{0, 2}));
}

TEST(SshHostFilter, IncludeDeduplicatesSlots) {
  const auto r = filterHosts(pool(), "worker-2:1,1,0", "");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value[0].slots, (std::vector<int>{0, 1}));
}

TEST(SshHostFilter, ExcludeWholeHostOrSlots) {
  auto r = filterHosts(pool(), "", "worker-1");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(names(r.value), (std::vector<std::string>{"worker-0", "worker-2"}));
  r = filterHosts(pool(), "", "worker-0:0@worker-2:0,1");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(names(r.value), (std::vector<std::string>{"worker-0", "worker-1"}));  // worker-2 lost all slots
  EXPECT_EQ(r.value[0].slots, (std::vector<int>{1, 2, 3}));
}

TEST(SshHostFilter, Errors) {
  EXPECT_NE(filterHosts(pool(), "worker-0", "worker-1").error.find("cannot be used together"), std::string::npos);
  EXPECT_NE(filterHosts(pool(), "nope", "").error.find("host 'nope' is not in the hostfile"), std::string::npos);
  EXPECT_NE(filterHosts(pool(), "worker-2:2", "").error.find("has slots 0..1, not 2"), std::string::npos);
  EXPECT_NE(filterHosts(pool(), "worker-2:x", "").error.find("slot 'x' is not a number"), std::string::npos);
  EXPECT_NE(filterHosts(pool(), "worker-2:1:2", "").error.find("more than one ':'"), std::string::npos);
  EXPECT_NE(filterHosts(pool(), "worker-0@", "").error.find("empty host name"), std::string::npos);
  EXPECT_NE(filterHosts(pool(), "", "worker-0@worker-1@worker-2").error.find("leaves no host"), std::string::npos);
}

}  // namespace
}  // namespace taehv::ssh
