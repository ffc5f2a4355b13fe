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

}  // namespace
}  // namespace taehv
