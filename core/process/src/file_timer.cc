// torchelastic's file timer server. See file_timer.h.
#include "file_timer.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "console.h"
#include "signal_name.h"
#include "taehv/process/progress.h"

namespace taehv::process {
namespace {

/// A request line longer than this is garbage (torch refuses requests over PIPE_BUF, 4096 bytes).
constexpr std::size_t kMaxRequestLine = 4096;

double unixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

Checked<std::unique_ptr<FileTimerServer>> FileTimerServer::create(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISFIFO(st.st_mode)) return {std::string(kTimerFileEnv) + "=" + path + " exists and is not a named pipe"};
  } else if (::mkfifo(path.c_str(), 0600) != 0) {
    return {std::string(kTimerFileEnv) + "=" + path + ": cannot make the named pipe: " + std::strerror(errno)};
  }
  const int read_fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  const int write_fd = read_fd < 0 ? -1 : ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (read_fd < 0 || write_fd < 0) {
    const std::string why = std::strerror(errno);
    if (read_fd >= 0) ::close(read_fd);
    return {std::string(kTimerFileEnv) + "=" + path + ": cannot open the named pipe: " + why};
  }
  return {"", std::unique_ptr<FileTimerServer>(new FileTimerServer(path, read_fd, write_fd))};
}

FileTimerServer::~FileTimerServer() {
  ::close(read_fd_);
  ::close(write_fd_);
  ::unlink(path_.c_str());
}

void FileTimerServer::readRequests() {
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(read_fd_, buf, sizeof buf);
    if (n <= 0) break;
    pending_.append(buf, static_cast<std::size_t>(n));
    for (std::size_t nl; (nl = pending_.find('\n')) != std::string::npos; pending_.erase(0, nl + 1)) {
      handleLine(pending_.substr(0, nl));
    }
    if (pending_.size() > kMaxRequestLine) {
      handleLine(pending_.substr(0, 60));
      pending_.clear();
    }
  }
}

void FileTimerServer::handleLine(const std::string& line) {
  try {
    const nlohmann::json request = nlohmann::json::parse(line);
    const int pid = request.at("pid").get<int>();
    const std::string scope = request.at("scope_id").get<std::string>();
    const double expiration = request.at("expiration_time").get<double>();
    const int sig = request.at("signal").get<int>();
    if (pid <= 0 || sig < 0 || sig >= NSIG) throw std::out_of_range("pid or signal out of range");
    if (expiration < 0) {
      timers_.erase({pid, scope});
    } else {
      timers_[{pid, scope}] = {expiration, sig};
    }
  } catch (const std::exception& e) {
    const auto now = std::chrono::steady_clock::now();
    if (garbage_logged_ && now - last_garbage_log_ < kGarbageLogInterval) return;
    garbage_logged_ = true;
    last_garbage_log_ = now;
    say("taehv-run: warning: not a torchelastic timer request on " + std::string(kTimerFileEnv) + " (" +
        line.substr(0, 60) + "): " + e.what() + "; ignored (at most one such line per " +
        std::to_string(kGarbageLogInterval.count()) + " s)\n");
  }
}

void FileTimerServer::enforce(const std::function<std::string(int pid)>& name_of) {
  const double now = unixNow();
  std::set<int> done;
  struct Expired {
    double expiration;
    int pid;
    int signal;
    std::string scope;
  };
  std::vector<Expired> expired;  // one per process: its earliest expired timer with a signal, as torch's server
  for (const auto& [key, timer] : timers_) {
    const int pid = key.first;
    if (::kill(pid, 0) != 0) {
      done.insert(pid);  // gone: forget its timers
      continue;
    }
    if (timer.expiration > now) continue;
    done.insert(pid);  // an expired timer ends every timer of its process; a signal <= 0 never kills
    if (timer.signal <= 0) continue;
    auto same = std::find_if(expired.begin(), expired.end(), [pid](const Expired& e) { return e.pid == pid; });
    if (same == expired.end()) {
      expired.push_back({timer.expiration, pid, timer.signal, key.second});
    } else if (timer.expiration < same->expiration) {
      *same = {timer.expiration, pid, timer.signal, key.second};
    }
  }
  // The earliest first: the process that overran first is the one the supervisor meets first.
  std::sort(expired.begin(), expired.end(), [](const Expired& a, const Expired& b) { return a.expiration < b.expiration; });
  for (const Expired& e : expired) {
    say("taehv-run: torchelastic timer '" + e.scope + "' of " + name_of(e.pid) + " expired " +
        std::to_string(static_cast<int>((now - e.expiration) * 1000)) + " ms ago; sending " + signalName(e.signal) +
        "\n");
    ::kill(e.pid, e.signal);
  }
  for (auto it = timers_.begin(); it != timers_.end();) {
    it = done.count(it->first.first) ? timers_.erase(it) : std::next(it);
  }
}

}  // namespace taehv::process
