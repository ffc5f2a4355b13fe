// Preflight: before anything starts, ask every host (one ssh each, at most max_parallel at once, one deadline for
// the whole preflight) whether it is
// reachable, lets us in without a prompt, has taehv-run at the remote path with our version, and has the
// working directory; and learn the first host's address for the master.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "taehv/ssh/command_runner.h"

namespace taehv::ssh {

/// ssh clients the preflight runs at once unless --ssh-parallel says otherwise (pdsh's fan-out is 32): enough to
/// check a few hundred hosts within the default deadline, few enough that memory and descriptors stay small.
inline constexpr std::size_t kDefaultSshParallel = 64;
/// The most --ssh-parallel takes.
inline constexpr std::size_t kMaxSshParallel = 1024;

/// Marker that starts every line the preflight script prints (login shells may print banners).
inline constexpr const char* kPreflightTag = "taehv-preflight:";

struct PreflightRequest {
  std::string ssh;                    ///< absolute path of the ssh client
  std::vector<std::string> ssh_opts;  ///< the user's --ssh-opts words
  std::vector<std::string> hosts;
  /// Extra ssh options per host (same order as hosts; may be empty), e.g. that host's ControlPath.
  std::vector<std::vector<std::string>> host_opts;
  std::string remote_bin;
  std::string cwd;
  std::string version;  ///< ours; the remote one must be equal
  std::chrono::milliseconds timeout{std::chrono::seconds(15)};  ///< for the whole preflight, all hosts
  std::size_t max_parallel = kDefaultSshParallel;                ///< ssh clients at once
};

/// What one host answered.
struct HostCheck {
  std::string host;
  std::string error;           ///< empty = ready; else the reason, without the host name
  std::vector<std::string> addresses;  ///< from `hostname -I`, may be empty
};

struct PreflightReport {
  std::vector<HostCheck> hosts;  ///< in request order
  bool ok() const {
    for (const auto& h : hosts) {
      if (!h.error.empty()) return false;
    }
    return true;
  }
};

/// The script each host runs (exposed for tests).
std::string preflightScript(const std::string& remote_bin, const std::string& cwd);

/// Runs the preflight through `runner`.
PreflightReport runPreflight(CommandRunner& runner, const std::map<std::string, std::string>& env,
                             const PreflightRequest& request);

/// Interprets one host's captured answer (exposed for tests).
HostCheck interpretPreflight(const std::string& host, const Captured& answer, const PreflightRequest& request);

}  // namespace taehv::ssh
