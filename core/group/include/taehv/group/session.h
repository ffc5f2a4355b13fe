// One connection's authentication state (PROTOCOL.md, "Authentication"): HMAC-SHA256 (OpenSSL) over every
// message, the handshake nonces, the session key and the per-direction counters that refuse replay.
//
// Contract: not thread-safe (one per connection, used from the group's event loop). No secret is ever put in a
// message; only MACs and random nonces are. seal() and open() never throw on bad input: open() returns a verdict.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "taehv/group/wire.h"

namespace taehv::group {

/// Which way a message goes; part of every MAC, so a message cannot be reflected back to its sender.
enum class Direction : std::uint8_t { kToLeader = 0, kToMember = 1 };

/// HMAC-SHA256 of `data` under `key` (32 bytes).
std::string hmacSha256(std::string_view key, std::string_view data);

/// `n` bytes from OpenSSL's CSPRNG (RAND_bytes). Aborts the process if the CSPRNG fails: no weak nonce is used.
std::string randomBytes(std::size_t n);

/// The job key K from the per-job secret and the run id (different runs with one token do not mix).
std::string jobKey(std::string_view token, std::string_view run_id);

/// What open() found.
enum class Verdict {
  kOk,
  kMalformed,  ///< not a message of this protocol (garbage, wrong version or lengths)
  kBadMac,     ///< wrong key, or a message captured on another connection (other nonces)
  kReplay,     ///< right key and session, wrong counter: replayed, dropped or reordered
};

struct Opened {
  Verdict verdict = Verdict::kMalformed;
  Message message;
  std::string error;  ///< for kMalformed
};

class Session {
 public:
  /// `job_key` from jobKey(); `outgoing` is the direction of what this side sends.
  Session(std::string job_key, Direction outgoing);

  /// The leader's nonce: the leader makes it (makeServerNonce), a member takes it from the CHALLENGE.
  const std::string& makeServerNonce();
  void setServerNonce(std::string ns) { ns_ = std::move(ns); }
  /// The member's nonce: made by the member for its JOIN, taken by the leader from the JOIN.
  const std::string& makeClientNonce();
  void setClientNonce(std::string nc) { nc_ = std::move(nc); }

  /// After WELCOME on both sides: switch to the session key S = HMAC(K, "session" || Ns || Nc), counters restart.
  void establish();
  bool established() const { return established_; }

  /// The frame for `m`: sets its counter (0 before establish(), then 1, 2, ...), MACs it.
  std::string seal(Message m);

  /// Checks a received frame payload (body + MAC) against this session: MAC under the handshake or session key,
  /// the counter exactly one more than the last accepted. kOk moves the counter on; anything else leaves it.
  Opened open(std::string_view payload);

 private:
  std::string context(Direction dir, MessageType type) const;

  std::string job_key_;
  std::string session_key_;
  Direction outgoing_;
  std::string ns_;
  std::string nc_;
  bool established_ = false;
  std::uint64_t sent_ = 0;
  std::uint64_t received_ = 0;
};

}  // namespace taehv::group
