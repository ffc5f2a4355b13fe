// The ssh backend: `taehv-run --backend ssh --hostfile FILE [options] [-- command]` starts taehv-run on every
// host of a DeepSpeed-style hostfile at once over the system OpenSSH client, streams their output back
// prefixed "[host:node]", and takes every host down when one fails, on Ctrl-C, or when this launcher dies.
//
// Flow: hostfile -> --include/--exclude -> job shape (nodes x processes) -> environment to forward ->
// preflight (all hosts in parallel, one deadline; any failure names the host and starts nothing) ->
// one ssh client per host under taehv::process::supervise() (fail fast, signal forwarding). Each ssh client's
// stdin is a pipe held by the supervisor; the remote wrapper (fanout.h remoteScript) kills its process group
// when that pipe reaches EOF, so even `kill -9` of this launcher leaves nothing behind on any host.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <fstream>
#include <sstream>

#include "taehv/group/job_token.h"
#include "taehv/group/node_group.h"
#include "taehv/parse.h"
#include "taehv/plugin_api.h"
#include "taehv/process/supervisor.h"
#include "taehv/ssh/command_runner.h"
#include "taehv/ssh/fanout.h"
#include "taehv/ssh/hostfile.h"
#include "taehv/ssh/preflight.h"
#include "taehv/ssh/shell_words.h"

namespace taehv::ssh {
namespace {

constexpr int kDefaultPreflightSeconds = 15;
constexpr int kDefaultRemoteGraceSeconds = 10;
/// The largest --preflight-timeout / --remote-grace taken (five digits).
constexpr long long kMaxOptionSeconds = 99999;
/// The largest --max-restarts taken.
constexpr int kMaxRestarts = 1000000;
/// Local SIGTERM -> SIGKILL delay for the ssh clients (they exit on SIGTERM at once; the remote grace is
/// applied on the hosts by the wrapper).
constexpr std::chrono::milliseconds kClientShutdownGrace{std::chrono::seconds(5)};
/// Exit code for a job that never started (bad input, failed preflight).
constexpr int kNotStarted = 2;
/// An ssh connection master lives this long after its last session (also after `kill -9` of the launcher).
constexpr int kMuxPersistSeconds = 5;
/// The most hosts the fan-out has been run with for a whole job (bench/ssh: 16 hosts on real sshd); beyond it
/// a warning says so. The preflight alone is tested with hundreds (HostileSshScale, a fake ssh).
constexpr std::size_t kTestedHosts = 16;
/// The most hosts taken at all: the job runs one ssh client per host on this host for its whole length (three
/// pipes each, a few MiB each), and the supervisor's guardian tracks at most 4096 process groups. Larger jobs
/// belong to a scheduler (the SLURM backend).
constexpr std::size_t kMaxHosts = 4096;
/// Descriptors per ssh client of the job (stdin, stdout, stderr pipes) and what the launcher needs besides.
constexpr rlim_t kFdsPerHost = 3;
constexpr rlim_t kFdsSpare = 64;
/// At most this many hosts are named one line each when the preflight fails; the rest are counted.
constexpr int kMaxHostErrorLines = 20;

/// Names of the ssh control sockets of one launch: /tmp/taehv-ssh-<64 random bits>-<node>. No folder, so that
/// nothing is left even after `kill -9` of the launcher (each master removes its socket when it exits). ssh
/// creates the socket owner-only and refuses an existing path; the random part makes the name unguessable.
class ControlSockets {
 public:
  ControlSockets() {
    std::random_device random;
    char buf[17];
    std::snprintf(buf, sizeof buf, "%08x%08x", random(), random());
    prefix_ = std::string("/tmp/taehv-ssh-") + buf + "-";
  }
  ~ControlSockets() {
    for (int node : used_) ::unlink(path(node).c_str());
  }
  ControlSockets(const ControlSockets&) = delete;
  ControlSockets& operator=(const ControlSockets&) = delete;

  /// "ControlPath=..." for node `node`.
  std::string option(int node) {
    used_.insert(node);
    return "ControlPath=" + path(node);
  }

