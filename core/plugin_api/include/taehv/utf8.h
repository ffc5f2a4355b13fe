// UTF-8 checks for the text taehv-run, its plugins and taehv-train print as JSON or YAML: the one helper every
// emitter uses (installed beside taehv/plugin_api.h; std only, header-only, nothing of it crosses the plugin ABI).
//
// JSON and YAML text is UTF-8 only, and the bytes a user hands us (a flag, an environment variable, a folder's name,
// a worker's stderr) need not be. Two rules, chosen per value by its caller:
// - a value a job runs with (a master address, a run id, a worker command in a rendered job) is refused with one
//   line (requireUtf8): replacing a byte would make the job run with something else than what was given;
// - free text (a note, a path shown, a stderr tail) is made valid: each ill-formed sequence becomes U+FFFD
//   (toValidUtf8, dumpValidUtf8), and the caller says so.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

#include "taehv/checked.h"

namespace taehv {

/// The length of the well-formed UTF-8 sequence at the start of `text` (1 to 4 bytes), or 0 when `text` starts with
/// an ill-formed one (Unicode 15, table 3-7: no overlong forms, no surrogates, nothing above U+10FFFF); `*prefix`,
/// when given, is set to the length of the ill-formed sequence's maximal subpart (at least 1), the bytes that one
/// U+FFFD replaces (Unicode's "best practice", as Python's errors='replace' and browsers do). `text` is not empty.
inline std::size_t utf8SequenceLength(std::string_view text, std::size_t* prefix = nullptr) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(0);
  std::size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;  // the second byte's range; later ones are always 80..BF
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;   // no overlong forms
    if (lead == 0xED) high = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;   // no overlong forms
    if (lead == 0xF4) high = 0x8F;  // nothing above U+10FFFF
  }
  std::size_t valid = length == 0 ? 0 : 1;
  while (valid > 0 && valid < length && valid < text.size()) {
    const unsigned char b = byte(valid);
    if (valid == 1 ? (b < low || b > high) : (b < 0x80 || b > 0xBF)) break;
    ++valid;
  }
  if (length != 0 && valid == length) return length;
  if (prefix != nullptr) *prefix = valid == 0 ? 1 : valid;
  return 0;
}

/// The offset of the first byte of `text` that is not part of well-formed UTF-8, or npos when all of it is.
inline std::size_t invalidUtf8At(std::string_view text) {
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t n = utf8SequenceLength(text.substr(at));
    if (n == 0) return at;
    at += n;
  }
  return std::string_view::npos;
}

inline bool isValidUtf8(std::string_view text) { return invalidUtf8At(text) == std::string_view::npos; }

namespace detail {

/// `text` with its well-formed UTF-8 kept and each ill-formed sequence (its maximal subpart) replaced by what
/// `replace(out, bad)` appends for it.
template <typename Replace>
std::string rewriteInvalidUtf8(std::string_view text, Replace&& replace) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t at = 0; at < text.size();) {
    std::size_t prefix = 0;
    const std::size_t n = utf8SequenceLength(text.substr(at), &prefix);
    if (n > 0) {
      out.append(text.substr(at, n));
      at += n;
    } else {
      replace(out, text.substr(at, prefix));
      at += prefix;
    }
  }
  return out;
}

}  // namespace detail

/// `text` with each ill-formed sequence (its maximal subpart, see utf8SequenceLength) replaced by U+FFFD, the
/// replacement character; `*replaced`, when given, is increased by how many were. Valid text comes back unchanged.
inline std::string toValidUtf8(std::string_view text, std::size_t* replaced = nullptr) {
  return detail::rewriteInvalidUtf8(text, [&](std::string& out, std::string_view) {
    out.append("\xEF\xBF\xBD");  // U+FFFD
    if (replaced != nullptr) ++*replaced;
  });
}

