#include "progress_report.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "taehv/parse.h"

namespace taehv::train {
namespace {

/// An integer variable of a test hook, or `fallback` when it is unset.
int64_t hookInteger(const Env& env, const char* name, int64_t fallback) {
  const std::optional<std::string> raw = envValue(env, name);
  if (!raw) return fallback;
  if (const std::optional<int64_t> value = parseInteger<int64_t>(*raw, 0)) return *value;
  throw std::runtime_error(std::string(name) + "=" + *raw + " (a test-only hook) must be an integer >= 0");
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, sep)) out.push_back(part);
  return out;
}

}  // namespace

/// Blocks the calling thread for good, its process alive: the frame a hang test looks for in the stacks.
[[gnu::noinline]] void taehvTestHangForever() {
  // pause() returns after each signal handler (SIGTERM's sets a flag the blocked loop never reads).
  for (;;) ::pause();  // signal handlers still run; the loop never ends
}

ProgressReporter::ProgressReporter(const Env& env, int rank) : rank_(rank) {
  if (const std::optional<std::string> path = envValue(env, process::kProgressSocketEnv);
      path && path->size() < sizeof addr_.sun_path) {
    addr_.sun_family = AF_UNIX;
    path->copy(addr_.sun_path, path->size());
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  }
  if (hookInteger(env, "TORCHELASTIC_RESTART_COUNT", 0) != 0) return;  // the hooks act in the first attempt only
  if (hookInteger(env, "TAEHV_TEST_HANG_RANK", -1) == rank) {
    hang_at_step_ = hookInteger(env, "TAEHV_TEST_HANG_AT_STEP", -1);
  }
  const std::optional<std::string> slow = envValue(env, "TAEHV_TEST_SLOW_SECTION");
  if (!slow || rank != hookInteger(env, "TAEHV_TEST_SLOW_RANK", 0)) return;
  for (const std::string& item : split(*slow, ',')) {
    const std::vector<std::string> parts = split(item, ':');
    const bool every = parts.size() == 3 && parts[1] == "*";  // every step
    const auto report = parts.size() == 3 ? process::parseProgressReport("step=" + (every ? "0" : parts[1]) +
                                                                         " section=" + parts[0])
                                          : Checked<process::ProgressReport>{"three parts"};
    const std::optional<double> seconds = report.ok() ? parseNumber(parts[2], 0) : std::nullopt;
    if (seconds) {
      slow_.push_back({report.value.section, every ? kEveryStep : report.value.step, *seconds});
      continue;
    }
    throw std::runtime_error("TAEHV_TEST_SLOW_SECTION item '" + item +
                             "' (a test-only hook) must be <section>:<step or *>:<seconds>");
  }
}

ProgressReporter::~ProgressReporter() {
  if (fd_ >= 0) ::close(fd_);
}

void ProgressReporter::report(int64_t step, process::Section section) {
  if (fd_ >= 0) {
    const std::string text = process::formatProgressReport({step, section});
    (void)::sendto(fd_, text.data(), text.size(), MSG_NOSIGNAL, reinterpret_cast<const sockaddr*>(&addr_),
                   sizeof addr_);
  }
  for (const SlowSection& s : slow_) {
    if (s.section == section && (s.step == step || s.step == kEveryStep)) std::this_thread::sleep_for(std::chrono::duration<double>(s.seconds));
  }
  if (step == hang_at_step_ && section == process::Section::kData) taehvTestHangForever();
}

}  // namespace taehv::train
