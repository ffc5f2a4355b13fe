#include "taehv/launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <thread>

#include "taehv/env.h"
#include "taehv/group/etcd_node_group.h"
#include "taehv/group/session.h"
#include "taehv/log.h"
#include "taehv/group/tcp_node_group.h"
#include "taehv/job_progress.h"
#include "taehv/files/input_file.h"
#include "taehv/process/run.h"
#include "taehv/process/supervisor.h"
#include "taehv/worker_env.h"

namespace taehv {
namespace {

constexpr std::chrono::milliseconds kConnectAttemptTimeout{1000};
constexpr std::chrono::milliseconds kMasterRetryDelay{500};

/// One connect attempt to any address of addr:port; fails with the resolver's or the last connect's error.
Status tryConnect(const std::string& addr, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) return {"cannot resolve '" + addr + "': " + ::gai_strerror(rc)};
  std::string error = "no address";
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, static_cast<int>(kConnectAttemptTimeout.count())) == 1) {
        int so_error = 0;
        socklen_t len = sizeof so_error;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
        rc = so_error == 0 ? 0 : -1;
        errno = so_error;
      } else {
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0) {
      ::close(fd);
      ::freeaddrinfo(found);
      return {};
    }
    error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return {error};
}

/// torchrun's log layout for one worker (--redirects / --tee with --log-dir): its streams' files in
/// workerLogFolder(), what of them stays on the console, and its TORCHELASTIC_ERROR_FILE there (error.json).
void applyStreamLogs(const LaunchSettings& settings, const std::string& run_id, int attempt, int local,
                     process::ChildSpec& child) {
  const auto it = settings.stream_logs.find(local);
  if (it == settings.stream_logs.end()) return;
  const std::string folder = workerLogFolder(settings.log_dir, run_id, attempt, local);
  const int files = static_cast<int>(it->second.files);
  const int console = static_cast<int>(it->second.console_too);
  const int out = static_cast<int>(LogStreams::kOut), err = static_cast<int>(LogStreams::kErr);
  if (files & out) child.stdout_file = folder + "/stdout.log";
  if (files & err) child.stderr_file = folder + "/stderr.log";
  child.echo_stdout = !(files & out) || (console & out);
  child.echo_stderr = !(files & err) || (console & err);
  if (child.env.count("TORCHELASTIC_ERROR_FILE") == 0) child.env["TORCHELASTIC_ERROR_FILE"] = folder + "/error.json";
}

}  // namespace

Status waitForMaster(const std::string& addr, int port, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    Status last = tryConnect(addr, port);
    if (last.ok() || std::chrono::steady_clock::now() + kMasterRetryDelay >= deadline) return last;
    std::this_thread::sleep_for(kMasterRetryDelay);
  }
}

int freeTcpPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

int availableCpuCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

std::string hostName() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

Checked<std::vector<int>> parseRankList(const std::string& text) {
  Checked<std::vector<int>> result;
  std::vector<int>& out = result.value;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    auto dash = part.find('-');
    std::optional<int> lo, hi;
    if (dash == std::string::npos) {
      lo = hi = parseInt(part);
    } else {
      lo = parseInt(part.substr(0, dash));
      hi = parseInt(part.substr(dash + 1));
    }
    if (!lo || !hi || *lo < 0 || *hi < *lo) {
      return {"--local-ranks-filter '" + text + "': expected local ranks like 0 or 0,2 or 0-3"};
    }
    for (int r = *lo; r <= *hi; ++r) out.push_back(r);
  }
  if (out.empty()) return {"--local-ranks-filter is empty; give local ranks like 0 or 0,2"};
  return result;
}

Status checkLogDir(const std::string& dir) {
  const std::string where = "--log-dir " + dir + ": ";
  if (dir.empty()) return {where + "empty; give a folder for the workers' rank_<RANK>.log files"};
  // The path itself, else its nearest parent that exists: a folder the launch can create the rest in.
  std::filesystem::path at = std::filesystem::path(dir).lexically_normal();
  for (;;) {
    struct stat st {};
    if (::stat(at.c_str(), &st) == 0) {
      const bool self = at == std::filesystem::path(dir).lexically_normal();
      const std::string what = self ? std::string("it") : at.string();
      if (!S_ISDIR(st.st_mode)) {
        return {where + what + " is " + files::fileKind(st.st_mode) +
                ", not a folder; give a folder (it is created when missing) for the workers' rank_<RANK>.log files"};
      }
      if (::access(at.c_str(), W_OK | X_OK) != 0) {
        return {where + (self ? "cannot write in it" : "cannot create it in " + at.string()) + " (" +
                std::strerror(errno) + "); give a folder you can write in"};
      }
      return {};
    }
    const std::filesystem::path parent = at.has_parent_path() ? at.parent_path() : std::filesystem::path(".");
    if ((errno != ENOENT && errno != ENOTDIR) || parent == at) {  // ENOTDIR: a file on the way, found above
      return {where + "cannot look at " + at.string() + " (" + std::strerror(errno) + ")"};
    }
    at = parent;
  }
}

