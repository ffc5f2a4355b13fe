#include "taehv/sizing/doctor.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "taehv/env.h"
#include "text.h"

namespace taehv::sizing {
namespace fs = std::filesystem;

namespace {

CheckResult row(std::string name, CheckStatus status, std::string detail, std::string fix = {}) {
  return CheckResult{std::move(name), status, std::move(detail), std::move(fix)};
}

std::string joined(const std::vector<std::string>& items, const std::string& sep = ", ") {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : sep) + i;
  return out;
}

bool isLoopback(const std::string& address) {
  return startsWith(address, "127.") || address == "::1" || address == "localhost";
}

std::vector<std::string> localAddresses() {
  std::vector<std::string> out;
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) != 0) return out;
  for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
    if (i->ifa_name == nullptr) continue;
    InterfaceState st = interfaceState(i->ifa_name);
    for (const auto& a : st.addresses) {
      if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
    }
  }
  ::freeifaddrs(ifs);
  return out;
}

}  // namespace

std::string checkStatusName(CheckStatus status) {
  switch (status) {
    case CheckStatus::kPass:
      return "pass";
    case CheckStatus::kWarn:
      return "warn";
    case CheckStatus::kFail:
      return "fail";
    case CheckStatus::kSkip:
      return "skip";
  }
  return "fail";
}

CheckResult checkEnvironment(const std::vector<PluginFacts>& detected, const std::vector<std::string>& load_errors,
                             const std::string& chosen, const std::string& choose_error) {
  const std::string name = "environment";
  std::vector<std::string> seen;
  for (const auto& d : detected) {
    if (d.confidence > 0) seen.push_back(d.name + " (" + std::to_string(d.confidence) + ": " + d.reason + ")");
  }
  if (!choose_error.empty()) {
    return row(name, CheckStatus::kFail, choose_error,
               "name the platform with --backend NAME (or --backend local), or remove the variables that make "
               "several backends claim this environment");
  }
  std::string detail = chosen == "local" || chosen.empty()
                           ? "no platform recognised: manual/local mode (flags and PET_* variables)"
                           : "backend " + chosen;
  if (!seen.empty()) detail += "; detected: " + joined(seen, "; ");
  if (!load_errors.empty()) {
    return row(name, CheckStatus::kWarn, detail + "; plugins not loaded: " + joined(load_errors, "; "),
               "fix or remove the plugins named above (taehv-run plugins lists what loads)");
  }
  return row(name, CheckStatus::kPass, detail);
}

