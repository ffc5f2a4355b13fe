// Human names of signals for summaries.
#pragma once

#include <string>

namespace taehv::process {

/// "SIGSEGV" style name of a signal number ("signal 42" when it has none, e.g. real-time signals).
std::string signalName(int sig);

}  // namespace taehv::process