namespace {

/// "15 s", "2.5 s".
std::string formatSeconds(std::chrono::milliseconds d) {
  std::ostringstream s;
  s << std::chrono::duration<double>(d).count() << " s";
  return s.str();
}

/// Starts this node's part of the node group (formation `round`: 0 at start, +1 at each re-formation) and waits
/// until it has formed. nullptr with a logged error when not; `leader_lost` says whether node 0 was the cause,
/// `unreachable` whether the group could not even start (no etcd at the endpoints).
/// `leave_out`: node 0, elastic: the nodes it refuses at this formation, each with why (--leave-out-stragglers).
std::unique_ptr<group::NodeGroup> formGroup(const NodeDescriptor& node, const GroupPlan& plan, int round,
                                            const std::function<void(LogLevel, const std::string&)>& log,
                                            bool& leader_lost, bool& unreachable,
                                            const std::map<int, std::string>& leave_out = {}) {
  group::GroupOptions options;
  options.node_rank = *node.node_rank.value;
  options.rank_by_arrival = plan.rank_by_arrival;
  options.nnodes = *node.nnodes.value;
  options.min_nnodes = *node.min_nnodes.value;
  options.round = round;
  options.reforming = round > 0;
  options.leader_addr = plan.leader_addr;
  options.port = *plan.port.value;
  options.host = node.host;
  options.job_key = group::jobKey(plan.token.secret, *node.run_id.value);
  options.nproc = *node.nproc_per_node.value;
  options.node_timeout = plan.node_timeout;
  options.log = log;
  options.leave_out = leave_out;
  std::unique_ptr<group::NodeGroup> g;
  group::TcpNodeGroup* tcp = nullptr;
  if (!plan.etcd_endpoints.empty()) {
    g = std::make_unique<group::EtcdNodeGroup>(
        group::EtcdGroupOptions{options, plan.etcd_endpoints, *node.run_id.value, std::string(),
                                plan.node_local_checkpoints});
  } else {
    auto t = std::make_unique<group::TcpNodeGroup>(options);
    tcp = t.get();
    g = std::move(t);
  }
  if (Status s = g->start(); !s.ok()) {
    log(LogLevel::kError, s.error);
    unreachable = tcp == nullptr;
    return nullptr;
  }
  const int wait_s = *node.master_wait_seconds.value;
  const std::chrono::seconds wait = wait_s > 0 ? std::chrono::seconds(wait_s) : group::kDefaultJoinTimeout;
  const std::string nodes = node.elastic() ? node.nnodesText() + " (MIN:MAX)" : node.nnodesText();
  log(LogLevel::kInfo, std::string("node group: ") + (round > 0 ? "re-forming (formation " + std::to_string(round) +
                                                                      "): "
                                                                : "") +
                           (!tcp                    ? "forming in etcd"
                            : tcp->boundPort() > 0 ? "listening on port " + std::to_string(tcp->boundPort())
                                                     : "joining " + plan.address()) +
                           ", waiting up to " +
                           std::to_string(wait.count()) + " s for " + nodes + " nodes; node timeout " +
                           formatSeconds(plan.node_timeout) + "; job token: " +
                           (plan.token.source == group::TokenSource::kDerived ? "none given (derived, weaker)"
                                                                              : plan.token.description));
  const auto form_started = std::chrono::steady_clock::now();
  if (Status formed = g->form(form_started + wait); !formed.ok()) {
    leader_lost = g->leaderLost();
    const std::string& e = formed.error;
    // The time it waited, not the limit: node 0 may refuse a node at once (a node rank taken or out of range).
    const auto waited =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - form_started);
    log(LogLevel::kError, e + " (master " + *node.master_addr.value + ":" + std::to_string(*node.master_port.value) +
                              ", address from " + node.master_addr.source + "; waited " + formatSeconds(waited) +
                              " of " + std::to_string(wait.count()) + " s)");
    g->requestStop("the group did not form: " + e);
    g->finish(false);
    return nullptr;
  }
  return g;
}

