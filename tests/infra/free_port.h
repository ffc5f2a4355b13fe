// A TCP port for a test's listener, chosen below the kernel's ephemeral range (32768-60999): a port picked there (bind
// to port 0, read it, close) can be taken by any process's outgoing connection before the test's listener binds it,
// which failed K8sPods.TwoPodIndexedJobRendezvousWithWorkerPodFirst once under ctest -j2 (its master waited 60 s).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace taehv::testing {

/// The first port of 10200-11999 (a range no test names; others use 12000 and up) free on loopback now, tried from a
/// place set by the process id and a per-process counter, so parallel tests start apart. 0 when none is free.
inline int freeLowPort() {
  constexpr int kFirst = 10200, kCount = 1800;
  static std::atomic<int> calls{0};
  const int start = static_cast<int>((::getpid() * 37L + calls.fetch_add(1) * 2L) % kCount);
  for (int i = 0; i < kCount; ++i) {
    const int port = kFirst + (start + i) % kCount;
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(fd);
    if (free) return port;
  }
  return 0;
}

}  // namespace taehv::testing
