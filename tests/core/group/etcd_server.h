// A real etcd for tests, one member or a cluster of several: `etcd` (Debian's etcd-server, scripts/setup.sh), each
// member on two free loopback ports with a temporary data folder, SIGKILLed and removed when the object dies. No etcd installed is a failure that
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
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "taehv/group/etcd_client.h"
#include "taehv/group/etcd_tls.h"

namespace taehv::test {

/// TLS on the members' client URLs (https://): the server's certificate, key and the CA it trusts for client
/// certificates (PEM files), and how the probe that waits for the member connects (its CA, client certificate).
struct EtcdServerTls {
  std::string cert, key, trusted_ca;  ///< trusted_ca "": no --trusted-ca-file (the member asks no certificate)
  bool client_cert_auth = true;       ///< etcd's --client-cert-auth
  group::EtcdTlsSettings probe;
};

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
  /// Starts a cluster of `members` etcd processes (one: a single member) and waits (at most 20 s) until every
  /// member's gateway answers; ok() says whether it did. `tls`: https client URLs. `base_port` (0: free ports
  /// from the kernel): member i's client port is base_port + 2i, its peer port the next one.
  explicit EtcdServer(int members = 1, std::optional<EtcdServerTls> tls = std::nullopt, int base_port = 0)
      : tls_(std::move(tls)) {
    char tmpl[] = "/tmp/taehv-etcd-test-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return;
    dir_ = tmpl;
    if (tls_) {
      auto loaded = group::EtcdTls::load(tls_->probe);
      if (!loaded.ok()) {
        error_ = "the probe's TLS settings: " + loaded.error;
        return;
      }
      probe_tls_ = loaded.value;
    }
    std::string cluster;
    for (int i = 0; i < members; ++i) {
      if (base_port > 0) {
        members_.push_back({-1, base_port + 2 * i, base_port + 2 * i + 1});
      } else {
        members_.push_back({-1, freeLoopbackPort(), freeLoopbackPort()});
      }
      cluster += (i ? "," : "") + name(i) + "=" + peerUrl(i);
    }
    cluster_ = cluster;
    for (int i = 0; i < members; ++i) spawn(i, cluster);
    waitReady();
  }
  ~EtcdServer() {
    for (std::size_t i = 0; i < members_.size(); ++i) killMember(static_cast<int>(i));
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  bool ok() const { return !members_.empty() && error_.empty(); }
  const std::string& error() const { return error_; }
  group::EtcdEndpoint endpoint(int member = 0) const {
    group::EtcdEndpoint e{"127.0.0.1", members_[static_cast<std::size_t>(member)].client_port};
    e.https = tls_.has_value();
    e.tls = probe_tls_;
    return e;
  }
  /// Every member's endpoint, as --rdzv-endpoint takes them.
  std::string endpointText() const {
    std::string s;
    for (std::size_t i = 0; i < members_.size(); ++i) s += (i ? "," : "") + endpoint(static_cast<int>(i)).text();
    return s;
  }

  /// SIGKILLs every member (the cluster gone at once, as lost machines).
  void kill() {
    for (std::size_t i = 0; i < members_.size(); ++i) killMember(static_cast<int>(i));
  }
  /// SIGKILLs one member.
  void killMember(int i) {
    pid_t& pid = members_[static_cast<std::size_t>(i)].pid;
    if (pid <= 0) return;
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    pid = -1;
  }

  /// SIGSTOPs one member: its port still accepts connections (the kernel's backlog) but nothing answers, as a
  /// member cut off from the network; a call to it waits out the call timeout. SIGKILLed with the rest at the end.
  void pauseMember(int i) {
    const pid_t pid = members_[static_cast<std::size_t>(i)].pid;
    if (pid > 0) ::kill(-pid, SIGSTOP);
  }

  /// Starts member `i` again (SIGKILLed by killMember) on its ports and data, and waits until the cluster answers
  /// through it (at most 20 s); false when it did not.
  bool restartMember(int i) {
    killMember(i);
    spawn(i, cluster_);
    waitReady();
    return ok();
  }

 private:
  /// Waits (at most 20 s) until every member's gateway answers a range (which needs the cluster's quorum); sets
  /// error_ when one did not.
  void waitReady() {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (std::size_t m = 0; m < members_.size(); ++m) {
      const int i = static_cast<int>(m);
      if (members_[m].pid <= 0) continue;
      group::EtcdClient probe({endpoint(i)}, std::chrono::milliseconds(500));
      while (true) {
        int status = 0;
        if (::waitpid(members_[i].pid, &status, WNOHANG) == members_[i].pid) {
          members_[i].pid = -1;
          error_ = WIFEXITED(status) && WEXITSTATUS(status) == 127
                       ? "no etcd on PATH: install etcd-server (scripts/setup.sh does)"
                       : "etcd ended at start; its log: " + dir_ + "/" + name(i) + ".log";
          return;
        }
        if (probe.rangePrefix("/").ok()) break;  // a range needs the cluster's quorum, /version does not
        if (std::chrono::steady_clock::now() > end) {
          error_ = "etcd did not answer within 20 s; its log: " + dir_ + "/" + name(i) + ".log";
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  }

  struct Member {
    pid_t pid = -1;
    int client_port = 0;
    int peer_port = 0;
  };
  static std::string name(int i) { return "t" + std::to_string(i); }
  std::string peerUrl(int i) const {
    return "http://127.0.0.1:" + std::to_string(members_[static_cast<std::size_t>(i)].peer_port);
  }

  void spawn(int i, const std::string& cluster) {
    const std::string client = (tls_ ? "https://127.0.0.1:" : "http://127.0.0.1:") +
                               std::to_string(members_[static_cast<std::size_t>(i)].client_port);
    const std::string peer = peerUrl(i);
    const std::string data = dir_ + "/" + name(i), log = dir_ + "/" + name(i) + ".log";
    std::vector<std::string> args = {"etcd", "--name", name(i), "--data-dir", data, "--listen-client-urls", client,
                                     "--advertise-client-urls", client, "--listen-peer-urls", peer,
                                     "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster,
                                     "--initial-cluster-token", dir_};
    if (tls_) {
      args.insert(args.end(), {"--cert-file", tls_->cert, "--key-file", tls_->key});
      if (!tls_->trusted_ca.empty()) args.insert(args.end(), {"--trusted-ca-file", tls_->trusted_ca});
      if (tls_->client_cert_auth) args.push_back("--client-cert-auth");
    }
    std::vector<char*> argv;  // built before fork(): the child only calls what is safe after it
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      FILE* f = std::freopen(log.c_str(), "w", stderr);
      (void)f;
      ::execvp("etcd", argv.data());
      _exit(127);
    }
    members_[static_cast<std::size_t>(i)].pid = pid;
  }

  std::optional<EtcdServerTls> tls_;
  std::shared_ptr<const group::EtcdTls> probe_tls_;
  std::string dir_;
  std::string cluster_;
  std::string error_;
  std::vector<Member> members_;
};

}  // namespace taehv::test
