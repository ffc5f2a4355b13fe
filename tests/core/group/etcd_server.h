// A real single-member etcd for tests: `etcd` (Debian's etcd-server, scripts/setup.sh) on two free loopback ports
// with a temporary data folder, SIGKILLed and removed when the object dies. No etcd installed is a failure that
// says how to get one, not a skip.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "taehv/group/etcd_client.h"

namespace taehv::test {

/// A loopback port free right now (bound to port 0, read back and closed).
inline int freeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

class EtcdServer {
 public:
  /// Starts etcd and waits (at most 20 s) until its gateway answers; ok() says whether it did.
  EtcdServer() {
    char tmpl[] = "/tmp/taehv-etcd-test-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return;
    dir_ = tmpl;
    client_port_ = freeLoopbackPort();
    const int peer_port = freeLoopbackPort();
    const std::string client = "http://127.0.0.1:" + std::to_string(client_port_);
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      const std::string log = dir_ + "/etcd.log";
      FILE* f = std::freopen(log.c_str(), "w", stderr);
      (void)f;
      ::execlp("etcd", "etcd", "--name", "t0", "--data-dir", (dir_ + "/data").c_str(), "--listen-client-urls",
               client.c_str(), "--advertise-client-urls", client.c_str(), "--listen-peer-urls", peer.c_str(),
               "--initial-advertise-peer-urls", peer.c_str(), "--initial-cluster", ("t0=" + peer).c_str(),
               static_cast<char*>(nullptr));
      _exit(127);
    }
    group::EtcdClient probe({endpoint()}, std::chrono::milliseconds(500));
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        error_ = WIFEXITED(status) && WEXITSTATUS(status) == 127
                     ? "no etcd on PATH: install etcd-server (scripts/setup.sh does)"
                     : "etcd ended at start; its log: " + dir_ + "/etcd.log";
        return;
      }
      if (probe.version().ok()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    error_ = "etcd did not answer within 20 s; its log: " + dir_ + "/etcd.log";
  }
  ~EtcdServer() {
    kill();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  bool ok() const { return pid_ > 0 && error_.empty(); }
  const std::string& error() const { return error_; }
  group::EtcdEndpoint endpoint() const { return {"127.0.0.1", client_port_}; }
  std::string endpointText() const { return endpoint().text(); }

  /// SIGKILLs etcd (the cluster gone at once, as a lost machine).
  void kill() {
    if (pid_ <= 0) return;
    ::kill(-pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  std::string dir_;
  std::string error_;
  int client_port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace taehv::test
