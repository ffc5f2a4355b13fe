// Framing of the node group's messages (core/group/PROTOCOL.md, "Framing").
#include "taehv/group/wire.h"

#include <gtest/gtest.h>

#include <string>

namespace taehv::group {
namespace {

TEST(GroupWire, BodyRoundTrips) {
  Message m{MessageType::kStop, 7, 123456789012345ULL, std::string(kNonceBytes, '\x01'), "node 7 lost"};
  auto back = decodeBody(encodeBody(m));
  ASSERT_TRUE(back.ok()) << back.error;
  EXPECT_EQ(back.value.type, MessageType::kStop);
  EXPECT_EQ(back.value.rank, 7u);
  EXPECT_EQ(back.value.counter, 123456789012345ULL);
  EXPECT_EQ(back.value.nonce, m.nonce);
  EXPECT_EQ(back.value.text, "node 7 lost");
}

TEST(GroupWire, JoinAndFormedCarryTheProcessCounts) {
  Message join{MessageType::kJoin, 1, 0, std::string(kNonceBytes, '\x02'), "host-b"};
  join.procs = 3;
  Message formed{MessageType::kFormed, 0, 5, {}, {}};
  formed.procs = 4000000000u;  // the world size: all 32 bits travel
  formed.first_rank = 70000;
  formed.nnodes = 3;       // v3: the formation's node count, the member's node rank in it, the formation's number
  formed.node_rank = 2;
  formed.round = 4000000001u;
  auto j = decodeBody(encodeBody(join));
  ASSERT_TRUE(j.ok()) << j.error;
  EXPECT_EQ(j.value.procs, 3u);
  EXPECT_EQ(j.value.first_rank, 0u);
  EXPECT_EQ(j.value.text, "host-b");
  auto f = decodeBody(encodeBody(formed));
  ASSERT_TRUE(f.ok()) << f.error;
  EXPECT_EQ(f.value.procs, 4000000000u);
  EXPECT_EQ(f.value.first_rank, 70000u);
  EXPECT_EQ(f.value.nnodes, 3u);
  EXPECT_EQ(f.value.node_rank, 2u);
  EXPECT_EQ(f.value.round, 4000000001u);
  EXPECT_EQ(j.value.round, 0u);
  // An older body is refused by its version, not misread.
  for (char old : {'\x01', '\x02'}) {
    std::string v = encodeBody(join);
    v[0] = old;
    const std::string error = decodeBody(v).error;
    EXPECT_NE(error.find("unknown protocol version " + std::to_string(static_cast<int>(old))), std::string::npos)
        << error;
  }
}

// Issue 35: a member without a node rank joins with kArrivalRank; the FORMED it gets carries the rank node 0 gave it.
TEST(GroupWire, AJoinWithoutANodeRankAndItsFormedRoundTrip) {
  Message join{MessageType::kJoin, kArrivalRank, 0, std::string(kNonceBytes, '\x03'), "host-c"};
  join.procs = 2;
  auto j = decodeBody(encodeBody(join));
  ASSERT_TRUE(j.ok()) << j.error;
  EXPECT_EQ(j.value.rank, 0xffffffffu);
  EXPECT_EQ(j.value.procs, 2u);
  Message formed{MessageType::kFormed, 0, 1, {}, {}};
  formed.node_rank = 2;
  formed.nnodes = 3;
  auto f = decodeBody(encodeBody(formed));
  ASSERT_TRUE(f.ok()) << f.error;
  EXPECT_EQ(f.value.node_rank, 2u);
  EXPECT_EQ(f.value.nnodes, 3u);
}

TEST(GroupWire, TextIsCutToTheLimit) {
  Message m{MessageType::kStop, 1, 1, {}, std::string(kMaxTextBytes + 100, 'x')};
  auto back = decodeBody(encodeBody(m));
  ASSERT_TRUE(back.ok()) << back.error;
  EXPECT_EQ(back.value.text.size(), kMaxTextBytes);
}

TEST(GroupWire, MalformedBodiesAreRefusedWithAReason) {
  EXPECT_NE(decodeBody("").error.find("too short"), std::string::npos);
  std::string body = encodeBody(Message{MessageType::kHeartbeat, 1, 1, {}, {}});
  std::string wrong_version = body;
  wrong_version[0] = 9;
  EXPECT_NE(decodeBody(wrong_version).error.find("version"), std::string::npos);
  std::string wrong_type = body;
  wrong_type[1] = 99;
  EXPECT_NE(decodeBody(wrong_type).error.find("type"), std::string::npos);
  wrong_type[1] = 9;  // one past the last type, REFUSED (8)
  EXPECT_NE(decodeBody(wrong_type).error.find("unknown message type 9"), std::string::npos);
  Message refused{MessageType::kRefused, 0, 0, {}, "why"};
  refused.procs = 1;
  const Checked<Message> back = decodeBody(encodeBody(refused));
  ASSERT_TRUE(back.ok()) << back.error;
  EXPECT_EQ(back.value.type, MessageType::kRefused);
  EXPECT_EQ(back.value.procs, 1u);
  EXPECT_FALSE(decodeBody(body + "x").ok());  // trailing byte: lengths do not add up
  EXPECT_FALSE(decodeBody(body.substr(0, body.size() - 1)).ok());
}

TEST(GroupWire, ReaderCutsAStreamFedByteByByte) {
  const std::string mac(kMacBytes, 'm');
  const std::string a = encodeFrame(encodeBody(Message{MessageType::kHeartbeat, 1, 1, {}, {}}), mac);
  const std::string b = encodeFrame(encodeBody(Message{MessageType::kStop, 2, 2, {}, "why"}), mac);
  const std::string stream = a + b;
  FrameReader reader;
  std::vector<std::string> frames;
  for (char c : stream) {
    reader.feed(&c, 1);
    while (true) {
      auto frame = reader.next();
      ASSERT_TRUE(frame.ok()) << frame.error;
      if (!frame.value) break;
      frames.push_back(*frame.value);
    }
  }
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0], a.substr(4));
  EXPECT_EQ(frames[1], b.substr(4));
  EXPECT_FALSE(reader.next().value);  // nothing left over
}

TEST(GroupWire, ReaderRefusesLengthsOutOfRange) {
  for (const std::string& header : {std::string("\x00\x00\x00\x00", 4), std::string("\x00\x00\x00\x10", 4),
                                    std::string("\x7f\xff\xff\xff", 4), std::string("\x00\x00\x10\x01", 4)}) {
    FrameReader reader;
    reader.feed(header.data(), header.size());
    EXPECT_NE(reader.next().error.find("out of range"), std::string::npos);
  }
}

}  // namespace
}  // namespace taehv::group
