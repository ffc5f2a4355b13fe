// libFuzzer target: any bytes as what a node group connection receives (a stranger can send anything before the
// handshake's MAC is checked), cut into frames by FrameReader and each frame's body parsed by decodeBody: a frame, a
// message or a reason, never a crash, undefined behaviour or a read past the bytes. Checked as well: every frame is
// 33..kMaxFrameBytes bytes, the frames re-form the start of the stream they were cut from, and a body that decodes
// (its text within a sender's kMaxTextBytes) encodes back to the same bytes. The first byte sets how many bytes each
// read hands over (1..256), so frames that arrive in pieces are covered.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "taehv/group/wire.h"

using taehv::group::decodeBody;
using taehv::group::encodeBody;
using taehv::group::encodeFrame;
using taehv::group::FrameReader;
using taehv::group::kMacBytes;
using taehv::group::kMaxFrameBytes;
using taehv::group::kMaxTextBytes;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t piece = 1 + static_cast<std::size_t>(data[0]);
  const std::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);
  FrameReader reader;
  std::string rebuilt;  // the frames read so far, encoded again
  std::size_t fed = 0;
  while (true) {
    const auto frame = reader.next();
    if (!frame.ok()) break;  // a length out of range: the connection is closed
    if (!frame.value) {
      if (fed == stream.size()) break;
      const std::size_t n = std::min(piece, stream.size() - fed);
      reader.feed(stream.data() + fed, n);
      fed += n;
      continue;
    }
    const std::string& payload = *frame.value;
    if (payload.size() <= kMacBytes || payload.size() > kMaxFrameBytes) std::abort();
    const std::string_view body(payload.data(), payload.size() - kMacBytes);
    rebuilt += encodeFrame(body, std::string_view(payload).substr(body.size()));
    if (rebuilt.size() > fed || stream.substr(0, rebuilt.size()) != rebuilt) std::abort();
    const auto message = decodeBody(body);
    if (message.ok() && message.value.nonce.size() <= kMaxTextBytes && message.value.text.size() <= kMaxTextBytes &&
        encodeBody(message.value) != body) {
      std::abort();
    }
  }
  return 0;
}
