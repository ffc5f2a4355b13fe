// HMAC, handshake and replay window of the node group (core/group/PROTOCOL.md, "Authentication").
#include "taehv/group/session.h"

#include <gtest/gtest.h>

#include "taehv/group/attempt_log.h"

#include <random>

namespace taehv::group {
namespace {

/// The payload (body + mac) of a frame, as FrameReader hands it on.
std::string payloadOf(const std::string& frame) { return frame.substr(4); }

struct Pair {
  Session leader{jobKey("secret-token-0123456789", "run"), Direction::kToMember};
  Session member{jobKey("secret-token-0123456789", "run"), Direction::kToLeader};

  /// Runs the handshake; the JOIN and WELCOME frames are kept for replay tests.
  void handshake() {
    Message challenge{MessageType::kChallenge, 0, 0, leader.makeServerNonce(), {}};
    Opened c = member.open(payloadOf(leader.seal(challenge)));
    ASSERT_EQ(c.verdict, Verdict::kOk);
    member.setServerNonce(c.message.nonce);
    join = member.seal(Message{MessageType::kJoin, 2, 0, member.makeClientNonce(), "h3"});
    Opened j = leader.open(payloadOf(join));
    ASSERT_EQ(j.verdict, Verdict::kOk);
    leader.setClientNonce(j.message.nonce);
    welcome = leader.seal(Message{MessageType::kWelcome, 0, 0, {}, "h1"});
    leader.establish();
    ASSERT_EQ(member.open(payloadOf(welcome)).verdict, Verdict::kOk);
    member.establish();
  }
  std::string join;
  std::string welcome;
};

TEST(GroupSession, HmacMatchesRfc4231Case2) {
  // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
  const std::string mac = hmacSha256("Jefe", "what do ya want for nothing?");
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : mac) {
    hex.push_back(kHex[c >> 4]);
    hex.push_back(kHex[c & 15]);
  }
  EXPECT_EQ(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(GroupSession, HandshakeThenMessagesBothWays) {
  Pair p;
  p.handshake();
  for (int i = 0; i < 3; ++i) {
    Opened a = p.leader.open(payloadOf(p.member.seal(Message{MessageType::kHeartbeat, 2, 0, {}, {}})));
    EXPECT_EQ(a.verdict, Verdict::kOk);
    EXPECT_EQ(a.message.counter, static_cast<std::uint64_t>(i + 1));
    EXPECT_EQ(p.member.open(payloadOf(p.leader.seal(Message{MessageType::kStop, 0, 0, {}, "x"}))).verdict, Verdict::kOk);
  }
}

TEST(GroupSession, WrongTokenIsABadMac) {
  Session leader{jobKey("secret-token-0123456789", "run"), Direction::kToMember};
  Session stranger{jobKey("guessed-token-000000000", "run"), Direction::kToLeader};
  stranger.setServerNonce(leader.makeServerNonce());
  EXPECT_EQ(leader.open(payloadOf(stranger.seal(Message{MessageType::kJoin, 1, 0, stranger.makeClientNonce(), "x"})))
                .verdict,
            Verdict::kBadMac);
}

TEST(GroupSession, SameTokenOtherRunIdDoesNotVerify) {
  Session leader{jobKey("secret-token-0123456789", "run-a"), Direction::kToMember};
  Session member{jobKey("secret-token-0123456789", "run-b"), Direction::kToLeader};
  member.setServerNonce(leader.makeServerNonce());
  EXPECT_EQ(leader.open(payloadOf(member.seal(Message{MessageType::kJoin, 1, 0, member.makeClientNonce(), "x"}))).verdict,
            Verdict::kBadMac);
}

// Issue 38, defect 21: the leader's REFUSED (why a JOIN is not admitted) is bound to that JOIN's nonces, like
// WELCOME: the member it answers verifies it; a REFUSED sealed for another connection, or by a guessed key, does not.
TEST(GroupSession, RefusedIsBoundToTheJoinItAnswers) {
  const auto refusal = [](Session& leader, const std::string& nc) {
    leader.setClientNonce(nc);
    Message m{MessageType::kRefused, 0, 0, {}, "node rank 1 is already in the group"};
    return payloadOf(leader.seal(m));
  };
  Session leader{jobKey("secret-token-0123456789", "run"), Direction::kToMember};
  Session member{jobKey("secret-token-0123456789", "run"), Direction::kToLeader};
  member.setServerNonce(leader.makeServerNonce());
  const std::string nc = member.makeClientNonce();
  const Opened ok = member.open(refusal(leader, nc));
  ASSERT_EQ(ok.verdict, Verdict::kOk);
  EXPECT_EQ(ok.message.type, MessageType::kRefused);
  EXPECT_EQ(ok.message.text, "node rank 1 is already in the group");
  EXPECT_EQ(member.open(refusal(leader, std::string(kNonceBytes, 'o'))).verdict, Verdict::kBadMac) << "another JOIN's";
  Session guesser{jobKey("guessed-token-000000000", "run"), Direction::kToMember};
  guesser.setServerNonce(std::string(kNonceBytes, 's'));
  member.setServerNonce(std::string(kNonceBytes, 's'));
  EXPECT_EQ(member.open(refusal(guesser, nc)).verdict, Verdict::kBadMac) << "a guessed key's";
}

TEST(GroupSession, JoinReplayedOnAnotherConnectionIsRefused) {
  Pair first;
  first.handshake();
  Session second_leader{jobKey("secret-token-0123456789", "run"), Direction::kToMember};
  second_leader.makeServerNonce();  // a new connection, a new Ns
  EXPECT_EQ(second_leader.open(payloadOf(first.join)).verdict, Verdict::kBadMac);
}

TEST(GroupSession, ReplayWithinTheSessionIsRefusedAndChangesNothing) {
  Pair p;
  p.handshake();
  const std::string stop = p.member.seal(Message{MessageType::kStop, 2, 0, {}, "real"});
  EXPECT_EQ(p.leader.open(payloadOf(stop)).verdict, Verdict::kOk);
  EXPECT_EQ(p.leader.open(payloadOf(stop)).verdict, Verdict::kReplay);
  // The replay did not move the window: the member's next message is still accepted.
  EXPECT_EQ(p.leader.open(payloadOf(p.member.seal(Message{MessageType::kHeartbeat, 2, 0, {}, {}}))).verdict,
            Verdict::kOk);
}

TEST(GroupSession, ReorderedOrDroppedMessagesAreRefused) {
  Pair p;
  p.handshake();
  const std::string one = p.member.seal(Message{MessageType::kHeartbeat, 2, 0, {}, {}});
  const std::string two = p.member.seal(Message{MessageType::kHeartbeat, 2, 0, {}, {}});
  EXPECT_EQ(p.leader.open(payloadOf(two)).verdict, Verdict::kReplay);
  EXPECT_EQ(p.leader.open(payloadOf(one)).verdict, Verdict::kOk);
  EXPECT_EQ(p.leader.open(payloadOf(two)).verdict, Verdict::kOk);
}

TEST(GroupSession, ReflectedMessageDoesNotVerify) {
  Pair p;
  p.handshake();
  // The leader's own STOP sent back to it: the direction byte differs, so the MAC does not verify.
  const std::string stop = p.leader.seal(Message{MessageType::kStop, 0, 0, {}, "x"});
  EXPECT_EQ(p.leader.open(payloadOf(stop)).verdict, Verdict::kBadMac);
}

TEST(GroupSession, FlippedBitAnywhereIsRefused) {
  Pair p;
  p.handshake();
  const std::string frame = p.member.seal(Message{MessageType::kStop, 2, 0, {}, "reason"});
  const std::string payload = payloadOf(frame);
  for (std::size_t i = 0; i < payload.size(); ++i) {
    std::string bad = payload;
    bad[i] = static_cast<char>(bad[i] ^ 0x01);
    EXPECT_NE(p.leader.open(bad).verdict, Verdict::kOk) << "byte " << i;
  }
  EXPECT_EQ(p.leader.open(payload).verdict, Verdict::kOk);
}

TEST(GroupSession, NoSecretOnTheWire) {
  const std::string token = "secret-token-0123456789";
  Session member{jobKey(token, "run"), Direction::kToLeader};
  member.setServerNonce(std::string(kNonceBytes, 'n'));
  const std::string frame = member.seal(Message{MessageType::kJoin, 1, 0, member.makeClientNonce(), "host"});
  EXPECT_EQ(frame.find(token), std::string::npos);
  EXPECT_EQ(frame.find(jobKey(token, "run")), std::string::npos);
}

TEST(GroupSession, HostileRandomInputNeverVerifiesNorCrashes) {
  // A deterministic fuzz run: random streams through the frame reader, random payloads and mutated real frames
  // through open(). Nothing may verify, and a session that saw them still works.
  Pair p;
  p.handshake();
  std::mt19937 rng(13);
  auto bytes = [&](std::size_t n) {
    std::string out(n, '\0');
    for (char& c : out) c = static_cast<char>(rng() & 0xff);
    return out;
  };
  const std::string real = payloadOf(p.member.seal(Message{MessageType::kStop, 2, 0, {}, "real stop"}));
  int frames = 0;
  for (int i = 0; i < 20000; ++i) {
    FrameReader reader;
    std::string stream = bytes(rng() % 600);
    if (i % 2 == 1) {  // half of them start with a plausible length, so that whole frames of garbage come out
      const std::uint32_t len = static_cast<std::uint32_t>(kMacBytes + 1 + rng() % 500);
      stream = std::string{static_cast<char>(len >> 24), static_cast<char>(len >> 16), static_cast<char>(len >> 8),
                           static_cast<char>(len)} + bytes(len) + stream;
    }
    reader.feed(stream.data(), stream.size());
    for (auto frame = reader.next(); frame.ok() && frame.value; frame = reader.next()) {
      ++frames;
      EXPECT_NE(p.leader.open(*frame.value).verdict, Verdict::kOk);
    }
    std::string mutated = real;
    for (int k = 0, flips = 1 + static_cast<int>(rng() % 4); k < flips; ++k) {
      mutated[rng() % mutated.size()] = static_cast<char>(rng() & 0xff);
    }
    if (mutated != real) {
      EXPECT_NE(p.leader.open(mutated).verdict, Verdict::kOk);
    }
    EXPECT_NE(p.leader.open(bytes(rng() % 200)).verdict, Verdict::kOk);
  }
  EXPECT_GT(frames, 0) << "the random streams never formed a frame: the reader's kFrame path was not exercised";
  EXPECT_EQ(p.leader.open(real).verdict, Verdict::kOk);  // the session was not disturbed
}

TEST(GroupAttemptLog, FirstOfEachKindThenRateLimitedWithCount) {
  std::vector<std::string> lines;
  AttemptLog log([&](const std::string& l) { lines.push_back(l); }, std::chrono::seconds(10));
  const auto t0 = AttemptLog::Clock::now();
  for (int i = 0; i < 1000; ++i) log.note(Attempt::kGarbage, "10.0.0.9:1234", "", t0 + std::chrono::milliseconds(i));
  log.note(Attempt::kBadMac, "10.0.0.9:1235", "", t0);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("10.0.0.9:1234"), std::string::npos);
  EXPECT_NE(lines[0].find("garbage"), std::string::npos);
  EXPECT_NE(lines[1].find("bad MAC"), std::string::npos);
  log.note(Attempt::kGarbage, "10.0.0.9:9", "", t0 + std::chrono::seconds(11));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[2].find("999 more"), std::string::npos) << lines[2];
  EXPECT_EQ(log.count(Attempt::kGarbage), 1001u);
}

}  // namespace
}  // namespace taehv::group
