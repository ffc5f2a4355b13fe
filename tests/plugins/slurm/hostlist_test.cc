// Hostlist expansion and compression: fixed cases, malformed input, and a property test against the real
// `scontrol show hostnames` / `scontrol show hostlist` (SLURM's own parser; needs no controller, only a
// config file, which the test writes).
#include "taehv/slurm/hostlist.h"

#include <gtest/gtest.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace taehv::slurm {
namespace {

using Hosts = std::vector<std::string>;

Hosts expand(const std::string& list) {
  HostlistResult r = expandHostlist(list);
  EXPECT_TRUE(r.ok()) << list << ": " << r.error;
  return r.value;
}

TEST(Hostlist, SimpleRangesAndSingles) {
  EXPECT_EQ(expand("n[1-3,7]"), (Hosts{"n1", "n2", "n3", "n7"}));
  EXPECT_EQ(expand("n5"), (Hosts{"n5"}));
  EXPECT_EQ(expand("n[5]"), (Hosts{"n5"}));
  EXPECT_EQ(expand("login"), (Hosts{"login"}));
  EXPECT_EQ(expand("[1-2]"), (Hosts{"1", "2"}));
}

TEST(Hostlist, ZeroPaddingFollowsTheLowNumber) {
  Hosts h = expand("linux[0000-1023]");
  ASSERT_EQ(h.size(), 1024u);
  EXPECT_EQ(h.front(), "linux0000");
  EXPECT_EQ(h[9], "linux0009");
  EXPECT_EQ(h.back(), "linux1023");
  EXPECT_EQ(expand("n[08-10]"), (Hosts{"n08", "n09", "n10"}));
  EXPECT_EQ(expand("n[8-10]"), (Hosts{"n8", "n9", "n10"}));
  EXPECT_EQ(expand("n[1-0010]"), (Hosts{"n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10"}));
  EXPECT_EQ(expand("n[7-07]"), (Hosts{"n7"}));
  EXPECT_EQ(expand("n[001-002,1000]"), (Hosts{"n001", "n002", "n1000"}));
}

TEST(Hostlist, SeveralBracketGroupsMultiplyInSlurmsOrder) {
  EXPECT_EQ(expand("a[0-1].b[2-3]"), (Hosts{"a0.b2", "a0.b3", "a1.b2", "a1.b3"}));
  // Three groups: SLURM varies the last fastest, then the first; the middle one slowest.
  EXPECT_EQ(expand("r[1-2]n[01-02]g[5]"), (Hosts{"r1n01g5", "r2n01g5", "r1n02g5", "r2n02g5"}));
  EXPECT_EQ(expand("n[1-2]-[3-4]"), (Hosts{"n1-3", "n1-4", "n2-3", "n2-4"}));
}

TEST(Hostlist, SeparatorsDigitsInPrefixAndOrder) {
  EXPECT_EQ(expand("n[1-2],m,x[3]"), (Hosts{"n1", "n2", "m", "x3"}));
  EXPECT_EQ(expand("a b\tc\nd"), (Hosts{"a", "b", "c", "d"}));
  EXPECT_EQ(expand(" a,, b ,"), (Hosts{"a", "b"}));
  EXPECT_EQ(expand("rack1-n[1-2]"), (Hosts{"rack1-n1", "rack1-n2"}));
  EXPECT_EQ(expand("gpu01a[3-4]"), (Hosts{"gpu01a3", "gpu01a4"}));
  EXPECT_EQ(expand("n[3,1-2]"), (Hosts{"n3", "n1", "n2"}));
  EXPECT_EQ(expand("n[3,1,1,2]"), (Hosts{"n3", "n1", "n1", "n2"}));  // duplicates kept, as SLURM does
  EXPECT_EQ(expand("n1-3"), (Hosts{"n1-3"}));                        // no brackets: a plain name
}

TEST(Hostlist, LargeListsExpandCompletely) {
  Hosts h = expand("n[0-65535]");
  ASSERT_EQ(h.size(), 65536u);
  EXPECT_EQ(h[12345], "n12345");
  Hosts grid = expand("a[0-255].b[0-255]");
  ASSERT_EQ(grid.size(), 65536u);
  EXPECT_EQ(grid[256], "a1.b0");
}

void expectError(const std::string& list, const std::string& part) {
  HostlistResult r = expandHostlist(list);
  EXPECT_FALSE(r.ok()) << "'" << list << "' should be rejected";
  EXPECT_TRUE(r.value.empty());
  EXPECT_NE(r.error.find(part), std::string::npos) << "'" << list << "' gave: " << r.error;
  EXPECT_NE(r.error.find("'" + list + "'"), std::string::npos) << "the message names the list: " << r.error;
}

TEST(Hostlist, MalformedListsGiveClearErrors) {
  expectError("n[1-", "never closed");
  expectError("n[1-3", "never closed");
  expectError("n[3-1]", "goes backwards");
  expectError("n[a-b]", "not N or LO-HI");
  expectError("", "no host names");
  expectError(" , ", "no host names");
  expectError("n[]", "empty brackets");
  expectError("n[1,]", "stray comma");
  expectError("n[,1]", "stray comma");
  expectError("n[-1]", "not N or LO-HI");
  expectError("n[1--2]", "not N or LO-HI");
  expectError("n[1-2-3]", "not N or LO-HI");
  expectError("n[[1]]", "nest");
  expectError("n]1", "without a matching '['");
  expectError("n[1-2]]", "without a matching '['");
  expectError("n1[2-3]4", "after the last ']'");
  expectError("n[1 - 2]", "whitespace inside brackets");
  expectError("n[0-65536]", "more than 65536");
  expectError("a[0-65535].b[0-65535]", "more than");
  expectError("n[1234567890123456789]", "not N or LO-HI");
}

TEST(Hostlist, CompressionMatchesScontrolShortForm) {
  EXPECT_EQ(compressHostlist({"n1", "n2", "n3", "n5", "m01"}), "n[1-3,5],m01");
  EXPECT_EQ(compressHostlist({"n3", "n1", "n2"}), "n[3,1-2]");
  EXPECT_EQ(compressHostlist({"n1", "n2", "n2", "n3"}), "n[1-2,2-3]");
  EXPECT_EQ(compressHostlist({"n9", "n10", "n11"}), "n[9-11]");
  EXPECT_EQ(compressHostlist({"n09", "n10"}), "n[09-10]");
  EXPECT_EQ(compressHostlist({"n007", "n8"}), "n[007,8]");
  EXPECT_EQ(compressHostlist({"n", "n1", "n2"}), "n,n[1-2]");
  EXPECT_EQ(compressHostlist({"a0.b2", "a0.b3", "a1.b2"}), "a0.b[2-3],a1.b2");
  EXPECT_EQ(compressHostlist({"x"}), "x");
  EXPECT_EQ(compressHostlist({"n5"}), "n5");
  EXPECT_EQ(compressHostlist({"1", "2", "3"}), "[1-3]");
  EXPECT_EQ(compressHostlist({}), "");
}

TEST(Hostlist, CompressionRoundTrips) {
  for (const char* list : {"linux[0000-1023]", "n[1-3,7],m[01-02],login", "a[0-3].b[5-6]", "n[9-12,100-101]"}) {
    Hosts h = expand(list);
    EXPECT_EQ(expand(compressHostlist(h)), h) << list;
  }
}

// ---- Property test against the real SLURM parser ----

/// Runs `scontrol show <what> LIST` with a throwaway config; returns its stdout lines.
class Scontrol {
 public:
  Scontrol() {
    char tmpl[] = "/tmp/taehv-hostlist-XXXXXX";
    if (!mkdtemp(tmpl)) return;
    dir_ = tmpl;
    std::ofstream(dir_ + "/slurm.conf") << "ClusterName=hostlisttest\nSlurmctldHost=localhost\n";
    available_ = system("command -v scontrol >/dev/null 2>&1") == 0;
  }
  ~Scontrol() {
    if (!dir_.empty()) {
      unlink((dir_ + "/slurm.conf").c_str());
      rmdir(dir_.c_str());
    }
  }
  bool available() const { return available_; }

