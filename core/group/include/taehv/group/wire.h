// The node group's wire format (PROTOCOL.md, "Framing"): one message per frame, a 4-byte big-endian length, then
// the message body and its 32-byte MAC. Pure functions and one incremental reader; no sockets, no keys.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "taehv/checked.h"

namespace taehv::group {

/// What a message says. The numbers are on the wire: never renumber.
enum class MessageType : std::uint8_t {
  kChallenge = 1,  ///< leader -> member: the server nonce Ns
  kJoin = 2,       ///< member -> leader: rank, host, client nonce Nc
  kWelcome = 3,    ///< leader -> member: admitted
  kFormed = 4,     ///< leader -> member: every node has joined; start the workers
  kHeartbeat = 5,  ///< both ways, every kHeartbeatPeriod
  kStop = 6,       ///< both ways: stop every node; text = the reason
  kLeave = 7,      ///< member -> leader: my workers finished with success; stop watching me
  /// leader -> member, in answer to a JOIN that verifies but cannot be admitted: text = why (one line for the member
  /// to print); procs = 1 when the member may try again (the group formed without it), 0 when it must not (its node
  /// rank is out of range or already in the group, its process count out of range). Added within version 3: an older
  /// member reads it as an unknown type and ends ("not the group protocol") instead of waiting.
  kRefused = 8,
};

/// 2: JOIN carries the member's process count, FORMED the member's first rank and the world size (nodes may run
/// different counts). 3: FORMED also carries the formation's node count, the member's node rank in it and the
/// formation's number (elastic re-formation). An older peer is refused by the version check.
inline constexpr std::uint8_t kWireVersion = 3;
/// Largest frame body (bytes after the length); a longer length ends the connection.
inline constexpr std::size_t kMaxFrameBytes = 4096;
inline constexpr std::size_t kMacBytes = 32;    ///< HMAC-SHA256
inline constexpr std::size_t kNonceBytes = 16;  ///< Ns, Nc
/// Longest text field (host name, stop reason) a sender puts in a message; longer text is cut.
inline constexpr std::size_t kMaxTextBytes = 2048;
/// A JOIN's rank when the member has no node rank and asks node 0 for one (PROTOCOL.md, "Node ranks by arrival"):
/// FORMED's node_rank then carries the rank assigned, and the member's later messages carry that. Added within
/// version 3: an older node 0 refuses it as a node rank out of range (REFUSED, procs 0), so the member ends saying so.
inline constexpr std::uint32_t kArrivalRank = 0xffffffffu;

/// One message without its MAC.
struct Message {
  MessageType type = MessageType::kHeartbeat;
  std::uint32_t rank = 0;     ///< the sender's node rank
  std::uint64_t counter = 0;  ///< per connection and direction; 0 during the handshake
  std::string nonce;          ///< kChallenge, kJoin: kNonceBytes random bytes
  std::string text;           ///< kJoin: host; kStop, kRefused: reason
  std::uint32_t procs = 0;  ///< kJoin: the sender's process count; kFormed: the job's world size; kRefused: 1 = may retry
  std::uint32_t first_rank = 0;  ///< kFormed: the receiver's first global rank; else 0
  std::uint32_t nnodes = 0;      ///< kFormed: nodes in this formation; else 0
  std::uint32_t node_rank = 0;   ///< kFormed: the receiver's node rank in this formation; else 0
  std::uint32_t round = 0;       ///< kFormed: the formation's number (restarts made: TORCHELASTIC_RESTART_COUNT)
};

/// The body of `m` (everything the MAC covers, without the length and the MAC). Text is cut to kMaxTextBytes.
std::string encodeBody(const Message& m);

/// Parses a body (without MAC); fails when it is malformed (version, type, lengths).
Checked<Message> decodeBody(std::string_view body);

/// The frame on the wire: length, body, mac.
std::string encodeFrame(std::string_view body, std::string_view mac);

/// Cuts a byte stream into frames. Not thread-safe; one per connection.
class FrameReader {
 public:
  /// Appends received bytes.
  void feed(const char* data, std::size_t size) { buffer_.append(data, size); }

  /// The next complete frame's payload (body + mac), nullopt when it has not fully arrived; fails when the length
  /// is out of range: the stream cannot be resynchronised, close it.
  Checked<std::optional<std::string>> next();

 private:
  std::string buffer_;
  std::size_t offset_ = 0;
};

}  // namespace taehv::group