CheckResult checkDescriptor(const DescriptorFacts& f) {
  const std::string name = "descriptor";
  if (!f.error.empty()) {
    return row(name, CheckStatus::kFail, f.error,
               "give the missing or conflicting value as a flag (taehv-run "
               "describe shows each value and where it came from)");
  }
  if (!f.nnodes.has() || !f.node_rank.has() || !f.nproc_per_node.has() || !f.master_addr.has() ||
      !f.master_port.has()) {
    return row(name, CheckStatus::kFail, "the node plan is incomplete",
               "give --nnodes, --node-rank, --master-addr and --master-port");
  }
  const int nnodes = *f.nnodes.value;
  const int world = f.world_size.has() ? *f.world_size.value : nnodes * *f.nproc_per_node.value;
  const bool elastic = f.min_nnodes.has() && *f.min_nnodes.value < nnodes;
  const std::string nodes = elastic ? std::to_string(*f.min_nnodes.value) + ":" + std::to_string(nnodes) +
                                          " (elastic: world size below at MAX)"
                                    : std::to_string(nnodes);
  const std::string master = f.master_rule.empty() ? *f.master_addr.value + ":" + std::to_string(*f.master_port.value)
                                                   : f.master_rule + ", port " + std::to_string(*f.master_port.value);
  std::string detail = "node " + std::to_string(*f.node_rank.value) + " of " + nodes + ", " +
                       std::to_string(*f.nproc_per_node.value) + " workers on this node (world size " +
                       std::to_string(world) + "), master " + master;
  if (!f.master_rule.empty() && isLoopback(*f.master_addr.value)) {
    return row(name, CheckStatus::kWarn,
               detail + "; master_addr " + *f.master_addr.value + " (" + f.master_addr.source +
                   ") is not the master but picks the socket interfaces by its route: loopback, which other nodes "
                   "cannot reach",
               "give --master-addr an address the nodes reach each other through, or drop it (then the first etcd "
               "endpoint's host stands in)");
  }
  if (f.master_rule.empty() && nnodes > 1 && isLoopback(*f.master_addr.value)) {
    return row(name, CheckStatus::kFail,
               detail + ": a loopback master (" + f.master_addr.source + ") cannot be reached from other nodes",
               "set --master-addr to node 0's host name or an address the other nodes can reach");
  }
  std::vector<std::string> stale;
  for (const char* var : {"WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE"}) {
    const std::string* given = findEnv(f.env, var);
    if (given == nullptr) continue;
    int v = 0;
    bool bad = !parseTrimmedInt(*given, v) || (std::string(var) == "WORLD_SIZE" && v != world) ||
               (std::string(var) == "RANK" && (v < 0 || v >= world)) ||
               (std::string(var) == "LOCAL_WORLD_SIZE" && v != *f.nproc_per_node.value);
    if (bad) stale.push_back(std::string(var) + "=" + *given);
  }
  if (!stale.empty()) {
    return row(name, CheckStatus::kWarn,
               detail + "; the environment already holds " + joined(stale) +
                   ", which disagrees (left over from another launcher?)",
               "unset " + joined(stale, " ") + " (taehv-run sets them for each worker)");
  }
  return row(name, CheckStatus::kPass, detail);
}

CheckResult checkMasterReachable(const std::string& addr, int port, bool this_node_is_master,
                                 std::chrono::milliseconds timeout) {
  const std::string name = "master reachable";
  Resolution r = resolveHost(addr);
  if (!r.ok()) {
    return row(name, CheckStatus::kFail, "master '" + addr + "' does not resolve: " + r.error,
               "check the name (DNS, /etc/hosts; on Kubernetes the headless Service of the job), or give "
               "--master-addr as an IP address");
  }
  const std::string resolved = addr + " -> " + joined(r.value);
  if (this_node_is_master) {
    std::vector<std::string> mine = localAddresses();
    for (const auto& a : r.value) {
      if (std::find(mine.begin(), mine.end(), a) != mine.end()) {
        return row(name, CheckStatus::kPass, resolved + ", an address of this node (node 0 hosts the master)");
      }
    }
    return row(name, CheckStatus::kFail,
               resolved +
                   ", but none of these is an address of this node, which is node 0 and must host the "
                   "master (this node: " +
                   joined(mine) + ")",
               "set --master-addr to this node's name or address, or correct --node-rank");
  }
  ConnectResult c = probeTcpConnect(addr, port, timeout);
  switch (c.outcome) {
    case ConnectOutcome::kAccepted:
      return row(name, CheckStatus::kPass, resolved + "; " + c.detail);
    case ConnectOutcome::kRefused:
      return row(name, CheckStatus::kWarn, resolved + "; " + c.detail,
                 "fine before node 0 starts; if the job is running, node 0 listens on another port: check "
                 "--master-port on both nodes");
    case ConnectOutcome::kTimedOut:
      return row(name, CheckStatus::kFail, resolved + "; " + c.detail,
                 "packets to port " + std::to_string(port) +
                     " are dropped: open it between the nodes (firewall, security group, network policy)");
    case ConnectOutcome::kUnreachable:
      return row(name, CheckStatus::kFail, resolved + "; " + c.detail,
                 "no route to the master: check this node's network and that MASTER_ADDR is node 0's address");
    case ConnectOutcome::kResolveFailed:
      break;
  }
  return row(name, CheckStatus::kFail, c.detail, "check the master's name");
}