 private:
  std::string path(int node) const { return prefix_ + std::to_string(node); }
  std::string prefix_;
  std::set<int> used_;
};

using Options = std::map<std::string, std::vector<std::string>>;

std::string lastOption(const Options& options, const std::string& name) {
  const auto it = options.find(name);
  if (it == options.end() || it->second.empty()) return {};
  return it->second.back();
}

bool readFile(const std::string& path, std::string* text, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot read " + path + ": " + std::strerror(errno);
    return false;
  }
  std::ostringstream s;
  s << in.rdbuf();
  *text = s.str();
  return true;
}

std::string currentDirectory() {
  char buf[PATH_MAX];
  return ::getcwd(buf, sizeof buf) ? std::string(buf) : std::string();
}

/// The job's hosts and shape from --hostfile, --include/--exclude, `nproc` and `nnodes` (flag texts, empty =
/// unset), or why there are none.
std::string loadJobShape(const Options& opts, const std::string& nproc, const std::string& nnodes, JobShape* shape) {
  const std::string hostfile = lastOption(opts, "hostfile");
  if (hostfile.empty()) return "--hostfile needs a file name";
  std::string text;
  std::string error;
  if (!readFile(hostfile, &text, &error)) return error;
  HostsResult parsed = parseHostfile(text, hostfile);
  if (!parsed.ok()) return parsed.error;
  HostsResult filtered = filterHosts(parsed.value, lastOption(opts, "include"), lastOption(opts, "exclude"));
  if (!filtered.ok()) return filtered.error;
  *shape = shapeJob(filtered.value, nnodes, nproc);
  return shape->error;
}

/// "" when the fan-out can take `hosts` hosts (warning beyond kTestedHosts); else why not. Raises the soft limit
/// on open files to the hard one when the job's ssh clients need more descriptors than the soft one allows.
template <typename Log>
std::string checkHostCount(std::size_t hosts, const Log& log) {
  if (hosts > kMaxHosts) {
    return std::to_string(hosts) + " hosts: the ssh backend starts one ssh client per host on this host for the "
           "whole job and takes at most " + std::to_string(kMaxHosts) +
           "; use --nnodes N or --include to run fewer, or a scheduler (--backend slurm) for a job this large";
  }
  if (hosts > kTestedHosts) {
    log(LogLevel::kWarn, std::to_string(hosts) + " hosts: the ssh backend has been tested with up to " +
                             std::to_string(kTestedHosts) + " hosts for a whole job; this host runs " +
                             std::to_string(hosts) + " ssh clients until the job ends");
  }
  const rlim_t needed = static_cast<rlim_t>(hosts) * kFdsPerHost + kFdsSpare;
  struct rlimit files {};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY && files.rlim_cur < needed) {
    if (files.rlim_max == RLIM_INFINITY || files.rlim_max >= needed) {
      files.rlim_cur = needed;
      if (::setrlimit(RLIMIT_NOFILE, &files) == 0) return "";
    }
    return std::to_string(hosts) + " hosts need about " + std::to_string(needed) +
           " open files here (three pipes per ssh client) but the limit is " + std::to_string(files.rlim_cur) +
           " (hard limit " + (files.rlim_max == RLIM_INFINITY ? std::string("unlimited") : std::to_string(files.rlim_max)) +
           "); raise it (ulimit -n) or run fewer hosts";
  }
  return "";
}

class SshBackend final : public Backend {
 public:
  Detection detect(const HostContext&) const override {
    return {0, "the ssh backend is chosen with --backend ssh --hostfile FILE"};
  }

  /// Without --hostfile: why the backend cannot plan. With one (describe, doctor): node 0's share of the job the
  /// fan-out would start, from the same hostfile, --include/--exclude and --nproc-per-node.
  PlanResult plan(const HostContext&, const PlanRequest& request) const override {
    PlanResult result;
    const std::string hostfile = lastOption(request.options, "hostfile");
    if (hostfile.empty()) {
      result.error = "the ssh backend starts whole jobs from one host: pass --hostfile FILE (lines 'HOST slots=N')";
      return result;
    }
    const std::string nproc = request.nproc_per_node ? std::to_string(*request.nproc_per_node) : std::string();
    JobShape shape;
    if (std::string error = loadJobShape(request.options, nproc, "", &shape); !error.empty()) {
      result.error = error;
      return result;
    }
    NodePlan& plan = result.value;
    const std::string from = "hostfile " + hostfile;
    plan.nnodes.set(static_cast<int>(shape.hosts.size()), from + " (" + std::to_string(shape.hosts.size()) + " hosts)");
    plan.node_rank.set(0, "rule: shown is node 0, the first host; the fan-out starts every host");
    plan.nproc_per_node.set(shape.nprocs.front(), from + " (slots of the first host)");
    plan.node_nprocs.set(shape.nprocs, from + " (slots per host)");
    plan.master_addr.set(shape.hosts.front().host,
                         "rule: the first host of " + hostfile + " (the launch uses its first `hostname -I` address)");
    plan.notes = shape.notes;
    plan.notes.push_back("the ssh backend starts taehv-run on every host of " + hostfile +
                         " over ssh; each host's plan differs only in node_rank");
    return result;
  }

