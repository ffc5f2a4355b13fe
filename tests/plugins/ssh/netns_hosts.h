// Test harness: real sshd hosts in network namespaces (tests/infra/ssh/sshd_hosts.sh serve), held for the life
// of this object. The script holds the hosts until its stdin (our pipe) reaches EOF, so even a test that
// crashes leaves no namespace or sshd behind.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "infra/served_script.h"

namespace taehv::ssh::testing {

class NetnsHosts {
 public:
  /// Brings up `n` hosts h1..hn (10.77.0.2..); `hide` = "I:DIR" gives host I an empty tmpfs over DIR.
  /// On failure skip_reason() or error() says why.
  NetnsHosts(int n, const std::string& hide = "");
  ~NetnsHosts();
  NetnsHosts(const NetnsHosts&) = delete;
  NetnsHosts& operator=(const NetnsHosts&) = delete;

  bool ready() const { return ready_; }
  const std::string& skipReason() const { return skip_; }
  const std::string& error() const { return error_; }
  const std::string& base() const { return base_; }
  std::string sshConfig() const { return base_ + "/ssh_config"; }

  /// Runs `command` on `host` over ssh (our config) and returns its stdout; -1 exit code on failure.
  std::string runOn(const std::string& host, const std::string& command, int* exit_code = nullptr) const;

 private:
  std::string base_;
  std::string skip_;
  std::string error_;
  std::unique_ptr<taehv::testing::ServedScript> script_;
  bool ready_ = false;
};

/// A process started by a test with stdout and stderr captured to files.
struct Launched {
  pid_t pid = -1;
  std::string out_path;
  std::string err_path;
  int wait();                     ///< exit code, or 128 + signal
  bool waitFor(int seconds, int* code);  ///< false if still running after `seconds`
  std::string out() const;
  std::string err() const;
};

/// Starts argv (argv[0] absolute) in `cwd` with the current environment plus `extra_env`.
Launched launch(const std::vector<std::string>& argv, const std::string& cwd,
                const std::map<std::string, std::string>& extra_env, const std::string& dir);

/// Contents of a file ("" if missing).
std::string readFile(const std::string& path);

}  // namespace taehv::ssh::testing
