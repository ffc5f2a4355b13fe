#include "taehv/sizing/network.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "text.h"

namespace taehv::sizing {
namespace {

/// Closes a socket on scope exit.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string addressText(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  } else if (sa->sa_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  }
  return buf;
}

struct AddrInfoList {
  addrinfo* head = nullptr;
  ~AddrInfoList() {
    if (head != nullptr) ::freeaddrinfo(head);
  }
};

// getaddrinfo for `host`, IPv4 results first (clusters usually route IPv4 between nodes).
int lookup(const std::string& host, int socktype, AddrInfoList& list, std::vector<const addrinfo*>& ordered) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &list.head);
  if (rc != 0) return rc;
  for (const addrinfo* ai = list.head; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET) ordered.push_back(ai);
  }
  for (const addrinfo* ai = list.head; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET6) ordered.push_back(ai);
  }
  return 0;
}

void setPort(sockaddr_storage& ss, int port) {
  if (ss.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(static_cast<std::uint16_t>(port));
  if (ss.ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(static_cast<std::uint16_t>(port));
  }
}

bool sameAddress(const sockaddr* a, const sockaddr_storage& b) {
  if (a->sa_family != b.ss_family) return false;
  if (a->sa_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(&b)->sin_addr.s_addr;
  }
  if (a->sa_family == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(&b)->sin6_addr, sizeof(in6_addr)) == 0;
  }
  return false;
}

}  // namespace

Resolution resolveHost(const std::string& host) {
  Resolution r;
  if (host.empty()) {
    r.error = "empty host name";
    return r;
  }
  AddrInfoList list;
  std::vector<const addrinfo*> ordered;
  if (int rc = lookup(host, SOCK_STREAM, list, ordered); rc != 0) {
    r.error = ::gai_strerror(rc);
    return r;
  }
  for (const addrinfo* ai : ordered) {
    std::string a = addressText(ai->ai_addr);
    if (std::find(r.value.begin(), r.value.end(), a) == r.value.end()) r.value.push_back(a);
  }
  if (r.value.empty()) r.error = "no IPv4 or IPv6 address";
  return r;
}

std::optional<std::string> routeInterfaceFromTable(const std::string& table, const std::string& ipv4) {
  in_addr dest{};
  if (::inet_pton(AF_INET, ipv4.c_str(), &dest) != 1) return std::nullopt;
  std::istringstream in(table);
  std::string line;
  std::getline(in, line);  // header: Iface Destination Gateway Flags RefCnt Use Metric Mask ...
  std::optional<std::string> best;
  int best_bits = -1;
  long best_metric = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string iface, dst_hex, gw_hex, flags_hex, refcnt, use, metric_text, mask_hex;
    if (!(fields >> iface >> dst_hex >> gw_hex >> flags_hex >> refcnt >> use >> metric_text >> mask_hex)) continue;
    // Values are the raw in_addr_t (network byte order) printed in hex by the kernel on this host.
    const std::optional<unsigned long> dst = parseHex(dst_hex);
    const std::optional<unsigned long> mask_read = parseHex(mask_hex);
    const std::optional<unsigned long> flags = parseHex(flags_hex);
    const std::optional<long> metric_read = parseCount<long>(metric_text);
    if (!dst || !mask_read || !flags || !metric_read) continue;
    const unsigned long mask = *mask_read;
    const long metric = *metric_read;
    constexpr unsigned long kRouteUp = 0x1;  // RTF_UP
    if ((*flags & kRouteUp) == 0) continue;
    if ((dest.s_addr & mask) != (*dst & mask)) continue;
    int bits = __builtin_popcountl(mask);
    if (bits > best_bits || (bits == best_bits && metric < best_metric)) {
      best = iface;
      best_bits = bits;
      best_metric = metric;
    }
  }
  return best;
}

