// The ssh backend: `taehv-run --backend ssh --hostfile FILE [options] [-- command]` starts taehv-run on every
// host of a DeepSpeed-style hostfile at once over the system OpenSSH client, streams their output back
// prefixed "[host:node]", and takes every host down when one fails, on Ctrl-C, or when this launcher dies.
//
// Flow (FanOut::run, one step each): hostfile -> --include/--exclude -> job shape (nodes x processes) -> restarts
// and ports -> the remote side -> environment to forward -> preflight (all hosts in parallel, one deadline; any
// failure names the host and starts nothing) -> one ssh client per host under taehv::process::supervise() (fail
// fast, signal forwarding). The launch flags come typed and checked from the host (JobRequest::flags). Each ssh
// client's stdin is a pipe held by the supervisor; the remote wrapper (fanout.h remoteScript) kills its process
// group when that pipe reaches EOF, so even `kill -9` of this launcher leaves nothing behind on any host.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>

#include "taehv/env.h"
#include "taehv/files/input_file.h"
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
/// The largest --preflight-timeout / --remote-grace taken (five digits).
constexpr long long kMaxOptionSeconds = 99999;
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

std::string currentDirectory() {
  char buf[PATH_MAX];
  return ::getcwd(buf, sizeof buf) ? std::string(buf) : std::string();
}

/// The value of option `name`, or "" when it was not given.
std::string lastOption(const OptionValues& options, const std::string& name) {
  const std::string* value = optionValue(options, name);
  return value ? *value : std::string();
}

/// The job's hosts and shape from --hostfile, --include/--exclude, --nnodes (`flags`) and --nproc-per-node (`nproc`,
/// unset = the slots), or why there are none.
Checked<JobShape> loadJobShape(const OptionValues& opts, const JobFlags& flags, std::optional<int> nproc) {
  const std::string hostfile = lastOption(opts, "hostfile");
  if (hostfile.empty()) return {"--hostfile needs a file name"};
  const Checked<std::string> text = files::readInputFile(hostfile, "--hostfile", files::Role::kInput);
  if (!text.ok()) return {text.error};
  HostsResult parsed = parseHostfile(text.value, hostfile);
  if (!parsed.ok()) return {parsed.error};
  HostsResult filtered = filterHosts(parsed.value, lastOption(opts, "include"), lastOption(opts, "exclude"));
  if (!filtered.ok()) return {filtered.error};
  JobShape shape = shapeJob(filtered.value, flags, nproc);
  return {shape.error, std::move(shape)};
}

/// Whether the fan-out can take `hosts` hosts (warning beyond kTestedHosts); fails with why not. Raises the soft
/// limit on open files to the hard one when the job's ssh clients need more descriptors than the soft one allows.
template <typename Log>
Status checkHostCount(std::size_t hosts, const Log& log) {
  if (hosts > kMaxHosts) {
    return {std::to_string(hosts) + " hosts: the ssh backend starts one ssh client per host on this host for the "
            "whole job and takes at most " + std::to_string(kMaxHosts) +
            "; use --nnodes N or --include to run fewer, or a scheduler (--backend slurm) for a job this large"};
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
      if (::setrlimit(RLIMIT_NOFILE, &files) == 0) return {};
    }
    return {std::to_string(hosts) + " hosts need about " + std::to_string(needed) +
            " open files here (three pipes per ssh client) but the limit is " + std::to_string(files.rlim_cur) +
            " (hard limit " +
            (files.rlim_max == RLIM_INFINITY ? std::string("unlimited") : std::to_string(files.rlim_max)) +
            "); raise it (ulimit -n) or run fewer hosts"};
  }
  return {};
}

/// One launch of the whole job on the hosts of a hostfile. First its settings are read and checked, nothing started
/// (the read* steps); then every host is checked at once (preflight), the master chosen, and one ssh client per host
/// runs under process::supervise() (fail fast, signal forwarding), restarted as a whole job up to --max-restarts
/// times. Each step succeeds or fails with the one line that ends the launch.
class FanOut {
 public:
  FanOut(const HostContext& host, const JobRequest& job) : host_(host), job_(job), opts_(job.request.options) {}