/// `text` for a message: its well-formed UTF-8 as it is, each byte of an ill-formed sequence as \xNN ("h\xE9"), so
/// that a line naming the bad value is itself valid UTF-8 and shows which byte is wrong.
inline std::string showInvalidUtf8(std::string_view text) {
  return detail::rewriteInvalidUtf8(text, [](std::string& out, std::string_view bad) {
    for (char byte : bad) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02X", static_cast<unsigned char>(byte));
      out.append(hex);
    }
  });
}

/// Fails when `text` is not valid UTF-8, with the line "WHAT 'TEXT' is not valid UTF-8 (byte 0xNN at offset K); FIX"
/// (TEXT shown with showInvalidUtf8). For a value a job runs with: such a value is refused, never altered.
inline Status requireUtf8(std::string_view text, const std::string& what, const std::string& fix) {
  const std::size_t at = invalidUtf8At(text);
  if (at == std::string_view::npos) return {};
  char byte[8];
  std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(text[at]));
  return {what + " '" + showInvalidUtf8(text) + "' is not valid UTF-8 (byte " + byte + " at offset " +
          std::to_string(at) + "); " + fix};
}

/// What dumpValidUtf8 replaced: how many ill-formed sequences, and where the first was (a JSON pointer, RFC 6901).
struct Utf8Repair {
  std::size_t replaced = 0;
  std::string first_at;
  bool any() const { return replaced > 0; }
  /// "WHAT: N byte sequence(s) that are not valid UTF-8 written as U+FFFD (the first at /0/notes/1)": the line a
  /// caller logs so that the replacement is said, not silent.
  std::string sentence(const std::string& what) const {
    return what + ": " + std::to_string(replaced) + " byte sequence" + (replaced == 1 ? " that is" : "s that are") +
           " not valid UTF-8 written as U+FFFD (the first at " + (first_at.empty() ? "/" : first_at) + ")";
  }
};

namespace detail {

/// RFC 6901: '~' as "~0", '/' as "~1".
inline std::string jsonPointerToken(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

/// Makes `text` valid UTF-8 in place, counting in `repair`; the first replacement's place is `at`, a JSON pointer to
/// the text (or, for a key, to its value), built by the caller once `text` is valid.
template <typename PointerTo>
void repairText(std::string& text, Utf8Repair& repair, const PointerTo& at) {
  if (isValidUtf8(text)) return;
  text = toValidUtf8(text, &repair.replaced);
  if (repair.first_at.empty()) repair.first_at = at();
}

template <typename Json>
void makeJsonUtf8(Json& doc, const std::string& at, Utf8Repair& repair) {
  if (doc.is_string()) {
    repairText(doc.template get_ref<std::string&>(), repair, [&] { return at.empty() ? std::string("/") : at; });
  } else if (doc.is_array()) {
    std::size_t i = 0;
    for (auto& element : doc) makeJsonUtf8(element, at + "/" + std::to_string(i++), repair);
  } else if (doc.is_object()) {
    Json out = Json::object();  // rebuilt: a key cannot be changed in place (the order is kept for ordered_json)
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      std::string key = it.key();
      repairText(key, repair, [&] { return at + "/" + jsonPointerToken(key); });
      Json value = std::move(it.value());
      makeJsonUtf8(value, at + "/" + jsonPointerToken(key), repair);
      out[key] = std::move(value);
    }
    doc = std::move(out);
  }
}

}  // namespace detail

/// `doc` (an nlohmann::basic_json, json or ordered_json; not included here) as JSON text that is valid UTF-8 whatever
/// its strings hold: each ill-formed sequence in a key or a string becomes U+FFFD (toValidUtf8). nlohmann's own
/// dump() throws on such text (type_error 316), which nothing caught. `repair`, when given, says what was replaced,
/// for the caller to say so. `indent` as dump()'s (-1: one line).
template <typename Json>
std::string dumpValidUtf8(Json doc, int indent = -1, Utf8Repair* repair = nullptr) {
  Utf8Repair found;
  detail::makeJsonUtf8(doc, "", found);
  if (repair != nullptr) *repair = found;
  return doc.dump(indent);
}

}  // namespace taehv
