#include "taehv/ssh/shell_words.h"

#include <cctype>

namespace taehv::ssh {

SplitResult splitWords(const std::string& text) {
  SplitResult result;
  std::string word;
  bool in_word = false;
  enum class Quote { kNone, kSingle, kDouble } quote = Quote::kNone;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    switch (quote) {
      case Quote::kSingle:
        if (c == '\'') {
          quote = Quote::kNone;
        } else {
          word += c;
        }
        break;
      case Quote::kDouble:
        if (c == '"') {
          quote = Quote::kNone;
        } else if (c == '\\' && i + 1 < text.size() && (text[i + 1] == '"' || text[i + 1] == '\\')) {
          word += text[++i];
        } else {
          word += c;
        }
        break;
      case Quote::kNone:
        if (std::isspace(static_cast<unsigned char>(c))) {
          if (in_word) result.value.push_back(word);
          word.clear();
          in_word = false;
        } else if (c == '\'') {
          quote = Quote::kSingle;
          in_word = true;
        } else if (c == '"') {
          quote = Quote::kDouble;
          in_word = true;
        } else if (c == '\\' && i + 1 < text.size()) {
          word += text[++i];
          in_word = true;
        } else {
          word += c;
          in_word = true;
        }
        break;
    }
  }
  if (quote != Quote::kNone) {
    result.error = std::string("unterminated ") + (quote == Quote::kSingle ? "'" : "\"") + " quote in '" + text + "'";
    result.value.clear();
    return result;
  }
  if (in_word) result.value.push_back(word);
  return result;
}

std::string hostNameError(const std::string& host) {
  if (host.empty()) return "empty host name";
  if (host.size() > 253) return "host name longer than 253 characters";
  if (host[0] == '-' || host[0] == '.') return "host name '" + host + "' must not start with '" + host[0] + "'";
  for (char c : host) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    if (!ok) {
      const std::string shown = std::isprint(static_cast<unsigned char>(c)) ? std::string(1, c)
                                                                              : "byte " + std::to_string(c & 0xff);
      std::string why = "host name contains '" + shown + "' (allowed: letters, digits, '.', '_', '-')";
      if (c == '@') why += "; put the user name in ~/.ssh/config or --ssh-opts \"-l USER\"";
      return why;
    }
  }
  return {};
}

}  // namespace taehv::ssh