  /// The launch, step by step: the job's exit code, or kNotStarted when it never started.
  int run() {
    using Step = Status (FanOut::*)();
    for (Step step : {&FanOut::readShape, &FanOut::readRestarts, &FanOut::readRemoteSide, &FanOut::readEnvironment,
                      &FanOut::findSsh, &FanOut::checkHosts}) {
      if (const Status status = (this->*step)(); !status.ok()) {
        log(LogLevel::kError, status.error);
        return kNotStarted;
      }
    }
    log(LogLevel::kInfo, "starting " + std::to_string(alive_.size()) + " node(s) with " + formatCounts(shape_.nprocs) +
                             " process(es), master " + master_addr_ + ":" + std::to_string(master_port_) +
                             (max_restarts_ > 0 ? ", up to " + std::to_string(max_restarts_) +
                                                      " restart(s) of the whole job"
                                                : std::string()));
    return elastic() ? superviseElastic() : superviseFixed();
  }

 private:
  void log(LogLevel level, const std::string& message) const {
    if (host_.log) host_.log(level, message);
  }

  /// `--nnodes MIN:MAX` with fewer than MAX of the hosts required: the job runs on the hosts that are ready.
  bool elastic() const { return shape_.min_nodes < static_cast<int>(shape_.hosts.size()); }

  /// Hosts, --include/--exclude, --nnodes and --nproc-per-node: which hosts run how many processes.
  Status readShape() {
    if (Status refused = refusedFlags(job_.flags); !refused.ok()) return refused;
    Checked<JobShape> shape = loadJobShape(opts_, job_.flags, job_.request.nproc_per_node);
    if (!shape.ok()) return {shape.error};
    shape_ = std::move(shape.value);
    for (const auto& note : shape_.notes) log(LogLevel::kInfo, note);
    if (Status fits = checkHostCount(shape_.hosts.size(), [this](LogLevel l, const std::string& m) { log(l, m); });
        !fits.ok()) {
      return fits;
    }
    if (shape_.nproc_per_node == 0 && job_.flags.no_node_group) {
      return {"hosts run different numbers of processes (" + formatCounts(shape_.nprocs) +
             "), which the hosts' node group lays out into ranks; drop --no-node-group, or make the slots "
              "equal (slots=, --include HOST:0,1@HOST2:0,1, or --nproc-per-node N)"};
    }
    return {};
  }

  /// Restarts are the whole job's: after a failure every host is torn down and started again (a host restarting its
  /// workers alone would rendezvous with nobody while the others hang in their collectives). Restart R uses master
  /// port P + R, so the new rendezvous never meets processes of the previous run still stopping.
  Status readRestarts() {
    max_restarts_ = job_.flags.max_restarts.value_or(0);
    master_port_ = job_.flags.master_port.value_or(kDefaultMasterPort);
    if (master_port_ + max_restarts_ > 65535) {
      return {"--master-port " + std::to_string(master_port_) + " + --max-restarts " + std::to_string(max_restarts_) +
              " exceeds 65535: restart R uses port P + R; lower one of them"};
    }
    return {};
  }

  /// Where and how taehv-run runs on the hosts: --remote-bin, --remote-cwd, --ssh-opts, the preflight's deadline
  /// and width, the grace on teardown.
  Status readRemoteSide() {
    remote_bin_ = opts_.count("remote-bin") ? lastOption(opts_, "remote-bin") : host_.self_path;
    if (remote_bin_.empty() || remote_bin_[0] != '/') {
      return {"--remote-bin must be an absolute path, got '" + remote_bin_ + "'"};
    }
    cwd_ = opts_.count("remote-cwd") ? lastOption(opts_, "remote-cwd") : currentDirectory();
    if (cwd_.empty() || cwd_[0] != '/') return {"--remote-cwd must be an absolute path, got '" + cwd_ + "'"};
    if (const auto it = opts_.find("ssh-opts"); it != opts_.end()) {
      for (const auto& o : it->second) {
        SplitResult words = splitWords(o);
        if (!words.error.empty()) return {"--ssh-opts: " + words.error};
        ssh_opts_.insert(ssh_opts_.end(), words.value.begin(), words.value.end());
      }
    }
    if (opts_.count("preflight-timeout")) {
      const auto seconds = parseSeconds(lastOption(opts_, "preflight-timeout"), 1, kMaxOptionSeconds);
      if (!seconds) return {"--preflight-timeout must be a whole number of seconds > 0"};
      preflight_seconds_ = static_cast<int>(seconds->count());
    }
    if (opts_.count("ssh-parallel")) {
      const auto n = parseCount<std::size_t>(lastOption(opts_, "ssh-parallel"), 1, kMaxSshParallel);
      if (!n) {
        return {"--ssh-parallel '" + lastOption(opts_, "ssh-parallel") + "' must be a whole number from 1 to " +
               std::to_string(kMaxSshParallel)};
      }
      ssh_parallel_ = *n;
    }
    std::optional<std::chrono::seconds> remote_grace;
    if (opts_.count("remote-grace")) {
      remote_grace = parseSeconds(lastOption(opts_, "remote-grace"), 1, kMaxOptionSeconds);
      if (!remote_grace) return {"--remote-grace must be a whole number of seconds > 0"};
    }
    grace_seconds_ = remoteGraceSeconds(remote_grace, job_.flags.shutdown_grace);
    return {};
  }

