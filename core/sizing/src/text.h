// Internal: small string helpers shared by the sizing sources.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "taehv/parse.h"

namespace taehv::sizing {

inline std::string trim(const std::string& s) {
  const char* ws = " \t\r\n";
  auto b = s.find_first_not_of(ws);
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

/// Splits on `sep`, keeping empty fields ("a,,b" -> {"a","","b"}); "" -> {""}.
inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string::size_type start = 0;
  while (true) {
    auto pos = s.find(sep, start);
    out.push_back(s.substr(start, pos == std::string::npos ? std::string::npos : pos - start));
    if (pos == std::string::npos) return out;
    start = pos + 1;
  }
}

inline bool startsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

/// taehv::parseInt (taehv/parse.h) of the text without surrounding white space (tool output, lists).
inline bool parseTrimmedInt(const std::string& text, int& out) {
  const std::optional<int> v = taehv::parseInt(trim(text));
  if (v) out = *v;
  return v.has_value();
}

}  // namespace taehv::sizing
