// Rate-limited log of what strangers try on the group port (PROTOCOL.md, "Strangers"): the first attempt of each
// kind is logged with the peer's address; after that at most one line per kind per interval, with a count.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace taehv::group {

/// At most one log line per kind of attempt in this interval.
inline constexpr std::chrono::seconds kAttemptLogInterval{10};

enum class Attempt : std::uint8_t {
  kGarbage,           ///< not a frame/message of this protocol
  kBadMac,            ///< wrong key or a message captured on another connection
  kReplay,            ///< right session, wrong counter
  kNotJoin,           ///< a first message that is not a JOIN
  kBadRank,           ///< a JOIN for a rank outside 1..nnodes-1
  kDuplicateRank,     ///< a JOIN for a rank already in the group
  kHandshakeTimeout,  ///< no JOIN within kHandshakeTimeout
  kClosedEarly,       ///< connected and closed without a JOIN
  kTooMany,           ///< dropped: too many connections without a JOIN at once
  kCount
};

class AttemptLog {
 public:
  using Clock = std::chrono::steady_clock;
  using Sink = std::function<void(const std::string&)>;

  explicit AttemptLog(Sink sink, std::chrono::milliseconds interval = kAttemptLogInterval)
      : sink_(std::move(sink)), interval_(interval) {}

  /// Records one attempt from `peer`; logs it unless a line of this kind went out less than `interval` ago.
  void note(Attempt kind, const std::string& peer, const std::string& detail, Clock::time_point now = Clock::now());

  /// Attempts of `kind` seen so far (logged or not).
  std::uint64_t count(Attempt kind) const { return kinds_[static_cast<std::size_t>(kind)].total; }

 private:
  struct Kind {
    std::uint64_t total = 0;
    std::uint64_t unlogged = 0;
    Clock::time_point last{};
    bool logged_once = false;
  };
  Sink sink_;
  std::chrono::milliseconds interval_;
  std::array<Kind, static_cast<std::size_t>(Attempt::kCount)> kinds_{};
};

/// Short human name of a kind, e.g. "bad MAC".
const char* attemptName(Attempt kind);

}  // namespace taehv::group