/// What ends a node when node 0 is lost: the job cannot re-form without it (PROTOCOL.md, "Elastic re-formation").
std::string leaderLostEnd(const NodeDescriptor& node) {
  return "the job cannot re-form without node 0: it leads the node group and hosts the workers' store (MASTER_ADDR " +
         *node.master_addr.value + ":" + std::to_string(*node.master_port.value) + "), and no other node takes "
         "over (as torchrun's c10d store host); this node ends. Restart the job (with node 0) to continue from its "
         "last checkpoint";
}

/// Supervises this node's workers (restart `restart` of the job, workers stopped when `node_group` says so).
/// `straggler_nodes`: when not null, set to the nodes named stragglers when the workers ended (node 0 only).
process::SupervisorResult runWorkers(const NodeDescriptor& node, const LaunchSettings& settings, const Env& inherited,
                                     group::NodeGroup* node_group, int max_restarts, int restart,
                                     std::map<int, std::string>* straggler_nodes = nullptr) {
  process::SupervisorOptions options;
  options.shutdown_grace = settings.shutdown_grace;
  options.max_restarts = max_restarts;
  options.prefix_output = settings.prefix_output;
  // As torchrun does, each worker gets its own TORCHELASTIC_ERROR_FILE (where torch's @record writes its
  // exception); the supervisor folds the failing worker's file into ours. They live in a private temp folder.
  std::string worker_error_dir;
  if (const auto error_file = envValue(inherited, "TORCHELASTIC_ERROR_FILE")) {
    options.error_file = *error_file;
    std::string pattern = (std::filesystem::temp_directory_path() / "taehv-run-errors-XXXXXX").string();
    if (::mkdtemp(pattern.data()) != nullptr) worker_error_dir = pattern;
  }

  auto make_children = [&](int local_restart) {
    const int attempt = restart + local_restart;
    std::vector<process::ChildSpec> children;
    for (auto& w : expandWorkers(node, inherited, attempt)) {
      process::ChildSpec child;
      child.argv = settings.command;
      child.env = completeEnvironment(w, inherited);
      if (!worker_error_dir.empty()) {
        child.env["TORCHELASTIC_ERROR_FILE"] = worker_error_dir + "/rank_" + std::to_string(*w.rank.value) +
                                               "_attempt_" + std::to_string(attempt) + ".json";
      } else {
        child.env.erase("TORCHELASTIC_ERROR_FILE");
      }
      child.rank = *w.rank.value;
      child.label = std::to_string(*w.node_rank.value) + ":" + std::to_string(child.rank);
      child.host = node.host;
      const int local = *w.local_rank.value;
      if (!settings.stream_logs.empty()) {
        applyStreamLogs(settings, *w.run_id.value, attempt, local, child);
      } else if (!settings.log_dir.empty()) {
        child.log_file = (std::filesystem::path(settings.log_dir) / ("rank_" + std::to_string(child.rank) + ".log"))
                             .string();
      }
      child.echo = settings.local_ranks.empty() || std::find(settings.local_ranks.begin(), settings.local_ranks.end(),
                                                             local) != settings.local_ranks.end();
      children.push_back(std::move(child));
    }
    return children;
  };
  // The progress channel (always, so workers can report) and, with --hang-timeout, the hang watch.
  std::unique_ptr<process::ProgressWatch> progress;
  if (auto watch = process::ProgressWatch::create(
          settings.hang_timeout, {settings.log_dir, process::statusFilePath(settings.log_dir)}); watch.ok()) {
    progress = std::move(watch.value);
    options.progress = progress.get();
  } else {
    log::warn("no progress channel, no hang detection: " + watch.error);
  }
  // Progress to the node group with its heartbeats; stragglers named by the node that speaks for the job.
  JobProgress job(node_group, *node.node_rank.value, node_group == nullptr || *node.node_rank.value == 0);
  if (progress) options.on_tick = [&job, &progress] { job.tick(*progress); };
  if (node_group) {
    options.external_stop.fd = node_group->stopFd();
    options.external_stop.reason = [node_group] { return node_group->stopReason(); };
    options.external_stop.grace = [node_group] {
      return node_group->memberLost() ? std::chrono::milliseconds(group::kLostMemberGrace)
                                      : std::chrono::milliseconds::max();
    };
    options.on_failure = [node_group](const process::ChildExit&, const std::string& what) {
      node_group->requestStop(what);
    };
  }
  process::SupervisorResult result = process::supervise(make_children, options);
  if (result.exit_code != 0 && progress) {
    if (const std::string spread = job.spreadAtStop(progress->ranks()); !spread.empty()) {
      log::warn("job progress when it stopped (every node's last heartbeat): " + spread);
    }
  }
  if (straggler_nodes != nullptr) *straggler_nodes = job.stragglerNodes();
  if (!worker_error_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(worker_error_dir, ec);
  }
  return result;
}

