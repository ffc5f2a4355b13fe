// Reading shell words the user wrote (--ssh-opts) and checking host names that end up in a remote command line.
//
// Everything the SSH fan-out sends to a remote host travels as one string that the remote login shell parses, so
// every value we did not write ourselves (host names, arguments, environment values, paths) is quoted with
// taehv/shell_quote.h, and variable names are checked with isShellName() there.
#pragma once

#include <string>
#include <vector>

#include "taehv/checked.h"

namespace taehv::ssh {

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

}  // namespace taehv::ssh
