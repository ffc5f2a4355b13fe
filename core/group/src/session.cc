#include "taehv/group/session.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstdlib>

#include "taehv/log.h"

namespace taehv::group {

std::string hmacSha256(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  const unsigned char* ok = HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
                                 reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
  if (ok == nullptr || len != kMacBytes) {
    log::error("OpenSSL HMAC-SHA256 failed");
    std::abort();
  }
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string randomBytes(std::size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    log::error("OpenSSL RAND_bytes failed: no random nonce, refusing to go on");
    std::abort();
  }
  return out;
}

std::string jobKey(std::string_view token, std::string_view run_id) {
  return hmacSha256(token, std::string("taehv-run node group v1|").append(run_id));
}

Session::Session(std::string job_key, Direction outgoing) : job_key_(std::move(job_key)), outgoing_(outgoing) {}

const std::string& Session::makeServerNonce() {
  ns_ = randomBytes(kNonceBytes);
  return ns_;
}

const std::string& Session::makeClientNonce() {
  nc_ = randomBytes(kNonceBytes);
  return nc_;
}

void Session::establish() {
  session_key_ = hmacSha256(job_key_, "session" + ns_ + nc_);
  established_ = true;
  sent_ = 0;
  received_ = 0;
}

std::string Session::context(Direction dir, MessageType type) const {
  std::string c(1, static_cast<char>(dir));
  if (established_) return c;
  // Handshake: bound to this connection's nonces (a JOIN or WELCOME from another connection does not verify).
  if (type == MessageType::kChallenge) return c;  // its nonce is in the body
  c += ns_;
  // The leader's answer to a JOIN (admitted or refused) is bound to that JOIN's nonce too: no stranger can forge one.
  if (type == MessageType::kWelcome || type == MessageType::kRefused) c += nc_;
  return c;
}

std::string Session::seal(Message m) {
  m.counter = established_ ? ++sent_ : 0;
  const std::string body = encodeBody(m);
  const std::string mac = hmacSha256(established_ ? session_key_ : job_key_, context(outgoing_, m.type) + body);
  return encodeFrame(body, mac);
}

Opened Session::open(std::string_view payload) {
  Opened result;
  if (payload.size() <= kMacBytes) {
    result.error = "frame shorter than its MAC";
    return result;
  }
  const std::string_view body = payload.substr(0, payload.size() - kMacBytes);
  const std::string_view mac = payload.substr(payload.size() - kMacBytes);
  Checked<Message> message = decodeBody(body);
  if (!message.ok()) {
    result.error = message.error;
    return result;
  }
  const Direction incoming = outgoing_ == Direction::kToLeader ? Direction::kToMember : Direction::kToLeader;
  const std::string expected =
      hmacSha256(established_ ? session_key_ : job_key_, context(incoming, message.value.type).append(body));
  if (CRYPTO_memcmp(expected.data(), mac.data(), kMacBytes) != 0) {
    result.verdict = Verdict::kBadMac;
    return result;
  }
  const std::uint64_t want = established_ ? received_ + 1 : 0;
  if (message.value.counter != want) {
    result.verdict = Verdict::kReplay;
    result.error = "counter " + std::to_string(message.value.counter) + ", expected " + std::to_string(want);
    return result;
  }
  if (established_) received_ = want;
  result.verdict = Verdict::kOk;
  result.message = std::move(message.value);
  return result;
}

}  // namespace taehv::group