Checked<RouteChoice> interfaceForDestination(const std::string& host) {
  Checked<RouteChoice> result;
  RouteChoice& choice = result.value;
  AddrInfoList list;
  std::vector<const addrinfo*> ordered;
  if (int rc = lookup(host, SOCK_DGRAM, list, ordered); rc != 0 || ordered.empty()) {
    return {"cannot resolve '" + host + "': " + (rc != 0 ? ::gai_strerror(rc) : "no address")};
  }
  std::string last_error;
  for (const addrinfo* ai : ordered) {
    const std::string dest = addressText(ai->ai_addr);
    Fd sock(::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (sock.get() < 0) {
      last_error = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    sockaddr_storage target{};
    std::memcpy(&target, ai->ai_addr, ai->ai_addrlen);
    setPort(target, 9);  // any port: connect() on UDP only picks the route, nothing is sent
    if (::connect(sock.get(), reinterpret_cast<sockaddr*>(&target), ai->ai_addrlen) != 0) {
      last_error = "no route to " + dest + ": " + std::strerror(errno);
      continue;
    }
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (::getsockname(sock.get(), reinterpret_cast<sockaddr*>(&local), &len) != 0) {
      last_error = std::string("getsockname: ") + std::strerror(errno);
      continue;
    }
    const std::string local_text = addressText(reinterpret_cast<sockaddr*>(&local));
    ifaddrs* ifs = nullptr;
    if (::getifaddrs(&ifs) == 0) {
      for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
        if (i->ifa_addr != nullptr && sameAddress(i->ifa_addr, local)) {
          choice.interface = i->ifa_name;
          break;
        }
      }
      ::freeifaddrs(ifs);
    }
    choice.local_address = local_text;
    if (!choice.interface.empty()) {
      choice.how = "the route to " + host + (dest != host ? " (" + dest + ")" : std::string()) + " leaves from " +
                   local_text + " on " + choice.interface;
      return result;
    }
    if (ai->ai_family == AF_INET) {
      std::ifstream route("/proc/net/route");
      std::stringstream text;
      text << route.rdbuf();
      if (auto name = routeInterfaceFromTable(text.str(), dest)) {
        choice.interface = *name;
        choice.how = "/proc/net/route: the route to " + dest + " uses " + *name;
        return result;
      }
    }
    last_error = "source address " + local_text + " belongs to no interface";
  }
  return {"no interface routes to '" + host + "': " + last_error};
}

InterfaceState interfaceState(const std::string& name) {
  InterfaceState st;
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) != 0) return st;
  for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
    if (name != i->ifa_name) continue;
    st.exists = true;
    st.up = (i->ifa_flags & IFF_UP) != 0;
    st.running = (i->ifa_flags & IFF_RUNNING) != 0;
    if (i->ifa_addr != nullptr && (i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6)) {
      st.addresses.push_back(addressText(i->ifa_addr));
    }
  }
  ::freeifaddrs(ifs);
  return st;
}

std::vector<std::string> interfaceNames() {
  std::vector<std::string> names;
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) != 0) return names;
  for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
    if (std::find(names.begin(), names.end(), i->ifa_name) == names.end()) names.push_back(i->ifa_name);
  }
  ::freeifaddrs(ifs);
  return names;
}

ConnectResult probeTcpConnect(const std::string& host, int port, std::chrono::milliseconds timeout) {
  ConnectResult result;
  AddrInfoList list;
  std::vector<const addrinfo*> ordered;
  if (int rc = lookup(host, SOCK_STREAM, list, ordered); rc != 0 || ordered.empty()) {
    result.outcome = ConnectOutcome::kResolveFailed;
    result.detail = "cannot resolve '" + host + "': " + (rc != 0 ? ::gai_strerror(rc) : "no address");
    return result;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  result.outcome = ConnectOutcome::kUnreachable;
  for (const addrinfo* ai : ordered) {
    const std::string where = addressText(ai->ai_addr) + ":" + std::to_string(port);
    Fd sock(::socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (sock.get() < 0) continue;
    sockaddr_storage target{};
    std::memcpy(&target, ai->ai_addr, ai->ai_addrlen);
    setPort(target, port);
    int err = 0;
    if (::connect(sock.get(), reinterpret_cast<sockaddr*>(&target), ai->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        pollfd pfd{sock.get(), POLLOUT, 0};
        int n = ::poll(&pfd, 1, static_cast<int>(std::max<long long>(0, left.count())));
        if (n == 0) {
          result.outcome = ConnectOutcome::kTimedOut;
          result.detail = where + ": no answer within " + std::to_string(timeout.count()) + " ms";
          continue;
        }
        socklen_t len = sizeof err;
        if (n < 0 || ::getsockopt(sock.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      }
    }
    if (err == 0) {
      result.outcome = ConnectOutcome::kAccepted;
      result.detail = where + " accepted a connection";
      return result;
    }
    if (err == ECONNREFUSED) {
      result.outcome = ConnectOutcome::kRefused;
      result.detail = where + ": connection refused (the host answered; nothing listens there)";
      return result;
    }
    if (err == ETIMEDOUT) {
      result.outcome = ConnectOutcome::kTimedOut;
      result.detail = where + ": " + std::strerror(err);
      continue;
    }
    if (result.outcome != ConnectOutcome::kTimedOut) {
      result.outcome = ConnectOutcome::kUnreachable;
      result.detail = where + ": " + std::strerror(err);
    }
  }
  return result;
}

Status tcpPortFree(int port) {
  Fd sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (sock.get() < 0) return {std::string("socket: ") + std::strerror(errno)};
  int one = 1;
  // The TCP store sets SO_REUSEADDR too, so a port in TIME_WAIT counts as free, as it is for the store.
  ::setsockopt(sock.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::bind(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return {std::strerror(errno)};
  return {};
}

}  // namespace taehv::sizing