  std::vector<OptionSpec> options() const override {
    return {
        {"hostfile", "FILE", "hosts of the job, one 'HOST slots=N' per line (DeepSpeed format); node ranks in file order",
         false},
        {"include", "SPEC", "use only these hosts/slots: HOST[:SLOT,...][@HOST...] (DeepSpeed syntax)", false},
        {"exclude", "SPEC", "leave out these hosts/slots: HOST[:SLOT,...][@HOST...]", false},
        {"remote-bin", "PATH", "taehv-run on the hosts (default: the same absolute path as this one)", false},
        {"remote-cwd", "DIR", "working directory on the hosts (default: the current one)", false},
        {"ssh-opts", "OPTS", "extra options for ssh, e.g. \"-p 2222 -F ~/.ssh/cluster_config\"", true},
        {"env", "NAME=VALUE", "set this variable for the job on every host (repeatable)", true},
        {"preflight-timeout", "SECONDS",
         "deadline for checking all hosts before starting, for the whole check, not per host (default 15)", false},
        {"ssh-parallel", "N",
         "at most N ssh clients at once while checking the hosts (default " + std::to_string(kDefaultSshParallel) +
             ", at most " + std::to_string(kMaxSshParallel) + ")",
         false},
        {"remote-grace", "SECONDS",
         "on teardown, SIGTERM -> SIGKILL delay on the hosts (default: --shutdown-grace + 2 if given, else 10)",
         false},
    };
  }

  bool takesOverLaunch(const HostContext&, const PlanRequest& request) const override {
    return request.options.count("hostfile") > 0;
  }