  std::vector<std::string> run(const std::string& what, const std::string& list) const {
    std::string cmd = "SLURM_CONF='" + dir_ + "/slurm.conf' scontrol show " + what + " '" + list + "' 2>/dev/null";
    std::vector<std::string> lines;
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return lines;
    char* line = nullptr;
    size_t cap = 0;
    for (ssize_t n; (n = getline(&line, &cap, p)) > 0;) {
      std::string s(line, static_cast<std::size_t>(n));
      if (!s.empty() && s.back() == '\n') s.pop_back();
      lines.push_back(s);
    }
    free(line);
    pclose(p);
    return lines;
  }

 private:
  std::string dir_;
  bool available_ = false;
};

/// Seed of the property tests: fixed (reproducible), or TAEHV_PROPERTY_SEED to explore further.
unsigned propertySeed(unsigned fixed) {
  const char* env = getenv("TAEHV_PROPERTY_SEED");
  return env ? static_cast<unsigned>(std::strtoul(env, nullptr, 10)) : fixed;
}

std::string randomNumber(std::mt19937& rng, int max_digits, bool pad) {
  int digits = std::uniform_int_distribution<int>(1, max_digits)(rng);
  std::string s;
  for (int i = 0; i < digits; ++i) s.push_back(static_cast<char>('0' + rng() % 10));
  if (!pad) {
    s.erase(0, std::min(s.find_first_not_of('0'), s.size() - 1));
  }
  return s;
}

/// A random valid hostlist: tokens with 0..3 bracket groups, each with 1..3 ranges, padded or not,
/// prefixes with letters, digits, '-' and '.', separated by commas or spaces.
std::string randomHostlist(std::mt19937& rng) {
  static const std::string kChars = "abnxz-.0123456789";
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto text = [&](int min_len) {
    std::string t;
    for (int i = pick(min_len, 3); i > 0; --i) t.push_back(kChars[static_cast<std::size_t>(pick(0, 16))]);
    return t;
  };
  std::string list;
  for (int t = pick(1, 4); t > 0; --t) {
    if (!list.empty()) list += pick(0, 3) == 0 ? " " : ",";
    list += static_cast<char>('a' + pick(0, 25));
    list += text(0);
    int groups = pick(0, 3);
    for (int g = 0; g < groups; ++g) {
      list += '[';
      for (int r = pick(1, 3); r > 0; --r) {
        std::string lo = randomNumber(rng, 3, pick(0, 2) == 0);
        list += lo;
        if (pick(0, 1)) list += "-" + std::to_string(std::stoul(lo) + static_cast<unsigned>(pick(0, 12)));
        if (r > 1) list += ',';
      }
      list += ']';
      if (g + 1 < groups) list += text(0);  // the last group ends the token
    }
  }
  return list;
}

TEST(HostlistProperty, ExpansionMatchesScontrolOnRandomLists) {
  Scontrol scontrol;
  if (!scontrol.available()) GTEST_SKIP() << "scontrol (slurm-client) is not installed";
  std::mt19937 rng(propertySeed(20261122));
  int compared = 0;
  for (int i = 0; i < 250; ++i) {
    std::string list = randomHostlist(rng);
    HostlistResult ours = expandHostlist(list);
    ASSERT_TRUE(ours.ok()) << list << ": " << ours.error;
    std::vector<std::string> theirs = scontrol.run("hostnames", list);
    ASSERT_EQ(ours.value, theirs) << "hostlist '" << list << "'";
    ++compared;
  }
  EXPECT_EQ(compared, 250);
}

TEST(HostlistProperty, CompressionMatchesScontrolOnRandomHostSequences) {
  Scontrol scontrol;
  if (!scontrol.available()) GTEST_SKIP() << "scontrol (slurm-client) is not installed";
  std::mt19937 rng(propertySeed(7));
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  static const char* kPrefixes[] = {"n", "gpu", "r1-n", "a0.b", "", "login"};
  for (int i = 0; i < 200; ++i) {
    Hosts hosts;
    int count = pick(1, 12);
    int base = pick(0, 120);
    for (int k = 0; k < count; ++k) {
      std::string prefix = kPrefixes[pick(0, 5)];
      if (prefix == "login") {
        hosts.push_back(prefix);
        continue;
      }
      if (prefix.empty() && pick(0, 1)) prefix = "n";
      // Mostly consecutive numbers (so ranges form), sometimes padded, sometimes a jump.
      base += pick(0, 4) == 0 ? pick(2, 30) : 1;
      int width = pick(0, 3) == 0 ? pick(2, 4) : 0;
      std::string num = std::to_string(base);
      if (static_cast<int>(num.size()) < width) num.insert(0, static_cast<std::size_t>(width) - num.size(), '0');
      hosts.push_back(prefix + num);
    }
    std::string joined;
    for (const std::string& h : hosts) joined += (joined.empty() ? "" : ",") + h;
    std::vector<std::string> theirs = scontrol.run("hostlist", joined);
    ASSERT_EQ(theirs.size(), 1u) << joined;
    EXPECT_EQ(compressHostlist(hosts), theirs[0]) << "hosts " << joined;
    EXPECT_EQ(expandHostlist(compressHostlist(hosts)).value, hosts) << "round trip of " << joined;
  }
}

}  // namespace
}  // namespace taehv::slurm
