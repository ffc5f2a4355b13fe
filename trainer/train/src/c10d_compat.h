// The only place that knows how the c10d C++ API differs between libtorch 1.x and 2.x.
//  - 1.x (Debian's 1.13): ProcessGroupGloo/ProcessGroupNCCL derive from c10d::ProcessGroup; Options derive
//    from ProcessGroup::Options.
//  - 2.x: they derive from c10d::Backend (ProcessGroup became a dispatcher over backends); Options derive from
//    Backend::Options, which still holds `timeout`. (Autocast's 2.4 change is handled in
//    taehv/model/torch_compat.h.)
// Everything else used here has the same shape in 1.13 and in the 2.x headers read for this (2.0-era and
// recent main-branch c10d sources, e.g. with lazy Gloo init and the libuv TCPStore):
// TCPStore(host, TCPStoreOptions{port, isServer, numWorkers, waitWorkers, timeout}), PrefixStore(prefix, store),
// Work::isCompleted/wait, allreduce/broadcast(std::vector<at::Tensor>&, options),
// ProcessGroupGloo::Options::create(timeout) with `devices`/`threads`, createDeviceForInterface/Hostname and
// createDefaultDevice (2.x adds a defaulted lazyInit argument), ProcessGroupNCCL::Options::create() and
// ProcessGroupNCCL(store, rank, size, options). Only the 1.13 side is compiled and tested in this repository.
#pragma once

#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>

#if defined(TAEHV_WITH_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace taehv::train::compat {

#if TORCH_VERSION_MAJOR >= 2
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif
using BackendPtr = c10::intrusive_ptr<BackendBase>;

/// Gloo over TCP; the transport device is chosen like torchrun does (GLOO_SOCKET_IFNAME, else the
/// loopback address when the master is local, else the address this host's name resolves to).
inline BackendPtr makeGloo(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                           std::chrono::milliseconds timeout, const std::string& master_addr) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
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

}  // namespace taehv::train::compat