  int launch(const HostContext& host, const JobRequest& job) override {
    const auto log = [&](LogLevel level, const std::string& message) {
      if (host.log) host.log(level, message);
    };
    const auto fail = [&](const std::string& message) {
      log(LogLevel::kError, message);
      return kNotStarted;
    };
    const Options& opts = job.request.options;

    // Hosts, shape and the options the fan-out sets itself.
    const LauncherArgs args = splitLauncherArgs(job.launcher_args);
    if (!args.error.empty()) return fail(args.error);
    const std::string nproc = !args.nproc_per_node.empty() ? args.nproc_per_node
                              : job.request.nproc_per_node ? std::to_string(*job.request.nproc_per_node)
                                                           : std::string();
    JobShape shape;
    std::string error;
    if (error = loadJobShape(opts, nproc, args.nnodes, &shape); !error.empty()) return fail(error);
    for (const auto& note : shape.notes) log(LogLevel::kInfo, note);
    if (const std::string why = checkHostCount(shape.hosts.size(), log); !why.empty()) return fail(why);
    if (shape.nproc_per_node == 0 &&
        std::find(args.forwarded.begin(), args.forwarded.end(), "--no-node-group") != args.forwarded.end()) {
      return fail("hosts run different numbers of processes (" + formatCounts(shape.nprocs) +
                  "), which the hosts' node group lays out into ranks; drop --no-node-group, or make the slots "
                  "equal (slots=, --include HOST:0,1@HOST2:0,1, or --nproc-per-node N)");
    }
    // Restarts are the whole job's: after a failure every host is torn down and started again (a host restarting
    // its workers alone would rendezvous with nobody while the others hang in their collectives).
    int max_restarts = 0;
    if (!args.max_restarts.empty()) {
      const std::optional<int> v = parseInt(args.max_restarts, 0, kMaxRestarts);
      if (!v) return fail("--max-restarts '" + args.max_restarts + "' is not a whole number >= 0");
      max_restarts = *v;
    }
    int master_port = kDefaultMasterPort;
    if (!args.master_port.empty()) {
      const std::optional<int> port = parsePort(args.master_port);
      if (!port) return fail("--master-port '" + args.master_port + "' is not a port number (1-65535)");
      master_port = *port;
    }

    // Remote side.
    const std::string remote_bin = opts.count("remote-bin") ? lastOption(opts, "remote-bin") : host.self_path;
    if (remote_bin.empty() || remote_bin[0] != '/') {
      return fail("--remote-bin must be an absolute path, got '" + remote_bin + "'");
    }
    const std::string cwd = opts.count("remote-cwd") ? lastOption(opts, "remote-cwd") : currentDirectory();
    if (cwd.empty() || cwd[0] != '/') return fail("--remote-cwd must be an absolute path, got '" + cwd + "'");
    std::vector<std::string> ssh_opts;
    if (const auto it = opts.find("ssh-opts"); it != opts.end()) {
      for (const auto& o : it->second) {
        SplitResult words = splitWords(o);
        if (!words.error.empty()) return fail("--ssh-opts: " + words.error);
        ssh_opts.insert(ssh_opts.end(), words.value.begin(), words.value.end());
      }
    }
    int preflight_seconds = kDefaultPreflightSeconds;
    if (opts.count("preflight-timeout")) {
      const auto seconds = parseSeconds(lastOption(opts, "preflight-timeout"), 1, kMaxOptionSeconds);
      if (!seconds) return fail("--preflight-timeout must be a whole number of seconds > 0");
      preflight_seconds = static_cast<int>(seconds->count());
    }
    std::size_t ssh_parallel = kDefaultSshParallel;
    if (opts.count("ssh-parallel")) {
      const auto n = parseCount<std::size_t>(lastOption(opts, "ssh-parallel"), 1, kMaxSshParallel);
      if (!n) {
        return fail("--ssh-parallel '" + lastOption(opts, "ssh-parallel") + "' must be a whole number from 1 to " +
                    std::to_string(kMaxSshParallel));
      }
      ssh_parallel = *n;
    }
    int grace_seconds = kDefaultRemoteGraceSeconds;
    if (opts.count("remote-grace")) {
      const auto seconds = parseSeconds(lastOption(opts, "remote-grace"), 1, kMaxOptionSeconds);
      if (!seconds) return fail("--remote-grace must be a whole number of seconds > 0");
      grace_seconds = static_cast<int>(seconds->count());
    } else if (!args.shutdown_grace.empty()) {
      // Give the remote taehv-run its whole --shutdown-grace to stop its workers before SIGKILL reaches it.
      char* end = nullptr;
      const double g = std::strtod(args.shutdown_grace.c_str(), &end);
      if (end && *end == '\0' && g >= 0 && g <= 86400) grace_seconds = static_cast<int>(std::ceil(g)) + 2;
    }

    // Environment: NCCL_* GLOO_* TAEHV_* TORCH_* < ~/.taehv_env < ./.taehv_env < --env.
    std::map<std::string, std::string> env = forwardedEnv(host.env);
    std::vector<std::string> env_files;
    if (const auto home = host.env.find("HOME"); home != host.env.end() && !home->second.empty()) {
      env_files.push_back(home->second + "/.taehv_env");
    }
    const std::string here = currentDirectory();
    if (!here.empty() && (env_files.empty() || here + "/.taehv_env" != env_files[0])) {
      env_files.push_back(here + "/.taehv_env");
    }
    for (const auto& file : env_files) {
      std::string content;
      std::string ignored;
      if (::access(file.c_str(), F_OK) != 0) continue;
      if (!readFile(file, &content, &error)) return fail(error);
      if (const std::string why = parseEnvFile(content, file, &env); !why.empty()) return fail(why);
      log(LogLevel::kDebug, "forwarding the variables of " + file);
    }
    if (const auto it = opts.find("env"); it != opts.end()) {
      for (const auto& kv : it->second) {
        if (const std::string why = parseEnvAssignment(kv, &env); !why.empty()) return fail(why);
      }
    }

    const std::string ssh = process::findProgram("ssh", host.env);
    if (ssh.empty()) return fail("no 'ssh' in PATH: install the OpenSSH client (Debian: openssh-client)");

    // Preflight: all hosts at once, nothing starts unless every host is ready.
    PreflightRequest pre;
    pre.ssh = ssh;
    // One TCP connection and key exchange per host, not two: the preflight's connection becomes a master that
    // the job's ssh client for that host reuses (OpenSSH multiplexing), then exits kMuxPersistSeconds after its
    // last session. One socket per hostfile entry (named by node rank: short, and entries never share a
    // connection). The user's own ControlMaster/ControlPath in --ssh-opts come first and win.
    ControlSockets control;
    for (std::size_t node = 0; node < shape.hosts.size(); ++node) {
      pre.host_opts.push_back({"-o", control.option(static_cast<int>(node)), "-o", "ControlMaster=auto", "-o",
                               "ControlPersist=" + std::to_string(kMuxPersistSeconds)});
    }
    pre.ssh_opts = ssh_opts;
    for (const auto& h : shape.hosts) pre.hosts.push_back(h.host);
    pre.remote_bin = remote_bin;
    pre.cwd = cwd;
    pre.version = host.version;
    pre.timeout = std::chrono::seconds(preflight_seconds);
    pre.max_parallel = ssh_parallel;
    ProcessCommandRunner runner;
    PreflightReport report = runPreflight(runner, host.env, pre);
    // Elastic (--nnodes MIN:MAX): the hosts that are ready now, by node index; a host not ready is left out
    // (named) as long as MIN are ready, and checked again at every restart (it comes back when it is ready).
    const bool elastic = shape.min_nodes < static_cast<int>(shape.hosts.size());
    const auto ready = [&](const PreflightReport& r) {
      std::vector<int> up;
      for (std::size_t i = 0; i < r.hosts.size(); ++i) {
        if (r.hosts[i].error.empty()) up.push_back(static_cast<int>(i));
      }
      if (static_cast<int>(up.size()) < shape.min_nodes) return up;
      for (const auto& h : r.hosts) {
        if (!h.error.empty()) log(LogLevel::kWarn, "host " + h.host + " left out (--nnodes " + args.nnodes + "): " + h.error);
      }
      return up;
    };
    std::vector<int> alive;
    if (elastic) alive = ready(report);
    const bool enough = elastic && static_cast<int>(alive.size()) >= shape.min_nodes;
    if (!enough && !report.ok()) {
      int bad = 0;
      for (const auto& check : report.hosts) {
        if (check.error.empty()) continue;
        if (++bad <= kMaxHostErrorLines) log(LogLevel::kError, "host " + check.host + ": " + check.error);
      }
      if (bad > kMaxHostErrorLines) {
        log(LogLevel::kError, "... and " + std::to_string(bad - kMaxHostErrorLines) + " more host(s) not ready");
      }
      return fail("preflight failed on " + std::to_string(bad) + " of " + std::to_string(report.hosts.size()) +
                  " host(s); nothing was started");
    }

    if (!elastic) {
      for (std::size_t i = 0; i < shape.hosts.size(); ++i) alive.push_back(static_cast<int>(i));
    }
    std::string master_addr = args.master_addr;
    const auto masterOf = [&](const PreflightReport& r, const std::vector<int>& up) {
      const HostCheck& first = r.hosts[static_cast<std::size_t>(up.front())];
      return first.addresses.empty() ? first.host : first.addresses.front();
    };
    if (master_addr.empty()) {
      const HostCheck& first = report.hosts[static_cast<std::size_t>(alive.front())];
      if (!first.addresses.empty()) {
        master_addr = first.addresses.front();
        log(LogLevel::kInfo, "master: " + master_addr + " (first address of `hostname -I` on " + first.host +
                                 ", the first host; --master-addr to change)");
      } else {
        master_addr = first.host;
        log(LogLevel::kWarn, "master: " + master_addr + " (the first host's name: `hostname -I` printed nothing "
                             "there; pass --master-addr if other hosts cannot resolve it)");
      }
    }

    // Fan out: one ssh client per host; restart R tells every remote taehv-run (TORCHELASTIC_RESTART_COUNT) and
    // uses master port P + R, so the new rendezvous never meets processes of the previous run still stopping.
    if (master_port + max_restarts > 65535) {
      return fail("--master-port " + std::to_string(master_port) + " + --max-restarts " + std::to_string(max_restarts) +
                  " exceeds 65535: restart R uses port P + R; lower one of them");
    }
    int nnodes = static_cast<int>(alive.size());
    // The node group's secret (core/group/PROTOCOL.md): the user's TAEHV_JOB_TOKEN, else a new one for this job;
    // handed to each host on ssh's stdin, never in a command line or the forwarded environment.
    std::string token;
    if (const auto it = env.find(group::kJobTokenEnv); it != env.end() && !it->second.empty()) token = it->second;
    env.erase(group::kJobTokenEnv);
    if (token.empty()) token = group::generateJobToken();
    const auto make_children = [&](int restart) {
      std::vector<process::ChildSpec> children;
      std::vector<std::string> forwarded = args.forwarded;
      if (max_restarts > 0) forwarded.insert(forwarded.end(), {"--restart-count", std::to_string(restart)});
      int first_rank = 0;
      for (int node = 0; node < nnodes; ++node) {
        const int index = alive[static_cast<std::size_t>(node)];  // the host's place in the hostfile
        const HostEntry& h = shape.hosts[static_cast<std::size_t>(index)];
        RemoteJob remote;
        remote.remote_bin = remote_bin;
        remote.cwd = cwd;
        remote.env = env;
        remote.grace_seconds = grace_seconds;
        remote.token_on_stdin = true;
        bool identity = true;
        for (std::size_t i = 0; i < h.slots.size(); ++i) identity = identity && h.slots[i] == static_cast<int>(i);
        if (!identity) {
          // A slot subset from --include/--exclude: like DeepSpeed, the slots are the devices this node may use.
          std::string devices;
          for (int s : h.slots) devices += (devices.empty() ? "" : ",") + std::to_string(s);
          remote.env["CUDA_VISIBLE_DEVICES"] = devices;
        }
        remote.taehv_args =
            remoteTaehvArgs(nnodes, node, shape.nprocs[static_cast<std::size_t>(index)], master_addr,
                            master_port + restart, forwarded, job.command);
        process::ChildSpec child;
        std::vector<std::string> job_opts = ssh_opts;
        job_opts.insert(job_opts.end(), {"-o", control.option(index), "-o", "ControlMaster=no"});
        child.argv = sshArgv(ssh, job_opts, h.host, remoteCommand(remoteScript(remote)));
        child.env = host.env;
        child.label = h.host + ":" + std::to_string(node);
        child.rank = first_rank;  // the node's first rank (slots of the hosts before it)
        first_rank += shape.nprocs[static_cast<std::size_t>(index)];
        child.host = h.host;
        child.stdin_pipe = true;
        child.stdin_data = token + "\n";
        children.push_back(std::move(child));
      }
      return children;
    };
    log(LogLevel::kInfo, "starting " + std::to_string(nnodes) + " node(s) with " + formatCounts(shape.nprocs) +
                             " process(es), master " + master_addr + ":" +
                             std::to_string(master_port) +
                             (max_restarts > 0 ? ", up to " + std::to_string(max_restarts) + " restart(s) of the whole job"
                                               : std::string()));
    process::SupervisorOptions sup;
    sup.shutdown_grace = kClientShutdownGrace;
    sup.max_restarts = max_restarts;
    sup.prefix_output = true;
    // A remote taehv-run stopped by its node group (another node failed or was lost) exits kExternalStopExit: name
    // the node that caused it, which ends within its own grace plus the group's linger.
    sup.consequence_exit_code = process::kExternalStopExit;
    sup.consequence_window = std::chrono::seconds(grace_seconds) + group::kOriginLinger;
    if (!elastic) return process::supervise(make_children, sup).exit_code;
    // Elastic: every restart checks every host again and starts the job on those ready (a lost host left out, a
    // recovered one back, up to MAX), as long as MIN are; the remote taehv-runs then form a fixed-size group.
    sup.max_restarts = 0;
    for (int restart = 0;; ++restart) {
      if (restart > 0) {
        report = runPreflight(runner, host.env, pre);
        alive = ready(report);
        if (static_cast<int>(alive.size()) < shape.min_nodes) {
          for (const auto& h : report.hosts) {
            if (!h.error.empty()) log(LogLevel::kError, "host " + h.host + ": " + h.error);
          }
          log(LogLevel::kError, "restart " + std::to_string(restart) + ": " + std::to_string(alive.size()) +
                                    " host(s) ready, fewer than the " + std::to_string(shape.min_nodes) +
                                    " --nnodes " + args.nnodes + " needs; the job ends");
          return 1;
        }
        nnodes = static_cast<int>(alive.size());
        if (args.master_addr.empty()) master_addr = masterOf(report, alive);
        log(LogLevel::kInfo, "restart " + std::to_string(restart) + " of " + std::to_string(max_restarts) + ": " +
                                 std::to_string(nnodes) + " host(s) ready, master " + master_addr + ":" +
                                 std::to_string(master_port + restart));
      }
      const process::SupervisorResult result = process::supervise([&](int) { return make_children(restart); }, sup);
      if (result.exit_code == 0 || result.interrupt_signal != 0 || restart >= max_restarts) return result.exit_code;
    }
  }
};

}  // namespace
}  // namespace taehv::ssh

TAEHV_DEFINE_PLUGIN(taehv::ssh::SshBackend, "ssh", "0.1.0",
                    "SSH fan-out: start a multi-node job on the hosts of a hostfile from one host")