  /// The job's environment: NCCL_* GLOO_* TAEHV_* TORCH_* < ~/.taehv_env < ./.taehv_env < --env; and the node group's
  /// secret (core/group/PROTOCOL.md): the user's TAEHV_JOB_TOKEN, else a new one for this job, handed to each host
  /// on ssh's stdin, never in a command line or the forwarded environment.
  Status readEnvironment() {
    env_ = forwardedEnv(host_.env);
    std::vector<std::string> env_files;
    if (const std::optional<std::string> home = envValue(host_.env, "HOME")) env_files.push_back(*home + "/.taehv_env");
    const std::string here = currentDirectory();
    if (!here.empty() && (env_files.empty() || here + "/.taehv_env" != env_files[0])) {
      env_files.push_back(here + "/.taehv_env");
    }
    for (const auto& file : env_files) {
      if (::access(file.c_str(), F_OK) != 0) continue;
      const Checked<std::string> content = files::readInputFile(file, "environment file", files::Role::kInput);
      if (!content.ok()) return {content.error};
      if (Status parsed = parseEnvFile(content.value, file, &env_); !parsed.ok()) return parsed;
      log(LogLevel::kDebug, "forwarding the variables of " + file);
    }
    if (const auto it = opts_.find("env"); it != opts_.end()) {
      for (const auto& kv : it->second) {
        if (Status parsed = parseEnvAssignment(kv, &env_); !parsed.ok()) return parsed;
      }
    }
    if (const std::optional<std::string> token = envValue(env_, group::kJobTokenEnv)) token_ = *token;
    env_.erase(group::kJobTokenEnv);
    if (token_.empty()) token_ = group::generateJobToken();
    return {};
  }

  Status findSsh() {
    ssh_ = process::findProgram("ssh", host_.env);
    if (ssh_.empty()) return {"no 'ssh' in PATH: install the OpenSSH client (Debian: openssh-client)"};
    return {};
  }

  /// The preflight: every host at once, nothing starts unless every host is ready (elastic: at least MIN of them).
  /// One TCP connection and key exchange per host, not two: the preflight's connection becomes a master that the
  /// job's ssh client for that host reuses (OpenSSH multiplexing), then exits kMuxPersistSeconds after its last
  /// session. One socket per hostfile entry (named by node rank: short, and entries never share a connection). The
  /// user's own ControlMaster/ControlPath in --ssh-opts come first and win.
  Status checkHosts() {
    preflight_.ssh = ssh_;
    for (std::size_t node = 0; node < shape_.hosts.size(); ++node) {
      preflight_.host_opts.push_back({"-o", control_.option(static_cast<int>(node)), "-o", "ControlMaster=auto", "-o",
                                      "ControlPersist=" + std::to_string(kMuxPersistSeconds)});
    }
    preflight_.ssh_opts = ssh_opts_;
    for (const auto& h : shape_.hosts) preflight_.hosts.push_back(h.host);
    preflight_.remote_bin = remote_bin_;
    preflight_.cwd = cwd_;
    preflight_.version = host_.version;
    preflight_.timeout = std::chrono::seconds(preflight_seconds_);
    preflight_.max_parallel = ssh_parallel_;
    const PreflightReport report = runPreflight(runner_, host_.env, preflight_);
    if (elastic()) alive_ = readyHosts(report);
    const bool enough = elastic() && static_cast<int>(alive_.size()) >= shape_.min_nodes;
    if (!enough && !report.ok()) {
      int bad = 0;
      for (const auto& check : report.hosts) {
        if (check.error.empty()) continue;
        if (++bad <= kMaxHostErrorLines) log(LogLevel::kError, "host " + check.host + ": " + check.error);
      }
      if (bad > kMaxHostErrorLines) {
        log(LogLevel::kError, "... and " + std::to_string(bad - kMaxHostErrorLines) + " more host(s) not ready");
      }
      return {"preflight failed on " + std::to_string(bad) + " of " + std::to_string(report.hosts.size()) +
              " host(s); nothing was started"};
    }
    if (!elastic()) {
      for (std::size_t i = 0; i < shape_.hosts.size(); ++i) alive_.push_back(static_cast<int>(i));
    }
    chooseMaster(report, /*announce=*/true);
    return {};
  }

