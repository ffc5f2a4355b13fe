// Internal: small string helpers shared by the sizing sources.
#pragma once

#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

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

/// Whole-string decimal integer (optional sign), within int range.
inline bool parseInt(const std::string& text, int& out) {
  std::string t = trim(text);
  if (t.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(t.c_str(), &end, 10);
  if (errno != 0 || end == nullptr || *end != '\0' || v < -2147483647L - 1 || v > 2147483647L) return false;
  out = static_cast<int>(v);
  return true;
}

}  // namespace taehv::sizing