CheckResult checkMasterPortFree(int port) {
  const std::string name = "master port free";
  const Status free = tcpPortFree(port);
  if (free.ok()) return row(name, CheckStatus::kPass, "port " + std::to_string(port) + " can be bound on this node");
  return row(
      name, CheckStatus::kFail, "port " + std::to_string(port) + " cannot be bound: " + free.error,
      "stop what holds it (ss -ltnp 'sport = :" + std::to_string(port) + "' shows it) or choose another --master-port");
}

CheckResult checkGpus(const GpuInventory& inventory, const VisibleGpus& visible, const NprocDecision& decision) {
  const std::string name = "GPUs vs workers";
  if (!decision.ok()) {
    return row(name, CheckStatus::kFail, decision.error,
               "run as many workers per node as it has GPUs; --nnodes counts nodes, --nproc-per-node workers per "
               "node");
  }
  std::string detail = std::to_string(visible.gpus.size()) + " GPU(s) visible (" + visible.source + "); " +
                       std::to_string(decision.nproc_per_node.value.value_or(0)) +
                       " worker(s): " + decision.nproc_per_node.source;
  std::vector<std::string> names;
  for (const auto& g : visible.gpus) {
    names.push_back(g.device_token + ":" + (g.name.empty() ? "?" : g.name) +
                    (g.memory_bytes > 0 ? " " + formatBytes(g.memory_bytes) : std::string()));
  }
  if (!names.empty()) detail += "; " + joined(names);
  std::vector<std::string> warnings = visible.warnings;
  warnings.insert(warnings.end(), decision.notes.begin(), decision.notes.end());
  if (!inventory.error.empty()) warnings.push_back(inventory.error);
  if (!warnings.empty()) {
    return row(name, CheckStatus::kWarn, detail + "; " + joined(warnings, "; "),
               "check CUDA_VISIBLE_DEVICES and the NVIDIA driver (nvidia-smi) on this node");
  }
  if (visible.gpus.empty() && !inventory.notes.empty()) detail += "; " + joined(inventory.notes, "; ");
  return row(name, CheckStatus::kPass, detail);
}

CheckResult checkNccl(const NcclProbe& probe, bool use_gpus) {
  const std::string name = "NCCL";
  if (probe.found) {
    return row(
        name, CheckStatus::kPass,
        "NCCL " + probe.version + " (" + probe.library + ")" + (use_gpus ? "" : "; not needed: CPU workers use Gloo"));
  }
  const std::string tried = joined(probe.notes, "; ");
  if (!use_gpus) return row(name, CheckStatus::kSkip, "not found, not needed: CPU workers use Gloo (" + tried + ")");
  return row(name, CheckStatus::kFail, "GPU workers need NCCL, not found: " + tried,
             "install NCCL 2 (libnccl2) or add its folder to LD_LIBRARY_PATH (or set TAEHV_NCCL_LIBRARY to the "
             "file)");
}