  /// Elastic (--nnodes MIN:MAX): the hosts that answered the preflight, by hostfile index. A host not ready is left
  /// out (named) as long as MIN are ready, and checked again at every restart (it comes back when it is ready).
  std::vector<int> readyHosts(const PreflightReport& report) const {
    std::vector<int> up;
    for (std::size_t i = 0; i < report.hosts.size(); ++i) {
      if (report.hosts[i].error.empty()) up.push_back(static_cast<int>(i));
    }
    if (static_cast<int>(up.size()) < shape_.min_nodes) return up;
    for (const auto& h : report.hosts) {
      if (!h.error.empty()) {
        log(LogLevel::kWarn, "host " + h.host + " left out (--nnodes " + nnodesText(job_.flags) + "): " + h.error);
      }
    }
    return up;
  }

  /// --master-addr, else the first address of the first host that runs the job.
  void chooseMaster(const PreflightReport& report, bool announce) {
    if (job_.flags.master_addr) {
      master_addr_ = *job_.flags.master_addr;
      return;
    }
    const HostCheck& first = report.hosts[static_cast<std::size_t>(alive_.front())];
    master_addr_ = first.addresses.empty() ? first.host : first.addresses.front();
    if (!announce) return;
    if (!first.addresses.empty()) {
      log(LogLevel::kInfo, "master: " + master_addr_ + " (first address of `hostname -I` on " + first.host +
                               ", the first host; --master-addr to change)");
    } else {
      log(LogLevel::kWarn, "master: " + master_addr_ + " (the first host's name: `hostname -I` printed nothing "
                           "there; pass --master-addr if other hosts cannot resolve it)");
    }
  }

  /// One ssh client per host that runs the job; restart R tells every remote taehv-run (TORCHELASTIC_RESTART_COUNT)
  /// and uses master port P + R.
  std::vector<process::ChildSpec> children(int restart) {
    std::vector<process::ChildSpec> out;
    std::vector<std::string> forwarded = job_.launcher_args;
    if (max_restarts_ > 0) forwarded.insert(forwarded.end(), {"--restart-count", std::to_string(restart)});
    const int nnodes = static_cast<int>(alive_.size());
    int first_rank = 0;
    for (int node = 0; node < nnodes; ++node) {
      const int index = alive_[static_cast<std::size_t>(node)];  // the host's place in the hostfile
      const HostEntry& h = shape_.hosts[static_cast<std::size_t>(index)];
      const int nprocs = shape_.nprocs[static_cast<std::size_t>(index)];
      RemoteJob remote;
      remote.remote_bin = remote_bin_;
      remote.cwd = cwd_;
      remote.env = env_;
      remote.grace_seconds = grace_seconds_;
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
          remoteTaehvArgs(nnodes, node, nprocs, master_addr_, master_port_ + restart, forwarded, job_.command);
      process::ChildSpec child;
      std::vector<std::string> job_opts = ssh_opts_;
      job_opts.insert(job_opts.end(), {"-o", control_.option(index), "-o", "ControlMaster=no"});
      child.argv = sshArgv(ssh_, job_opts, h.host, remoteCommand(remoteScript(remote)));
      child.env = host_.env;
      child.label = h.host + ":" + std::to_string(node);
      child.rank = first_rank;  // the node's first rank (slots of the hosts before it)
      first_rank += nprocs;
      child.host = h.host;
      child.stdin_pipe = true;
      child.stdin_data = token_ + "\n";
      out.push_back(std::move(child));
    }
    return out;
  }

