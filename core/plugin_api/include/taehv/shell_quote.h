// POSIX shell quoting: the one rule for every command line taehv-run and its plugins write for a shell to read (the
// SSH fan-out's remote command, the sbatch script, PAI-DLC's UserCommand). Installed beside taehv/plugin_api.h; std
// only, header-only, nothing of it crosses the plugin ABI.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace taehv {

/// True for a name a POSIX shell takes for a variable: [A-Za-z_][A-Za-z0-9_]*.
inline bool isShellName(std::string_view name) {
  const auto letter = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
  if (name.empty() || !letter(name.front())) return false;
  for (char c : name) {
    if (!letter(c) && !(c >= '0' && c <= '9')) return false;
  }
  return true;
}

/// Quotes `word` for a POSIX shell so that it reads back as exactly one word with the same bytes, whatever it
/// contains (`;`, `$(...)`, quotes, newlines, an empty string): single quotes, a single quote written as '\''.
/// A word made only of letters, digits and _ - + . / : , @ % = is returned unchanged, for readable command lines,
/// unless it would read as an assignment (NAME=...: in command position the shell would assign it, not run it).
/// Not left bare: '~' and '#' (special at the start of a word), a leading '=' (zsh expands =word).
inline std::string shellQuote(std::string_view word) {
  static constexpr std::string_view kSafe =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+./:,@%=";
  const std::size_t eq = word.find('=');
  const bool bare = !word.empty() && word.find_first_not_of(kSafe) == std::string_view::npos && eq != 0 &&
                    (eq == std::string_view::npos || !isShellName(word.substr(0, eq)));
  if (bare) return std::string(word);
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

/// shellQuote() of each word, joined by single spaces.
inline std::string shellJoin(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) {
    if (!out.empty()) out += ' ';
    out += shellQuote(w);
  }
  return out;
}

}  // namespace taehv
