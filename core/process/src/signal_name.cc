#include "signal_name.h"

#include <cstring>

namespace taehv::process {

std::string signalName(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  if (abbrev == nullptr) return "signal " + std::to_string(sig);
  return std::string("SIG") + abbrev;
}

}  // namespace taehv::process
