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

TEST(ParseDouble, TakesFiniteDecimalNumbersOnly) {
  EXPECT_EQ(parseDouble("2"), 2.0);
  EXPECT_EQ(parseDouble("-0.5"), -0.5);
  EXPECT_EQ(parseDouble("+7.5"), 7.5);
  EXPECT_EQ(parseDouble("1e-3"), 1e-3);
  EXPECT_EQ(parseDouble("0.0003"), 0.0003);  // what formatLr prints reads back exactly
  for (const char* bad : {"", "+", "-", "++1", "+-1", "-+1", " 1", "1 ", "1x", ".", "0x10", "inf", "-inf", "nan",
                          "1e999", "1,5"}) {
    EXPECT_FALSE(parseDouble(bad)) << bad;
  }
}

// SLURM's compressed per-node counts, as every message and `describe` writes them (the inverse of the SLURM plugin's
// expandTasksPerNode).
TEST(FormatCounts, WritesRunsOfEqualCountsAsNxK) {
  EXPECT_EQ(formatCounts({2, 2, 2, 1}), "2(x3),1");
  EXPECT_EQ(formatCounts({1, 1, 8, 2}), "1(x2),8,2");
  EXPECT_EQ(formatCounts({}), "");
}

}  // namespace
}  // namespace taehv
