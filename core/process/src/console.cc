#include "console.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "signal_name.h"

namespace taehv::process {
namespace {

std::string utcTime(std::time_t t) {
  char buf[64];
  struct tm tm {};
  ::gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

}  // namespace

void writeAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 100);
    } else {
      return;
    }
  }
}

void say(const std::string& text) { writeAll(STDERR_FILENO, text); }

std::string describeExit(int exit_code, int sig) {
  if (sig != 0) return "died by signal " + signalName(sig) + " (" + std::to_string(sig) + ")";
  return "exited with code " + std::to_string(exit_code);
}

std::string who(const ChildSpec& spec) {
  std::string s = "rank " + std::to_string(spec.rank);
  if (!spec.label.empty()) s += " [" + spec.label + "]";
  if (!spec.host.empty()) s += " on " + spec.host;
  return s;
}

void printSummary(const ChildExit& f, int restarts, int max_restarts, std::size_t tail_lines) {
  std::string s = "taehv-run: ==== worker failure ====\n";
  s += "taehv-run: first failure: rank " + std::to_string(f.rank) + "\n";
  s += "taehv-run: label: " + (f.label.empty() ? std::string("-") : f.label) + "\n";
  s += "taehv-run: host: " + (f.host.empty() ? std::string("localhost") : f.host) + "\n";
  if (f.signal != 0) {
    s += "taehv-run: signal: " + signalName(f.signal) + " (" + std::to_string(f.signal) + ")\n";
  } else {
    s += "taehv-run: exit code: " + std::to_string(f.exit_code) + "\n";
  }
  if (!f.hang.empty()) s += "taehv-run: hang: " + f.hang + "\n";
  s += "taehv-run: time: " + utcTime(std::time(nullptr)) + "\n";
  s += "taehv-run: restarts: " + std::to_string(restarts) + " of " + std::to_string(max_restarts) + " used\n";
  if (f.stderr_tail.empty()) {
    s += "taehv-run: stderr: (empty)\n";
  } else {
    s += "taehv-run: last " + std::to_string(f.stderr_tail.size()) + " stderr lines (at most " +
         std::to_string(tail_lines) + "):\n";
    for (const std::string& line : f.stderr_tail) s += "  | " + line + "\n";
  }
  s += "taehv-run: ========================\n";
  say(s);
}

}  // namespace taehv::process
