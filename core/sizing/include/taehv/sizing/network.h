// Network facts the tuning and the doctor need: name resolution, which interface routes to the master, whether an
// interface is up, whether a TCP port accepts or is free. Real sockets, no packets beyond a TCP connect.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "taehv/checked.h"

namespace taehv::sizing {

/// Addresses of `host` (numeric strings, IPv4 first), or the resolver's error (e.g. "Name or service not known").
using Resolution = Checked<std::vector<std::string>>;
Resolution resolveHost(const std::string& host);

/// The local interface whose route reaches a destination.
struct RouteChoice {
  std::string interface;      ///< e.g. "eth0", "ib0", "lo"
  std::string local_address;  ///< the source address the kernel picked
  std::string how;            ///< one line: how it was found
};

/// Asks the kernel: a UDP socket connect()ed to `host` (no packet is sent) gets the source address the route
/// uses; getifaddrs() maps that address to its interface. Falls back to /proc/net/route for IPv4. Fails when
/// `host` does not resolve or no interface routes to it.
Checked<RouteChoice> interfaceForDestination(const std::string& host);

/// Longest-prefix match of `ipv4` (dotted quad) in the text of /proc/net/route; nullopt when no route matches or
/// the text cannot be parsed. Exposed for tests with fabricated tables.
std::optional<std::string> routeInterfaceFromTable(const std::string& proc_net_route, const std::string& ipv4);

/// State of a network interface.
struct InterfaceState {
  bool exists = false;
  bool up = false;       ///< IFF_UP: administratively up
  bool running = false;  ///< IFF_RUNNING: carrier present
  std::vector<std::string> addresses;
};
InterfaceState interfaceState(const std::string& name);
/// Names of all interfaces, for "did you mean" messages.
std::vector<std::string> interfaceNames();

/// Result of trying to open a TCP connection.
enum class ConnectOutcome {
  kAccepted,       ///< something listens there
  kRefused,        ///< the host answered: nothing listens on that port (yet)
  kTimedOut,       ///< no answer within the timeout: filtered (firewall, security group) or the host is down
  kUnreachable,    ///< no route / network or host unreachable
  kResolveFailed,  ///< the name does not resolve
};
struct ConnectResult {
  ConnectOutcome outcome = ConnectOutcome::kResolveFailed;
  std::string detail;  ///< address tried and errno text
};
/// Connects to host:port with a deadline (non-blocking connect + poll), trying each resolved address.
ConnectResult probeTcpConnect(const std::string& host, int port, std::chrono::milliseconds timeout);

/// Whether this machine can listen on `port` on all interfaces now, with SO_REUSEADDR as rank 0's TCP store and node
/// 0's group listener do; fails with the bind error ("Address already in use").
Status tcpPortFree(int port);

}  // namespace taehv::sizing
