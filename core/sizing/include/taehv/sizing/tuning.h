// Communication tuning for the workers' environment: the collective timeout and NCCL_BUFFSIZE by node count, the
// socket interface that reaches the master (NCCL and Gloo), InfiniBand HCAs, NCCL_DEBUG.
//
// Contract: every value comes with its reason; a variable the user already set is kept as it is (and its reason
// says so, with what taehv-run would have chosen). Nothing here reads getenv(): the caller passes the environment.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "taehv/plugin_api.h"
#include "taehv/sizing/network.h"

namespace taehv::sizing {

/// Seconds the trainer waits in one collective before it gives up (c10d ProcessGroup timeout). The trainer reads it.
inline constexpr const char* kCollectiveTimeoutEnv = "TAEHV_COLLECTIVE_TIMEOUT_S";

/// Defaults for jobs of at least `min_nodes` nodes.
struct TuningTier {
  int min_nodes = 1;
  std::chrono::seconds collective_timeout{3600};
  std::uint64_t nccl_buffsize_bytes = 16ull << 20;
};

/// The platform scripts' tiers: 1 node 3600 s / 16 MiB; 2-7 nodes 7200 s / 16 MiB; 8+ nodes 14400 s / 32 MiB.
std::vector<TuningTier> defaultTuningTiers();

/// What the user configured (flags); each overrides the tiers for every node count.
struct TuningPolicy {
  std::vector<TuningTier> tiers = defaultTuningTiers();
  Sourced<std::chrono::seconds> collective_timeout;  ///< e.g. from "flag --collective-timeout"
  Sourced<std::uint64_t> nccl_buffsize_bytes;        ///< e.g. from "flag --nccl-buffsize"
};

/// Everything the tuning depends on.
struct TuningInput {
  int nnodes = 1;
  std::string master_addr;          ///< empty: not known yet, interfaces are not chosen
  bool use_gpus = false;            ///< NCCL variables are set only for GPU workers
  Env env;                          ///< the environment the workers inherit (the user's settings win)
  std::string sysfs_root = "/sys";  ///< /sys/class/infiniband is read below it (tests pass a fake tree)
  /// Finds the interface that routes to the master; interfaceForDestination by default.
  std::function<Checked<RouteChoice>(const std::string&)> find_interface;
};

/// The environment additions and what else is worth saying.
struct Tuning {
  std::map<std::string, Sourced<std::string>> env;  ///< variable -> value with its reason
  std::vector<std::string> notes;                   ///< e.g. "no InfiniBand HCA: NCCL uses TCP sockets"
};

Tuning computeTuning(const TuningInput& input, const TuningPolicy& policy = {});

/// "16M", "16MiB", "32 MB" (binary units: M = MiB), "4194304" -> bytes; nullopt on anything else or 0.
std::optional<std::uint64_t> parseByteSize(const std::string& text);

/// InfiniBand HCAs under <sysfs_root>/class/infiniband with at least one ACTIVE port, sorted; `inactive` gets the
/// others.
std::vector<std::string> activeInfinibandHcas(const std::string& sysfs_root, std::vector<std::string>* inactive);

}  // namespace taehv::sizing
