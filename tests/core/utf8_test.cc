// taehv/utf8.h: the one UTF-8 check of every text printed as JSON or YAML, against every code point, the ill-formed
// forms Unicode names (overlong, surrogates, beyond U+10FFFF, cut short) and random bytes. Part of the hostile suite.
#include "taehv/utf8.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>

namespace taehv {
namespace {

const std::string kReplacement = "\xEF\xBF\xBD";

/// The UTF-8 encoding of `cp` in `bytes` bytes (1..4), overlong when `bytes` is more than needed.
std::string encode(std::uint32_t cp, int bytes) {
  std::string out;
  if (bytes == 1) return std::string(1, static_cast<char>(cp));
  static const unsigned char kLead[] = {0, 0, 0xC0, 0xE0, 0xF0};
  out.push_back(static_cast<char>(kLead[bytes] | (cp >> (6 * (bytes - 1)))));
  for (int i = bytes - 2; i >= 0; --i) out.push_back(static_cast<char>(0x80 | ((cp >> (6 * i)) & 0x3F)));
  return out;
}

int shortestLength(std::uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

TEST(HostileUtf8, EveryScalarValueIsValidInItsShortestFormOnly) {
  for (std::uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    const bool surrogate = cp >= 0xD800 && cp <= 0xDFFF;
    const int shortest = shortestLength(cp);
    ASSERT_EQ(isValidUtf8(encode(cp, shortest)), !surrogate) << std::hex << cp;
    for (int longer = std::max(shortest + 1, 2); longer <= 4; ++longer) {
      ASSERT_FALSE(isValidUtf8(encode(cp, longer))) << "overlong " << std::hex << cp << " in " << longer;
    }
  }
  EXPECT_FALSE(isValidUtf8("\xF4\x90\x80\x80"));  // U+110000
  EXPECT_FALSE(isValidUtf8("\xF5\x80\x80\x80"));
  EXPECT_FALSE(isValidUtf8("\xFF"));
  EXPECT_TRUE(isValidUtf8(""));
  EXPECT_TRUE(isValidUtf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9D\x84\x9E"));
}

TEST(HostileUtf8, TheFirstBadByteIsFound) {
  EXPECT_EQ(invalidUtf8At("plain"), std::string_view::npos);
  EXPECT_EQ(invalidUtf8At("ab\xE9" "c"), 2u);                 // Latin-1 e-acute
  EXPECT_EQ(invalidUtf8At("\xC3\xA9\xE2\x82"), 2u);            // cut short at the end
  EXPECT_EQ(invalidUtf8At(std::string("a\0\x80", 3)), 2u);     // NUL is valid UTF-8, a lone continuation is not
}

// Unicode 15, section 3.9, table 3-8: one U+FFFD per maximal subpart of an ill-formed sequence.
TEST(HostileUtf8, ReplacementFollowsUnicodesBestPractice) {
  std::size_t replaced = 0;
  EXPECT_EQ(toValidUtf8("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", &replaced),
            "a" + kReplacement + kReplacement + kReplacement + "b" + kReplacement + "c" + kReplacement + kReplacement +
                "d");
  EXPECT_EQ(replaced, 6u);
  EXPECT_EQ(toValidUtf8("\xC0\xAF"), kReplacement + kReplacement);                      // C0 is never a lead byte
  EXPECT_EQ(toValidUtf8("\xED\xA0\x80"), kReplacement + kReplacement + kReplacement);  // a surrogate
  EXPECT_EQ(toValidUtf8("\xF0\x9F\x98"), kReplacement);                                // an emoji cut short
  EXPECT_EQ(toValidUtf8("caf\xC3\xA9"), "caf\xC3\xA9");
}

TEST(HostileUtf8, RandomBytesAlwaysComeOutValidAndValidTextUnchanged) {
  std::mt19937 rng(38);
  std::uniform_int_distribution<int> byte(0, 255), length(0, 64);
  for (int i = 0; i < 20000; ++i) {
    std::string text(static_cast<std::size_t>(length(rng)), '\0');
    for (char& c : text) c = static_cast<char>(byte(rng));
    std::size_t replaced = 0;
    const std::string valid = toValidUtf8(text, &replaced);
    ASSERT_TRUE(isValidUtf8(valid));
    ASSERT_EQ(replaced == 0, isValidUtf8(text));
    ASSERT_EQ(toValidUtf8(valid), valid);
    ASSERT_TRUE(isValidUtf8(showInvalidUtf8(text)));
  }
}

TEST(HostileUtf8, ARefusalShowsTheByteAndWhereItIs) {
  EXPECT_TRUE(requireUtf8("node-0", "master address", "give a host name").ok());
  EXPECT_EQ(requireUtf8("h\xE9" "st", "master address (from flag --master-addr)", "give a host name").error,
            "master address (from flag --master-addr) 'h\\xE9st' is not valid UTF-8 (byte 0xE9 at offset 1); give a "
            "host name");
}

// nlohmann's dump() throws type_error 316 on such text (what aborted describe --json); dumpValidUtf8 never does.
TEST(HostileUtf8, JsonIsDumpedValidAndTheFirstReplacementIsNamed) {
  nlohmann::ordered_json doc = nlohmann::ordered_json::array();
  doc.push_back({{"run_id", "ok"}, {"notes", {"fine", "bad \xE9 byte"}}, {"k\xFF/y", "v"}});
  EXPECT_THROW(doc.dump(), nlohmann::json::type_error);
  Utf8Repair repair;
  const std::string text = dumpValidUtf8(doc, 2, &repair);
  EXPECT_EQ(repair.replaced, 2u);
  EXPECT_EQ(repair.first_at, "/0/notes/1");
  const auto back = nlohmann::ordered_json::parse(text);
  EXPECT_EQ(back[0]["notes"][1], "bad " + kReplacement + " byte");
  EXPECT_EQ(back[0]["k" + kReplacement + "/y"], "v");
  EXPECT_EQ(back[0].begin().key(), "run_id") << "the order of the keys is kept";
  EXPECT_NE(repair.sentence("describe --json").find("2 byte sequences that are not valid UTF-8 written as U+FFFD "
                                                    "(the first at /0/notes/1)"),
            std::string::npos);
  Utf8Repair none;
  EXPECT_EQ(dumpValidUtf8(nlohmann::json{{"a", "b"}}, -1, &none), R"({"a":"b"})");
  EXPECT_FALSE(none.any());
}

}  // namespace
}  // namespace taehv
