#include "line_buffer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace taehv::process {
namespace {

std::vector<std::string> feedAll(LineBuffer& b, const std::vector<std::string>& chunks, bool flush) {
  std::vector<std::string> lines;
  auto on = [&](std::string_view l) { lines.emplace_back(l); };
  for (const std::string& c : chunks) b.feed(c, on);
  if (flush) b.flush(on);
  return lines;
}

TEST(LineBuffer, JoinsLinesSplitAcrossReads) {
  LineBuffer b;
  EXPECT_EQ(feedAll(b, {"ab", "c\nde", "f\n\ng"}, false), (std::vector<std::string>{"abc", "def", ""}));
  EXPECT_EQ(feedAll(b, {}, true), (std::vector<std::string>{"g"}));
  EXPECT_EQ(feedAll(b, {}, true), (std::vector<std::string>{}));  // the flush emptied it
}

TEST(LineBuffer, FlushWithoutPendingGivesNothing) {
  LineBuffer b;
  EXPECT_EQ(feedAll(b, {"x\n"}, true), (std::vector<std::string>{"x"}));
}

TEST(LineBuffer, CutsOverlongLinesIntoPiecesOfTheCap) {
  LineBuffer b(4);
  EXPECT_EQ(feedAll(b, {"abcdefghij\nxy", "zuvw\n"}, true),
            (std::vector<std::string>{"abcd", "efgh", "ij", "xyzu", "vw"}));
}

}  // namespace
}  // namespace taehv::process
