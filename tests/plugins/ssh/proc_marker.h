// Test helper: count live processes whose environment (as it was at exec) contains a unique marker, e.g.
// TAEHV_TEST_MARKER=<unique>; a job's processes inherit it, while the shells and ssh clients that merely carry
// it in a command line do not match. All network namespaces share
// one PID namespace here, so this sees every "host"; the marker is unique per test so other people's processes
// never match.
#pragma once

#include <dirent.h>

#include <cctype>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace taehv::ssh::testing {

inline int countMarker(const std::string& marker) {
  int n = 0;
  DIR* d = ::opendir("/proc");
  if (!d) return -1;
  while (dirent* e = ::readdir(d)) {
    if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
    const std::string base = std::string("/proc/") + e->d_name;
    std::ifstream stat(base + "/stat");
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');
    if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z') continue;  // zombie
    std::ifstream in(base + "/environ", std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    const std::string entries = std::string(1, '\0') + s.str();
    if (entries.find(std::string(1, '\0') + marker + std::string(1, '\0')) != std::string::npos) ++n;
  }
  ::closedir(d);
  return n;
}

/// Waits until countMarker(marker) == want or `limit` passes; returns the last count.
inline int waitMarker(const std::string& marker, int want, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  int n = countMarker(marker);
  while (n != want && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    n = countMarker(marker);
  }
  return n;
}

}  // namespace taehv::ssh::testing