CheckResult checkInterface(const std::string& variable, const std::string& value,
                           const std::function<InterfaceState(const std::string&)>& lookup,
                           const std::function<std::vector<std::string>()>& all_names) {
  const std::string name = "interface " + variable;
  if (value.empty()) return row(name, CheckStatus::kSkip, variable + " not set: the library picks an interface");
  if (startsWith(value, "^")) {
    return row(name, CheckStatus::kSkip, variable + "=" + value + " excludes interfaces; nothing to check");
  }
  const bool nccl = startsWith(variable, "NCCL");
  const bool exact = !nccl || startsWith(value, "=");
  const std::string list = startsWith(value, "=") ? value.substr(1) : value;
  const std::vector<std::string> names = all_names();
  std::vector<std::string> missing, down, good, no_carrier;
  for (const std::string& raw : split(list, ',')) {
    const std::string want = trim(raw);
    if (want.empty()) continue;
    std::vector<std::string> matches;
    if (exact) {
      if (lookup(want).exists) matches.push_back(want);
    } else {
      for (const auto& n : names) {
        if (startsWith(n, want)) matches.push_back(n);
      }
    }
    if (matches.empty()) missing.push_back(want);
    for (const auto& m : matches) {
      InterfaceState st = lookup(m);
      if (!st.up) {
        down.push_back(m);
      } else if (!st.running) {
        no_carrier.push_back(m);
      } else {
        good.push_back(m + (st.addresses.empty() ? "" : " (" + joined(st.addresses) + ")"));
      }
    }
  }
  const std::string shown = variable + "=" + value;
  if (good.empty()) {
    std::string detail = shown + ":";
    if (!missing.empty()) detail += " no interface " + joined(missing) + " on this node (it has " + joined(names) + ")";
    if (!down.empty()) detail += " " + joined(down) + " is down";
    if (!no_carrier.empty()) detail += " " + joined(no_carrier) + " has no carrier";
    std::string fix = !down.empty() ? "bring it up (ip link set " + down.front() + " up) or use another interface"
                                    : "set " + variable +
                                          " to an interface of this node, or unset it and let "
                                          "taehv-run pick the one that routes to the master";
    return row(name, CheckStatus::kFail, detail, fix);
  }
  if (!missing.empty() || !down.empty()) {
    return row(name, CheckStatus::kWarn,
               shown + ": usable " + joined(good) + "; missing or down: " + joined(missing) +
                   (missing.empty() || down.empty() ? "" : ", ") + joined(down),
               "remove the names this node lacks from " + variable);
  }
  return row(name, CheckStatus::kPass, shown + ": " + joined(good) + " up");
}

CheckResult checkOutputDir(const std::string& dir) {
  const std::string name = "output directory";
  if (dir.empty()) return row(name, CheckStatus::kSkip, "no output directory given");
  std::error_code ec;
  fs::path p(dir);
  if (fs::exists(p, ec)) {
    if (!fs::is_directory(p, ec)) {
      return row(name, CheckStatus::kFail, dir + " exists and is not a directory",
                 "remove or rename it, or point output.dir elsewhere");
    }
    std::string probe = (p / ".taehv-doctor-XXXXXX").string();
    std::vector<char> buf(probe.begin(), probe.end());
    buf.push_back('\0');
    int fd = ::mkstemp(buf.data());
    if (fd < 0) {
      return row(name, CheckStatus::kFail, "cannot create a file in " + dir + ": " + std::strerror(errno),
                 "make it writable for this user (chmod/chown) or point output.dir elsewhere");
    }
    ::close(fd);
    ::unlink(buf.data());
    return row(name, CheckStatus::kPass, dir + " is a writable directory");
  }
  fs::path parent = p.has_parent_path() ? p.parent_path() : fs::path(".");
  while (!parent.empty() && !fs::exists(parent, ec)) {
    if (parent == parent.parent_path()) break;
    parent = parent.parent_path();
  }
  if (parent.empty()) parent = ".";
  if (!fs::is_directory(parent, ec)) {
    return row(name, CheckStatus::kFail, dir + " cannot be created: " + parent.string() + " is not a directory",
               "point output.dir at a path under a directory");
  }
  if (::access(parent.c_str(), W_OK | X_OK) != 0) {
    return row(name, CheckStatus::kFail,
               dir + " cannot be created: " + parent.string() + " is not writable (" + std::strerror(errno) + ")",
               "create it with the right owner, or point output.dir elsewhere");
  }
  return row(name, CheckStatus::kPass, dir + " does not exist yet; it can be created under " + parent.string());
}

