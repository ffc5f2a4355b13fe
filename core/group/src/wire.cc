#include "taehv/group/wire.h"

namespace taehv::group {
namespace {

constexpr std::size_t kHeaderBytes = 1 + 1 + 4 + 8;  // version, type, rank, counter
constexpr std::size_t kTrailerBytes = 4 * 5;  // procs, first_rank, nnodes, node_rank, round (after nonce and text)

void putU16(std::string& out, std::uint16_t v) {
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v & 0xff));
}

void putU32(std::string& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((v >> shift) & 0xff));
}

void putU64(std::string& out, std::uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>((v >> shift) & 0xff));
}

std::uint64_t getBE(std::string_view in, std::size_t at, std::size_t bytes) {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(in[at + i]);
  return v;
}

void putField(std::string& out, std::string_view field) {
  const std::size_t n = std::min(field.size(), kMaxTextBytes);
  putU16(out, static_cast<std::uint16_t>(n));
  out.append(field.data(), n);
}

/// Reads a u16-length field at `at`; advances `at`. False when it runs past the end.
bool getField(std::string_view in, std::size_t& at, std::string* field) {
  if (in.size() - at < 2) return false;
  const std::size_t n = getBE(in, at, 2);
  at += 2;
  if (in.size() - at < n) return false;
  field->assign(in.substr(at, n));
  at += n;
  return true;
}

}  // namespace

std::string encodeBody(const Message& m) {
  std::string out;
  out.reserve(kHeaderBytes + 4 + m.nonce.size() + m.text.size() + kTrailerBytes);
  out.push_back(static_cast<char>(kWireVersion));
  out.push_back(static_cast<char>(m.type));
  putU32(out, m.rank);
  putU64(out, m.counter);
  putField(out, m.nonce);
  putField(out, m.text);
  putU32(out, m.procs);
  putU32(out, m.first_rank);
  putU32(out, m.nnodes);
  putU32(out, m.node_rank);
  putU32(out, m.round);
  return out;
}

Checked<Message> decodeBody(std::string_view body) {
  if (body.size() < kHeaderBytes + 4 + kTrailerBytes) {
    return {"message too short (" + std::to_string(body.size()) + " bytes)"};
  }
  if (static_cast<unsigned char>(body[0]) != kWireVersion) {
    return {"unknown protocol version " + std::to_string(static_cast<unsigned char>(body[0]))};
  }
  const auto type = static_cast<unsigned char>(body[1]);
  if (type < static_cast<unsigned char>(MessageType::kChallenge) ||
      type > static_cast<unsigned char>(MessageType::kRefused)) {
    return {"unknown message type " + std::to_string(type)};
  }
  Checked<Message> result;
  Message& m = result.value;
  m.type = static_cast<MessageType>(type);
  m.rank = static_cast<std::uint32_t>(getBE(body, 2, 4));
  m.counter = getBE(body, 6, 8);
  std::size_t at = kHeaderBytes;
  if (!getField(body, at, &m.nonce) || !getField(body, at, &m.text) || body.size() - at != kTrailerBytes) {
    return {"field lengths do not add up to the message length"};
  }
  m.procs = static_cast<std::uint32_t>(getBE(body, at, 4));
  m.first_rank = static_cast<std::uint32_t>(getBE(body, at + 4, 4));
  m.nnodes = static_cast<std::uint32_t>(getBE(body, at + 8, 4));
  m.node_rank = static_cast<std::uint32_t>(getBE(body, at + 12, 4));
  m.round = static_cast<std::uint32_t>(getBE(body, at + 16, 4));
  return result;
}

std::string encodeFrame(std::string_view body, std::string_view mac) {
  std::string out;
  out.reserve(4 + body.size() + mac.size());
  putU32(out, static_cast<std::uint32_t>(body.size() + mac.size()));
  out.append(body);
  out.append(mac);
  return out;
}

Checked<std::optional<std::string>> FrameReader::next() {
  const std::string_view held(buffer_.data() + offset_, buffer_.size() - offset_);
  if (held.size() < 4) return {};
  const std::size_t length = getBE(held, 0, 4);
  if (length <= kMacBytes || length > kMaxFrameBytes) {
    return {"frame length " + std::to_string(length) + " out of range (" + std::to_string(kMacBytes + 1) + ".." +
            std::to_string(kMaxFrameBytes) + ")"};
  }
  if (held.size() - 4 < length) return {};
  Checked<std::optional<std::string>> frame{"", std::string(held.substr(4, length))};
  offset_ += 4 + length;
  if (offset_ == buffer_.size()) {
    buffer_.clear();
    offset_ = 0;
  } else if (offset_ > kMaxFrameBytes) {
    buffer_.erase(0, offset_);
    offset_ = 0;
  }
  return frame;
}

}  // namespace taehv::group
