#include "taehv/sizing/tuning.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

#include "taehv/env.h"
#include "text.h"

namespace taehv::sizing {
namespace fs = std::filesystem;

namespace {

std::string mib(std::uint64_t bytes) {
  if (bytes % (1ull << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

std::string nodesText(int n) { return std::to_string(n) + " node" + (n == 1 ? "" : "s"); }

std::string tierRange(const std::vector<TuningTier>& tiers, std::size_t i) {
  const int lo = tiers[i].min_nodes;
  if (i + 1 == tiers.size()) return std::to_string(lo) + "+ nodes";
  const int hi = tiers[i + 1].min_nodes - 1;
  return lo == hi ? nodesText(lo) : std::to_string(lo) + "-" + std::to_string(hi) + " nodes";
}

// Sets `name` unless the user already did; either way the entry records why.
void put(Tuning& t, const Env& env, const std::string& name, const std::string& value, const std::string& reason) {
  if (const std::string* given = findEnv(env, name)) {
    t.env[name].set(*given, "set in your environment, kept (taehv-run would use " +
                                (value.empty() ? std::string("nothing") : value) + ": " + reason + ")");
    return;
  }
  t.env[name].set(value, reason);
}

std::string readFirstLine(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

std::vector<TuningTier> defaultTuningTiers() {
  return {{1, std::chrono::seconds(3600), 16ull << 20},
          {2, std::chrono::seconds(7200), 16ull << 20},
          {8, std::chrono::seconds(14400), 32ull << 20}};
}

std::optional<std::uint64_t> parseByteSize(const std::string& raw) {
  std::string t = trim(raw);
  const std::size_t digits = std::min(t.find_first_not_of("0123456789"), t.size());
  if (digits > 15) return std::nullopt;  // so that n * 1 GiB stays inside 64 bits
  const std::optional<std::uint64_t> count = parseCount<std::uint64_t>(std::string_view(t).substr(0, digits));
  if (!count) return std::nullopt;
  const std::uint64_t n = *count;
  std::string unit = trim(t.substr(digits));
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return std::tolower(c); });
  std::uint64_t scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  if (unit == "k" || unit == "kb" || unit == "kib") scale = 1ull << 10;
  if (unit == "m" || unit == "mb" || unit == "mib") scale = 1ull << 20;
  if (unit == "g" || unit == "gb" || unit == "gib") scale = 1ull << 30;
  if (scale == 0 || n == 0) return std::nullopt;
  return n * scale;
}

std::vector<std::string> activeInfinibandHcas(const std::string& sysfs_root, std::vector<std::string>* inactive) {
  std::vector<std::string> active;
  std::error_code ec;
  fs::path dir = fs::path(sysfs_root) / "class" / "infiniband";
  for (const auto& hca : fs::directory_iterator(dir, ec)) {
    const std::string name = hca.path().filename().string();
    bool any_active = false;
    for (const auto& port : fs::directory_iterator(hca.path() / "ports", ec)) {
      // The kernel writes e.g. "4: ACTIVE" into ports/N/state.
      if (readFirstLine(port.path() / "state").find("ACTIVE") != std::string::npos) any_active = true;
    }
    if (any_active) {
      active.push_back(name);
    } else if (inactive != nullptr) {
      inactive->push_back(name);
    }
  }
  std::sort(active.begin(), active.end());
  if (inactive != nullptr) std::sort(inactive->begin(), inactive->end());
  return active;
}

Tuning computeTuning(const TuningInput& in, const TuningPolicy& policy) {
  Tuning t;
  const Env& env = in.env;

  // Collective timeout and NCCL buffer: the tier for this node count, unless a flag says otherwise.
  std::vector<TuningTier> tiers = policy.tiers.empty() ? defaultTuningTiers() : policy.tiers;
  std::sort(tiers.begin(), tiers.end(),
            [](const TuningTier& a, const TuningTier& b) { return a.min_nodes < b.min_nodes; });
  std::size_t tier = 0;
  for (std::size_t i = 0; i < tiers.size(); ++i) {
    if (in.nnodes >= tiers[i].min_nodes) tier = i;
  }
  const std::string tier_reason = "default for " + tierRange(tiers, tier) + " (this job: " + nodesText(in.nnodes) + ")";

  if (policy.collective_timeout.has()) {
    put(t, env, kCollectiveTimeoutEnv, std::to_string(policy.collective_timeout.value->count()),
        policy.collective_timeout.source);
  } else {
    put(t, env, kCollectiveTimeoutEnv, std::to_string(tiers[tier].collective_timeout.count()),
        tier_reason + ": larger jobs wait longer for stragglers");
  }

  if (in.use_gpus) {
    if (policy.nccl_buffsize_bytes.has()) {
      put(t, env, "NCCL_BUFFSIZE", std::to_string(*policy.nccl_buffsize_bytes.value),
          policy.nccl_buffsize_bytes.source + " (" + mib(*policy.nccl_buffsize_bytes.value) + ")");
    } else {
      put(t, env, "NCCL_BUFFSIZE", std::to_string(tiers[tier].nccl_buffsize_bytes),
          tier_reason + ": " + mib(tiers[tier].nccl_buffsize_bytes) + " per channel");
    }
  }

  // Socket interfaces: the one whose route reaches the master, for NCCL's bootstrap/socket transport and Gloo.
  if (in.master_addr.empty()) {
    t.notes.push_back("master address not known: NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME left to the libraries");
  } else {
    const Checked<RouteChoice> found =
        in.find_interface ? in.find_interface(in.master_addr) : interfaceForDestination(in.master_addr);
    if (!found.ok()) {
      t.notes.push_back("no socket interface chosen: " + found.error);
    } else {
      const RouteChoice& route = found.value;
      if (route.interface == "lo" && in.nnodes > 1) {
        t.notes.push_back("MASTER_ADDR " + in.master_addr + " routes through loopback but the job has " +
                          nodesText(in.nnodes) + ": other nodes cannot reach it; use an address they can reach");
      }
      // NCCL: a leading '=' means exactly this interface, not every interface whose name starts with it.
      if (in.use_gpus) put(t, env, "NCCL_SOCKET_IFNAME", "=" + route.interface, route.how + " ('=' = exact name)");
      // Gloo takes plain interface names.
      put(t, env, "GLOO_SOCKET_IFNAME", route.interface, route.how);
    }
  }

  if (in.use_gpus) {
    std::vector<std::string> inactive;
    std::vector<std::string> hcas = activeInfinibandHcas(in.sysfs_root, &inactive);
    if (!inactive.empty()) {
      std::string names;
      for (const auto& n : inactive) names += (names.empty() ? "" : ",") + n;
      t.notes.push_back("InfiniBand HCAs without an ACTIVE port, not used: " + names);
    }
    if (!hcas.empty()) {
      std::string list;
      for (const auto& n : hcas) list += (list.empty() ? "" : ",") + n;
      put(t, env, "NCCL_IB_HCA", "=" + list,
          "HCAs with an ACTIVE port in " + (fs::path(in.sysfs_root) / "class/infiniband").string() +
              " ('=' = exact names)");
    } else if (const std::string* hca = findEnv(env, "NCCL_IB_HCA")) {
      t.env["NCCL_IB_HCA"].set(*hca, "set in your environment, kept (no ACTIVE HCA found here)");
    } else if (in.nnodes > 1) {
      t.notes.push_back("no active InfiniBand HCA under " + (fs::path(in.sysfs_root) / "class/infiniband").string() +
                        ": NCCL talks TCP sockets between nodes");
    }
    for (const char* name : {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS"}) {
      if (const std::string* given = findEnv(env, name)) {
        t.env[name].set(*given, "set in your environment, passed through");
      }
    }
  }
  return t;
}

}  // namespace taehv::sizing