CheckResult checkDataPath(const std::string& source) {
  const std::string name = "data path";
  if (source.empty() || source == "synthetic") {
    return row(name, CheckStatus::kPass, "built-in synthetic video (needs no files)");
  }
  std::error_code ec;
  fs::path p(source);
  if (!fs::exists(p, ec)) {
    return row(name, CheckStatus::kFail, source + " does not exist on this node",
               "mount or copy the data here (every node reads it), or set data.source");
  }
  if (fs::is_directory(p, ec)) {
    if (fs::directory_iterator(p, ec) == fs::directory_iterator()) {
      return row(name, CheckStatus::kFail, source + " is an empty directory",
                 "point data.source at the folder holding the videos or frame folders");
    }
    return row(name, CheckStatus::kPass, source + " is a directory");
  }
  if (::access(source.c_str(), R_OK) != 0) {
    return row(name, CheckStatus::kFail, source + " is not readable: " + std::strerror(errno),
               "make it readable for this user");
  }
  return row(name, CheckStatus::kPass, source + " is a readable file");
}

std::vector<CheckResult> runDoctorChecks(const DoctorInputs& in) {
  std::vector<CheckResult> out;
  out.push_back(checkEnvironment(in.detected, in.plugin_load_errors, in.backend, in.backend_error));
  out.push_back(checkDescriptor(in.descriptor));
  const DescriptorFacts& d = in.descriptor;
  if (d.error.empty() && !d.master_rule.empty() && d.master_port.has()) {
    // Any node may be the next formation's master: each needs the port free; whom to reach is not known yet.
    out.push_back(row("master reachable", CheckStatus::kSkip,
                      "the master is " + d.master_rule + ": not known before the node group forms"));
    out.push_back(checkMasterPortFree(*d.master_port.value));
  } else if (d.error.empty() && d.master_addr.has() && d.master_port.has() && d.node_rank.has()) {
    const bool master_node = *d.node_rank.value == 0;
    out.push_back(checkMasterReachable(*d.master_addr.value, *d.master_port.value, master_node, in.connect_timeout));
    if (master_node) out.push_back(checkMasterPortFree(*d.master_port.value));
  } else {
    out.push_back(row("master reachable", CheckStatus::kSkip, "no master: the descriptor did not resolve"));
  }
  out.push_back(checkGpus(in.inventory, in.visible, in.nproc));
  out.push_back(checkNccl(in.nccl, in.nproc.use_gpus));
  for (const char* var : {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}) {
    auto it = in.tuning.env.find(var);
    if (it != in.tuning.env.end() && it->second.has()) {
      out.push_back(checkInterface(var, *it->second.value));
    } else if (std::string(var) == "GLOO_SOCKET_IFNAME") {
      std::string why = in.tuning.notes.empty() ? "not chosen" : in.tuning.notes.front();
      out.push_back(row("interface", CheckStatus::kSkip, why));
    }
  }
  out.push_back(checkOutputDir(in.output_dir));
  out.push_back(checkDataPath(in.data_path));
  return out;
}

std::string renderDoctorTable(const std::vector<CheckResult>& results) {
  std::size_t width = 5;
  for (const auto& r : results) width = std::max(width, r.name.size());
  auto pad = [&](const std::string& s) { return s + std::string(width - std::min(width, s.size()) + 2, ' '); };
  std::string out = pad("CHECK") + "RESULT  DETAIL\n";
  int counts[4] = {0, 0, 0, 0};
  for (const auto& r : results) {
    ++counts[static_cast<int>(r.status)];
    out += pad(r.name) + checkStatusName(r.status) + "    " + r.detail + "\n";
    if (!r.fix.empty() && (r.status == CheckStatus::kFail || r.status == CheckStatus::kWarn)) {
      out += std::string(width + 2, ' ') + "fix:    " + r.fix + "\n";
    }
  }
  out += std::to_string(counts[0]) + " passed, " + std::to_string(counts[1]) + " warnings, " +
         std::to_string(counts[2]) + " failed, " + std::to_string(counts[3]) + " skipped\n";
  return out;
}

int doctorExitCode(const std::vector<CheckResult>& results) {
  for (const auto& r : results) {
    if (r.status == CheckStatus::kFail) return 1;
  }
  return 0;
}

}  // namespace taehv::sizing
