#include "taehv/ssh/fanout.h"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "taehv/shell_quote.h"

namespace taehv::ssh {

Status refusedFlags(const JobFlags& flags) {
  if (flags.node_rank) return {"--node-rank is set for every host by the ssh backend (hostfile order); remove it"};
  if (flags.standalone) {
    return {"--standalone means one machine; with --hostfile the ssh backend sets nodes and master itself"};
  }
  if (flags.restart_count) {
    return {"--restart-count is set for every host by the ssh backend (it restarts the whole job); remove it"};
  }
  return {};
}

std::string nnodesText(const JobFlags& flags) {
  if (!flags.nnodes) return "";
  const int min_nodes = flags.min_nnodes.value_or(*flags.nnodes);
  return min_nodes == *flags.nnodes ? std::to_string(min_nodes)
                                    : std::to_string(min_nodes) + ":" + std::to_string(*flags.nnodes);
}

int remoteGraceSeconds(std::optional<std::chrono::seconds> remote_grace,
                       std::optional<std::chrono::milliseconds> shutdown_grace) {
  if (remote_grace) return static_cast<int>(remote_grace->count());
  if (shutdown_grace) return static_cast<int>(std::chrono::ceil<std::chrono::seconds>(*shutdown_grace).count()) + 2;
  return kDefaultRemoteGraceSeconds;
}

JobShape shapeJob(const std::vector<HostEntry>& hosts, const JobFlags& flags, std::optional<int> nproc_per_node) {
  JobShape shape;
  shape.hosts = hosts;
  shape.min_nodes = static_cast<int>(hosts.size());
  if (flags.nnodes) {
    const std::string nnodes = nnodesText(flags);
    const int min_nodes = flags.min_nnodes.value_or(*flags.nnodes);
    const int n = std::min(*flags.nnodes, static_cast<int>(hosts.size()));
    shape.min_nodes = min_nodes;
    if (min_nodes > static_cast<int>(hosts.size())) {
      shape.error = "--nnodes " + nnodes + " but the hostfile has " + std::to_string(hosts.size()) +
                    " host(s) after --include/--exclude; add hosts or lower --nnodes";
      return shape;
    }
    if (min_nodes == *flags.nnodes) shape.min_nodes = n;
    if (n < static_cast<int>(hosts.size())) {
      shape.notes.push_back("--nnodes " + nnodes + ": using the first " + std::to_string(n) + " of " +
                            std::to_string(hosts.size()) + " hosts");
      shape.hosts.resize(static_cast<std::size_t>(n));
    }
  }
  if (nproc_per_node) {
    const int n = *nproc_per_node;
    for (auto& h : shape.hosts) {
      if (static_cast<int>(h.slots.size()) < n) {
        shape.error = "--nproc-per-node " + std::to_string(n) + " but host '" + h.host + "' has " +
                      std::to_string(h.slots.size()) + " slot(s); raise its slots= or lower --nproc-per-node";
        return shape;
      }
      h.slots.resize(static_cast<std::size_t>(n));
    }
    shape.nproc_per_node = n;
    shape.nprocs.assign(shape.hosts.size(), n);
    return shape;
  }
  // Slots decide, and hosts may differ (slots=2 and slots=1, or --include subsets): each host runs its own slots
  // and the remote taehv-runs agree on the rank offsets through their node group (node k's ranks start at the
  // slots of hosts 0..k-1).
  for (const auto& h : shape.hosts) shape.nprocs.push_back(static_cast<int>(h.slots.size()));
  const bool even = std::all_of(shape.nprocs.begin(), shape.nprocs.end(),
                                [&](int n) { return n == shape.nprocs.front(); });
  shape.nproc_per_node = even ? shape.nprocs.front() : 0;
  return shape;
}

std::vector<std::string> remoteTaehvArgs(int nnodes, int node_rank, int nproc_per_node, const std::string& master_addr,
                                         int master_port, const std::vector<std::string>& forwarded,
                                         const std::vector<std::string>& command) {
  std::vector<std::string> args = {"--backend",       "local",
                                   "--nnodes",        std::to_string(nnodes),
                                   "--node-rank",     std::to_string(node_rank),
                                   "--nproc-per-node", std::to_string(nproc_per_node),
                                   "--master-addr",   master_addr,
                                   "--master-port",   std::to_string(master_port)};
  args.insert(args.end(), forwarded.begin(), forwarded.end());
  if (!command.empty()) {
    args.push_back("--");
    args.insert(args.end(), command.begin(), command.end());
  }
  return args;
}

std::string remoteScript(const RemoteJob& job) {
  std::ostringstream s;
  const std::string cwd = shellQuote(job.cwd.empty() ? std::string("/") : job.cwd);
  s << "cd " << cwd << " || { echo \"taehv-run (ssh): cannot enter \"" << cwd << "\" on $(hostname)\" >&2; exit 126; }\n";
  std::vector<std::string> argv = {job.remote_bin};
  argv.insert(argv.end(), job.taehv_args.begin(), job.taehv_args.end());
  // fd 3 = ssh's stdin. An asynchronous list gets /dev/null as stdin unless redirected explicitly, so the
  // watchdog reads fd 3. The job's variables are exported in its own subshell only (the watchdog's processes
  // stay clean). setsid: taehv-run leads its own session and process group, and $! is its PGID, because a
  // background child of a non-interactive shell is never a group leader, so setsid does not fork.
  // `kill -SIG -PGID` (no `--`): dash's kill builtin rejects `--`.
  if (job.token_on_stdin) {
    // `read` takes exactly one line from a pipe (it reads byte by byte), leaving the rest to the watchdog.
    s << "IFS= read -r t || { echo \"taehv-run (ssh): no job token on stdin on $(hostname)\" >&2; exit 125; }\n";
  }
  s << "exec 3<&0\n"
    << "(\n";
  if (job.token_on_stdin) s << "TAEHV_JOB_TOKEN=$t; export TAEHV_JOB_TOKEN\n";
  for (const auto& [name, value] : job.env) {
    // Names were validated ([A-Za-z_][A-Za-z0-9_]*); values are quoted.
    s << "export " << name << "=" << shellQuote(value) << "\n";
  }
  s << "exec setsid " << shellJoin(argv) << " </dev/null 3<&-\n"
    << ") &\n"
    << "c=$!\n"
    << "{ while read -r _ <&3; do :; done; kill -TERM -$c; sleep " << job.grace_seconds
    << "; kill -KILL -$c; } >/dev/null 2>&1 &\n"
    << "w=$!\n"
    << "exec 3<&-\n"
    << "wait $c 2>/dev/null; s=$?\n"
    << "kill $w 2>/dev/null\n"
    << "exit $s\n";
  return s.str();
}

std::string remoteCommand(const std::string& script) { return "exec /bin/sh -c " + shellQuote(script); }

std::vector<std::string> sshArgv(const std::string& ssh, const std::vector<std::string>& ssh_opts,
                                 const std::string& host, const std::string& command) {
  std::vector<std::string> argv = {ssh};
  argv.insert(argv.end(), ssh_opts.begin(), ssh_opts.end());
  // -T: no pty (output stays byte-exact, the remote side sees no SIGHUP semantics we do not control);
  // BatchMode: never prompt (a prompt would hang a fan-out); keepalives: a vanished host ends its ssh client
  // within 15 s, which fails the job fast instead of hanging.
  const std::vector<std::string> defaults = {"-T", "-o", "BatchMode=yes", "-o", "ServerAliveInterval=5",
                                             "-o", "ServerAliveCountMax=3"};
  argv.insert(argv.end(), defaults.begin(), defaults.end());
  argv.push_back("--");
  argv.push_back(host);
  argv.push_back(command);
  return argv;
}

std::map<std::string, std::string> forwardedEnv(const std::map<std::string, std::string>& env) {
  std::map<std::string, std::string> out;
  for (const auto& [name, value] : env) {
    for (const auto& prefix : kForwardedPrefixes) {
      if (name.rfind(prefix, 0) == 0 && isShellName(name)) {
        out[name] = value;
        break;
      }
    }
  }
  return out;
}

Status parseEnvFile(const std::string& text, const std::string& origin, std::map<std::string, std::string>* out) {
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    std::size_t b = 0;
    while (b < line.size() && std::isspace(static_cast<unsigned char>(line[b]))) ++b;
    if (b == line.size() || line[b] == '#') continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) return {origin + ":" + std::to_string(line_no) + ": expected KEY=VALUE"};
    const std::string name = line.substr(b, eq - b);
    if (!isShellName(name)) {
      return {origin + ":" + std::to_string(line_no) + ": '" + name +
              "' is not a valid variable name (letters, digits, '_'; not starting with a digit)"};
    }
    (*out)[name] = line.substr(eq + 1);
  }
  return {};
}

Status parseEnvAssignment(const std::string& kv, std::map<std::string, std::string>* out) {
  const auto eq = kv.find('=');
  if (eq == std::string::npos) return {"--env '" + kv + "': expected NAME=VALUE"};
  const std::string name = kv.substr(0, eq);
  if (!isShellName(name)) {
    return {"--env: '" + name + "' is not a valid variable name (letters, digits, '_'; not starting with a digit)"};
  }
  (*out)[name] = kv.substr(eq + 1);
  return {};
}

}  // namespace taehv::ssh