/// The per-node modes: formations of the node group, each running this node's workers until the job ends or the
/// group stops; with restarts left (and node 0 alive) the nodes alive re-form and start again (PROTOCOL.md,
/// "Elastic re-formation").
int runWithGroup(const NodeDescriptor& planned, const LaunchSettings& settings, const Env& inherited,
                 const std::function<void(LogLevel, const std::string&)>& log) {
  // An outer launcher that restarts the whole job (the SSH fan-out) leaves this taehv-run none to make.
  const int max_restarts = planned.restarts_by_outer_launcher ? 0 : *planned.max_restarts.value;
  if (settings.leave_out_stragglers && !settings.group.etcd_endpoints.empty()) {
    log(LogLevel::kError, "--leave-out-stragglers is not implemented for the etcd node group (--rdzv-backend etcd); "
                          "drop one of them");
    return 2;
  }
  if (settings.leave_out_stragglers && settings.group.rank_by_arrival) {
    log(LogLevel::kError, "--leave-out-stragglers needs each node's --node-rank (node 0 names the nodes to leave out "
                          "by it); with node ranks by arrival (--rdzv-backend c10d, no --node-rank) drop one of them");
    return 2;
  }
  std::map<int, std::string> leave_out;  // node 0: the stragglers of the last formation
  for (int round = 0;; ++round) {
    NodeDescriptor node = planned;
    bool leader_lost = false;
    bool unreachable = false;
    // Replaces the master wait: node 0's workers (and so the master port) start only once the nodes have joined.
    std::unique_ptr<group::NodeGroup> node_group = formGroup(node, settings.group, round, log, leader_lost,
                                                             unreachable, leave_out);
    if (!node_group) {
      if (leader_lost) log(LogLevel::kError, leaderLostEnd(node));
      if (unreachable && round == 0) return 2;  // configuration: the etcd named is not there
      return leader_lost ? process::kExternalStopExit : 1;
    }
    // Each node's JOIN carried its process count; node 0 answered with this node's place and the world size.
    const group::AgreedRanks agreed = node_group->agreedRanks();
    round = agreed.round;
    // By arrival, the group chose the leader (node 0 of every formation); else it is --node-rank 0.
    const bool leader = settings.group.rank_by_arrival ? agreed.node_rank == 0 : *planned.node_rank.value == 0;
    RankLayout layout{agreed.first_rank, agreed.world_size,
                      leader ? "node group: per-node counts " + agreed.counts
                             : std::string("node group: node 0's answer to the counts")};
    if (Status s = applyAgreedLayout(node, layout); !s.ok()) {
      log(LogLevel::kError, s.error);
      node_group->requestStop(s.error);
      node_group->finish(false);
      return 2;
    }
    // The etcd group chooses the master per formation (its first node); the TCP group's is node 0.
    if (!agreed.master_addr.empty() && agreed.master_addr != *node.master_addr.value) {
      node.master_addr.set(agreed.master_addr, "node group: formation " + std::to_string(round) + "'s master",
                           Origin::kRule);
    }
    if (agreed.resume_step >= 0) {
      const std::string from = "node group: formation " + std::to_string(round) + "'s newest checkpoint every node holds";
      node.extra_env["TAEHV_RESUME_STEP"].set(std::to_string(agreed.resume_step), from);
      log(LogLevel::kInfo, "node group: formation " + std::to_string(round) + " resumes from step " +
                               std::to_string(agreed.resume_step) +
                               (agreed.resume_step > 0 ? ", the newest checkpoint every node holds"
                                                       : " (no node holds a checkpoint: from scratch)") +
                               " (TAEHV_RESUME_STEP)");
    }
    // The etcd group numbers the nodes itself (--node-rank orders them; none given: order of arrival), and so does
    // the TCP group when ranks go by arrival.
    const bool numbered = node.elastic() || round > 0 || !settings.group.etcd_endpoints.empty() ||
                          settings.group.rank_by_arrival;
    if (numbered) {
      const std::string formation = "node group: formation " + std::to_string(round);
      node.nnodes.set(agreed.nnodes, formation + " (--nnodes " + planned.nnodesText() + ")", Origin::kRule);
      node.node_rank.set(agreed.node_rank,
                         formation + (settings.group.rank_by_arrival
                                          ? std::string(" (by arrival)")
                                          : " (this node's --node-rank " + std::to_string(*planned.node_rank.value) + ")"),
                         Origin::kRule);
    }
    log(LogLevel::kInfo, "node group: this node runs ranks " + std::to_string(agreed.first_rank) + ".." +
                             std::to_string(agreed.first_rank + *node.nproc_per_node.value - 1) + " of world size " +
                             std::to_string(agreed.world_size) +
                             (agreed.counts.empty() ? std::string() : " (per-node counts " + agreed.counts + ")") +
                             (numbered ? "; node " + std::to_string(*node.node_rank.value) +
                                                                " of " + std::to_string(*node.nnodes.value) +
                                                                ", restart " + std::to_string(round)
                                                          : std::string()));
    std::map<int, std::string> stragglers;
    process::SupervisorResult result = runWorkers(node, settings, inherited, node_group.get(), 0, round, &stragglers);
    leave_out.clear();
    if (settings.leave_out_stragglers && leader) {
      for (const auto& [n, why] : stragglers) {
        if (n != 0) leave_out[n] = why;  // node 0 leads the group and hosts the store: it cannot be left out
      }
    }
    const bool ok = result.exit_code == 0;
    if (!ok && node_group->stopReason().empty()) {
      node_group->requestStop(result.interrupt_signal != 0
                                  ? "taehv-run was interrupted (signal " + std::to_string(result.interrupt_signal) + ")"
                                  : "its workers ended with exit code " + std::to_string(result.exit_code));
    }
    leader_lost = node_group->leaderLost();
    const std::string reason = node_group->finish(ok).error;
    if (ok && reason.empty()) return 0;
    const int code = ok ? process::kExternalStopExit : result.exit_code;
    if (ok) log(LogLevel::kError, "this node's workers finished, but the job did not: " + reason);
    if (leader_lost) {
      log(LogLevel::kError, reason + "; " + leaderLostEnd(node));
      return code;
    }
    if (result.interrupt_signal != 0 || ok) return code;
    if (round >= max_restarts) {
      if (max_restarts > 0) {
        log(LogLevel::kError, "node group: no restart left (--max-restarts " + std::to_string(max_restarts) +
                                  " made); the job ends: " + reason);
      }
      return code;
    }
    log(LogLevel::kWarn, "node group: the job stopped (" + reason + "); re-forming with the nodes alive for restart " +
                             std::to_string(round + 1) + " of " + std::to_string(max_restarts) + " (--nnodes " +
                             planned.nnodesText() + ")");
    for (const auto& [n, why] : leave_out) {
      log(LogLevel::kWarn, "node group: leaving node " + std::to_string(n) + " out of the next formation "
                           "(--leave-out-stragglers): " + why);
    }
  }
}

}  // namespace

