// taehv/parse.h: the one set of number and duration parsers of taehv-run and its plugins.
#include "taehv/parse.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace taehv {
namespace {

TEST(ParseCount, TakesDigitsOnlyWithinTheRange) {
  EXPECT_EQ(parseCount("0"), 0);
  EXPECT_EQ(parseCount("12"), 12);
  EXPECT_EQ(parseCount("2147483647"), 2147483647);
  EXPECT_FALSE(parseCount("2147483648"));  // above int
  EXPECT_FALSE(parseCount("99999999999999999999999"));
  for (const char* bad : {"", "+1", "-1", " 1", "1 ", "1x", "0x10", "1.5"}) EXPECT_FALSE(parseCount(bad)) << bad;
  EXPECT_EQ(parseCount("8", 1, 8), 8);
  EXPECT_FALSE(parseCount("9", 1, 8));
  EXPECT_FALSE(parseCount("0", 1, 8));
  EXPECT_EQ(parseCount<long long>("9223372036854775807", 0LL, LLONG_MAX), LLONG_MAX);
  EXPECT_FALSE(parseCount<long long>("9223372036854775808", 0LL, LLONG_MAX));
}

TEST(ParseInt, TakesASignAndTheWholeIntRange) {
  EXPECT_EQ(parseInt("-3"), -3);
  EXPECT_EQ(parseInt("+3"), 3);
  EXPECT_EQ(parseInt("-2147483648"), INT_MIN);
  EXPECT_FALSE(parseInt("-2147483649"));
  EXPECT_FALSE(parseInt("2147483648"));
  for (const char* bad : {"", "-", "+", "--1", " 1", "1x"}) EXPECT_FALSE(parseInt(bad)) << bad;
  EXPECT_FALSE(parseInt("-1", 0, 10));
  EXPECT_EQ(parseInt("10", 0, 10), 10);
}

TEST(ParsePort, IsOneTo65535) {
  EXPECT_EQ(parsePort("29500"), 29500);
  EXPECT_EQ(parsePort("1"), 1);
  EXPECT_EQ(parsePort("65535"), 65535);
  EXPECT_FALSE(parsePort("0"));
  EXPECT_FALSE(parsePort("65536"));
  EXPECT_FALSE(parsePort("http"));
}

TEST(ParseSeconds, IsWholeSecondsWithinTheRange) {
  EXPECT_EQ(parseSeconds("15"), std::chrono::seconds(15));
  EXPECT_FALSE(parseSeconds("0"));  // default minimum 1
  EXPECT_EQ(parseSeconds("0", 0), std::chrono::seconds(0));
  EXPECT_FALSE(parseSeconds("100000", 1, 99999));
  EXPECT_FALSE(parseSeconds("1.5"));
  EXPECT_FALSE(parseSeconds("10s"));
}

TEST(ParseHex, TakesHexDigitsOnlyWithinTheRange) {
  EXPECT_EQ(parseHex("FF"), 255u);
  EXPECT_EQ(parseHex("0100A8C0"), 0x0100A8C0u);  // /proc/net/route's 192.168.0.1 on a little-endian host
  EXPECT_EQ(parseHex("ffffffff"), 0xffffffffu);
  EXPECT_EQ(parseHex<std::uint8_t>("ff"), 255u);
  EXPECT_FALSE(parseHex<std::uint8_t>("100"));  // above the type
  EXPECT_FALSE(parseHex<unsigned>("1F", 30u));  // above max
  for (const char* bad : {"", "0x10", "-1", "+1", " 1", "1 ", "g", "1.5"}) EXPECT_FALSE(parseHex(bad)) << bad;
}

// SLURM's compressed per-node counts, as every message and `describe` writes them (the inverse of the SLURM plugin's
// expandTasksPerNode).
TEST(FormatCounts, WritesRunsOfEqualCountsAsNxK) {
  EXPECT_EQ(formatCounts({2, 2, 2, 1}), "2(x3),1");
  EXPECT_EQ(formatCounts({1, 1, 8, 2}), "1(x2),8,2");
  EXPECT_EQ(formatCounts({}), "");
}

// ---- parseInteger and parseNumber (signed integers and real numbers: options, config values, variables) ----

TEST(ParseInteger, TakesASignAndTheWholeRangeOfTheType) {
  EXPECT_EQ(parseInteger<int64_t>("-3"), -3);
  EXPECT_EQ(parseInteger<int64_t>("+3"), 3);
  EXPECT_EQ(parseInteger<int64_t>("0"), 0);
  EXPECT_EQ(parseInteger<int64_t>("-0"), 0);
  EXPECT_EQ(parseInteger<int64_t>("9223372036854775807"), INT64_MAX);
  EXPECT_EQ(parseInteger<int64_t>("-9223372036854775808"), INT64_MIN);
  EXPECT_FALSE(parseInteger<int64_t>("9223372036854775808"));
  EXPECT_FALSE(parseInteger<int64_t>("-9223372036854775809"));
  EXPECT_EQ(parseInteger<int>("-2147483648"), INT_MIN);
  EXPECT_FALSE(parseInteger<int>("2147483648"));
  for (const char* bad : {"", "-", "+", "--1", " 1", "1 ", "1x", "1.0", "1e3", "0x10"}) {
    EXPECT_FALSE(parseInteger<int64_t>(bad)) << bad;
  }
  EXPECT_EQ(parseInteger<int64_t>("1000000", 1, 1000000), 1000000);
  EXPECT_FALSE(parseInteger<int64_t>("0", 1, 1000000));
  EXPECT_FALSE(parseInteger<int64_t>("1000001", 1, 1000000));
}

TEST(ParseNumber, TakesDecimalNumbersAsWrittenInConfigs) {
  EXPECT_EQ(parseNumber("0.5"), 0.5);
  EXPECT_EQ(parseNumber("-3"), -3.0);
  EXPECT_EQ(parseNumber("+2"), 2.0);
  EXPECT_EQ(parseNumber(".5"), 0.5);
  EXPECT_EQ(parseNumber("1e-4"), 1e-4);
  EXPECT_EQ(parseNumber("3E+2"), 300.0);
  EXPECT_EQ(parseNumber("7200"), 7200.0);
  EXPECT_EQ(parseNumber("0.0003"), 0.0003);  // what sizing's formatLr prints reads back exactly
  for (const char* bad : {"", " 1", "1 ", "1x", "inf", "-inf", "nan", "NaN", "0x10", "1e999", "1e", "e5", "--1", "+-1",
                          "1,5", "."}) {
    EXPECT_FALSE(parseNumber(bad)) << bad;
  }
  EXPECT_EQ(parseNumber("1", 0, 1), 1.0);
  EXPECT_FALSE(parseNumber("1.5", 0, 1));
  EXPECT_FALSE(parseNumber("-0.1", 0, 1));
}

// The one HOST[:PORT] splitter (--rdzv-endpoint, each etcd endpoint): IPv6 in brackets, the port optional, each
// kind of mistake its own line naming the flag, the text and the form.
TEST(ParseHostPort, SplitsHostAndPortAndSaysWhatIsWrong) {
  auto split = [](std::string_view text, int min_port = 1) {
    return parseHostPort(text, "--rdzv-endpoint entry", "10.0.0.1:2379", min_port);
  };
  const auto v4 = split("10.0.0.1:2379");
  ASSERT_TRUE(v4.ok()) << v4.error;
  EXPECT_EQ(v4.value.host, "10.0.0.1");
  EXPECT_EQ(v4.value.port, 2379);
  const auto v6 = split("[::1]:2379");
  ASSERT_TRUE(v6.ok()) << v6.error;
  EXPECT_EQ(v6.value.host, "::1");
  EXPECT_EQ(v6.value.port, 2379);
  const auto name = split("etcd-a");  // no port: the caller's default
  ASSERT_TRUE(name.ok()) << name.error;
  EXPECT_EQ(name.value.host, "etcd-a");
  EXPECT_FALSE(name.value.port.has_value());
  const auto bare6 = split("[fd00::1]");
  ASSERT_TRUE(bare6.ok()) << bare6.error;
  EXPECT_EQ(bare6.value.host, "fd00::1");
  EXPECT_FALSE(bare6.value.port.has_value());
  EXPECT_EQ(split("n0:65535").value.port, 65535);
  EXPECT_EQ(split("n0:0", 0).value.port, 0);  // torchrun's c10d: 0 asks for a free port

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "'': no host name"},
      {":2379", "':2379': no host name"},
      {"[]:2379", "'[]:2379': no host name"},
      {"n0:0", "'n0:0': port 0 is not 1..65535"},
      {"n0:65536", "'n0:65536': port 65536 is not 1..65535"},
      {"n0:99999999999999999999", "port 99999999999999999999 is not 1..65535"},
      {"n0:x1", "'n0:x1': the port 'x1' is not a number 1..65535"},
      {"n0:-1", "the port '-1' is not a number"},
      {"n0: 1", "the port ' 1' is not a number"},
      {"n0:", "'n0:': empty port after ':'"},
      {"[::1]:", "empty port after ':'"},
      {"fd00::1:2379", "'fd00::1:2379': an IPv6 address needs brackets"},
      {"[fd00::1:2379", "no ']' after the IPv6 address"},
      {"[fd00::1]2379", "expected ':PORT' after ']'"},
      {"http://n0:2379", "a URL; give no scheme"},
      {"n0/v3:2379", "'n0/v3' is not a host name or address"},
      {"user@n0:2379", "is not a host name or address"},
  };
  for (const auto& [text, says] : bad) {
    const auto r = split(text);
    EXPECT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.error.rfind("--rdzv-endpoint entry '", 0), 0u) << r.error;
    EXPECT_NE(r.error.find(says), std::string::npos) << text << ": " << r.error;
    EXPECT_NE(r.error.find("give HOST:PORT (an IPv6 address as [ADDR]:PORT), e.g. 10.0.0.1:2379"), std::string::npos)
        << r.error;
    EXPECT_EQ(r.error.find('\n'), std::string::npos) << r.error;
  }
}

}  // namespace
}  // namespace taehv
