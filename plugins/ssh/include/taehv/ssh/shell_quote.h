// POSIX shell quoting and the validation of names that end up in a remote command line.
//
// Everything the SSH fan-out sends to a remote host travels as one string that the remote login shell parses,
// so every value we did not write ourselves (host names, arguments, environment values, paths) is quoted here.
#pragma once

#include <string>
#include <vector>

#include "taehv/checked.h"

namespace taehv::ssh {

/// Quotes `word` for a POSIX shell so that it reads back as exactly one word with the same bytes, whatever
/// it contains (`;`, `$(...)`, quotes, newlines, an empty string). Uses single quotes, writing a single quote
/// as '\''. Words made only of safe characters are returned unchanged for readable command lines.
std::string shellQuote(const std::string& word);

/// shellQuote() of each word, joined by single spaces.
std::string shellJoin(const std::vector<std::string>& words);

/// Result of splitWords(): the words, or what is wrong with the text.
using SplitResult = Checked<std::vector<std::string>>;

/// Splits a user string such as --ssh-opts "-p 2222 -o 'ProxyJump a b'" into words like a shell would for
/// quoting purposes only: whitespace separates, '...' and "..." group, backslash escapes. Nothing is expanded
/// or executed ($, `, * stay literal). An unterminated quote is an error.
SplitResult splitWords(const std::string& text);

/// Empty when `host` is a safe host name for ssh and for the hostfile syntax; else why not. Allowed: letters,
/// digits, '.', '_', '-', not starting with '-' or '.', at most 253 characters. ('@' is the --include separator
/// and ':' its slot separator, so "user@host" belongs in ~/.ssh/config or --ssh-opts "-l user".)
std::string hostNameError(const std::string& host);

/// True for a valid environment variable name: [A-Za-z_][A-Za-z0-9_]*.
bool isValidEnvName(const std::string& name);

}  // namespace taehv::ssh