int launchNode(const NodeDescriptor& planned, const LaunchSettings& settings, const Env& inherited,
               const std::function<void(LogLevel, const std::string&)>& log) {
  NodeDescriptor node = planned;
  auto make_log_dir = [&] {
    if (settings.log_dir.empty()) return true;
    std::error_code ec;
    std::filesystem::create_directories(settings.log_dir, ec);
    if (ec) log(LogLevel::kError, "--log-dir " + settings.log_dir + ": cannot create it (" + ec.message() + ")");
    return !ec;
  };
  if (settings.group.enabled) return make_log_dir() ? runWithGroup(planned, settings, inherited, log) : 2;

  const int wait_s = *node.master_wait_seconds.value;
  if (wait_s > 0 && *node.node_rank.value != 0) {
    const std::string& addr = *node.master_addr.value;
    const int port = *node.master_port.value;
    log(LogLevel::kInfo, "waiting up to " + std::to_string(wait_s) + " s for master " + addr + ":" +
                             std::to_string(port));
    const Status reached = waitForMaster(addr, port, std::chrono::seconds(wait_s));
    if (!reached.ok()) {
      log(LogLevel::kError, "master " + addr + ":" + std::to_string(port) + " (address from " +
                                node.master_addr.source + ") did not accept a connection within " +
                                std::to_string(wait_s) + " s (last error: " + reached.error +
                                "); check that node 0 is running and reachable from this node");
      return 1;
    }
  }

  if (*node.single_worker.value) {
    // This process becomes the worker: same pid, so the platform (SLURM, mpirun) supervises it directly.
    auto workers = expandWorkers(node, inherited);
    const std::string why = process::replaceProcess(settings.command, completeEnvironment(workers.front(), inherited));
    log(LogLevel::kError, why + "; check the command after --");
    return 127;
  }
  if (!make_log_dir()) return 2;
  const int max_restarts = node.restarts_by_outer_launcher ? 0 : *node.max_restarts.value;
  return runWorkers(node, settings, inherited, nullptr, max_restarts, 0).exit_code;
}

}  // namespace taehv
