#include "taehv/group/attempt_log.h"

namespace taehv::group {

const char* attemptName(Attempt kind) {
  switch (kind) {
    case Attempt::kGarbage: return "garbage (not a group message)";
    case Attempt::kBadMac: return "bad MAC (wrong job token, or a message replayed from another connection)";
    case Attempt::kReplay: return "replayed or out-of-order message";
    case Attempt::kNotJoin: return "first message is not a JOIN";
    case Attempt::kBadRank: return "JOIN for a rank outside the job";
    case Attempt::kDuplicateRank: return "JOIN for a rank already in the group";
    case Attempt::kHandshakeTimeout: return "no JOIN within the handshake timeout";
    case Attempt::kClosedEarly: return "connection closed without a JOIN";
    case Attempt::kTooMany: return "too many connections without a JOIN (oldest dropped)";
    case Attempt::kCount: break;
  }
  return "unknown";
}

void AttemptLog::note(Attempt kind, const std::string& peer, const std::string& detail, Clock::time_point now) {
  Kind& k = kinds_[static_cast<std::size_t>(kind)];
  ++k.total;
  if (k.logged_once && now - k.last < interval_) {
    ++k.unlogged;
    return;
  }
  std::string line = "node group: refused a connection from " + peer + ": " + attemptName(kind);
  if (!detail.empty()) line += " (" + detail + ")";
  if (k.unlogged > 0) line += "; " + std::to_string(k.unlogged) + " more of this kind since the last report";
  if (!k.logged_once) line += "; further attempts of this kind are reported at most every " +
                              std::to_string(std::chrono::duration_cast<std::chrono::seconds>(interval_).count()) + " s";
  k.logged_once = true;
  k.last = now;
  k.unlogged = 0;
  sink_(line);
}

}  // namespace taehv::group
