// Makes the c10d objects taehv-train trains with: the TCPStore rendezvous and a Gloo or NCCL backend
// (c10d::Backend, libtorch 2.x: ProcessGroup is a dispatcher over backends, and collectives are called on the
// backend directly). Kept apart so that dist.cc reads as training logic and c10d's constructors sit in one place.
#pragma once

#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#if defined(TAEHV_WITH_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace taehv::train::backends {

using BackendPtr = c10::intrusive_ptr<c10d::Backend>;

/// Gloo over TCP; the transport device is chosen like torchrun does (`ifname`, GLOO_SOCKET_IFNAME, else the
/// loopback address when the master is local, else the address this host's name resolves to).
inline BackendPtr makeGloo(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                           std::chrono::milliseconds timeout, const std::string& master_addr,
                           const std::string& ifname) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  if (!ifname.empty()) {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  } else if (master_addr == "localhost" || master_addr.rfind("127.", 0) == 0 || master_addr == "::1") {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  } else {
    options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  }
  options->threads = 2;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
}

#if defined(TAEHV_WITH_NCCL)
inline BackendPtr makeNccl(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                           std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
}
#endif

inline c10::intrusive_ptr<c10d::Store> makeTcpStore(const std::string& host, int port, bool is_server, int workers,
                                                    std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = is_server;
  if (is_server) options.numWorkers = static_cast<std::size_t>(workers);
  options.waitWorkers = false;
  options.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(host, options);
}

}  // namespace taehv::train::backends