  process::SupervisorOptions supervisorOptions(int max_restarts) const {
    process::SupervisorOptions sup;
    sup.shutdown_grace = kClientShutdownGrace;
    sup.max_restarts = max_restarts;
    sup.prefix_output = true;
    // A remote taehv-run stopped by its node group (another node failed or was lost) exits kExternalStopExit: name
    // the node that caused it, which ends within its own grace plus the group's linger.
    sup.consequence_exit_code = process::kExternalStopExit;
    sup.consequence_window = std::chrono::seconds(grace_seconds_) + group::kOriginLinger;
    return sup;
  }

  /// A fixed set of hosts: the supervisor restarts them all together.
  int superviseFixed() {
    return process::supervise([this](int restart) { return children(restart); }, supervisorOptions(max_restarts_))
        .exit_code;
  }

  /// Elastic: every restart checks every host again and starts the job on those ready (a lost host left out, a
  /// recovered one back, up to MAX), as long as MIN are; the remote taehv-runs then form a fixed-size group.
  int superviseElastic() {
    for (int restart = 0;; ++restart) {
      if (restart > 0) {
        const PreflightReport report = runPreflight(runner_, host_.env, preflight_);
        alive_ = readyHosts(report);
        if (static_cast<int>(alive_.size()) < shape_.min_nodes) {
          for (const auto& h : report.hosts) {
            if (!h.error.empty()) log(LogLevel::kError, "host " + h.host + ": " + h.error);
          }
          log(LogLevel::kError, "restart " + std::to_string(restart) + ": " + std::to_string(alive_.size()) +
                                    " host(s) ready, fewer than the " + std::to_string(shape_.min_nodes) +
                                    " --nnodes " + nnodesText(job_.flags) + " needs; the job ends");
          return 1;
        }
        chooseMaster(report, /*announce=*/false);
        log(LogLevel::kInfo, "restart " + std::to_string(restart) + " of " + std::to_string(max_restarts_) + ": " +
                                 std::to_string(alive_.size()) + " host(s) ready, master " + master_addr_ + ":" +
                                 std::to_string(master_port_ + restart));
      }
      const process::SupervisorResult result =
          process::supervise([&](int) { return children(restart); }, supervisorOptions(0));
      if (result.exit_code == 0 || result.interrupt_signal != 0 || restart >= max_restarts_) return result.exit_code;
    }
  }

  const HostContext& host_;
  const JobRequest& job_;
  const OptionValues& opts_;
  JobShape shape_;
  int max_restarts_ = 0;
  int master_port_ = kDefaultMasterPort;
  std::string remote_bin_;
  std::string cwd_;
  std::vector<std::string> ssh_opts_;
  int preflight_seconds_ = kDefaultPreflightSeconds;
  std::size_t ssh_parallel_ = kDefaultSshParallel;
  int grace_seconds_ = kDefaultRemoteGraceSeconds;
  std::map<std::string, std::string> env_;  // exported on every host
  std::string token_;
  std::string ssh_;
  ControlSockets control_;
  PreflightRequest preflight_;
  ProcessCommandRunner runner_;
  std::vector<int> alive_;  // hostfile indices of the hosts the job runs on now (node rank = position)
  std::string master_addr_;
};

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
    const Checked<JobShape> loaded = loadJobShape(request.options, JobFlags(), request.nproc_per_node);
    if (!loaded.ok()) {
      result.error = loaded.error;
      return result;
    }
    const JobShape& shape = loaded.value;
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

  int launch(const HostContext& host, const JobRequest& job) override { return FanOut(host, job).run(); }
};

}  // namespace
}  // namespace taehv::ssh

TAEHV_DEFINE_PLUGIN(taehv::ssh::SshBackend, "ssh", "0.1.0",
                    "SSH fan-out: start a multi-node job on the hosts of a hostfile from one host")
