// Starting one node's workers from its resolved descriptor: waiting for the master, exec'ing a single worker,
// or handing the workers to the process supervisor (taehv::process::supervise).
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "taehv/descriptor.h"
#include "taehv/group_plan.h"
#include "taehv/torchrun_compat.h"
#include "taehv/plugin_api.h"
#include "taehv/process/progress.h"
#include "taehv/process/supervisor.h"

namespace taehv {

/// How this node's workers are run, beyond the descriptor.
struct LaunchSettings {
  std::vector<std::string> command;  ///< the worker's argv (never empty)
  std::chrono::milliseconds shutdown_grace{process::kDefaultShutdownGrace};
  bool prefix_output = true;
  std::string log_dir;           ///< "" = no per-rank log files; else <log_dir>/rank_<RANK>.log
  /// --hang-timeout: the floor of the hang bound (process/progress.h); 0 = no hang detection.
  std::chrono::milliseconds hang_timeout{process::kDefaultHangFloor};
  std::vector<int> local_ranks;  ///< --local-ranks-filter: only these local ranks echo output; empty = all
  /// torchrun's --redirects / --tee with --log-dir, by local rank: its streams go to stdout.log / stderr.log in
  /// workerLogFolder() (torchrun_compat.h) instead of rank_<RANK>.log. Empty: the rank_<RANK>.log layout.
  std::map<int, WorkerLogStreams> stream_logs;
  GroupPlan group;               ///< the node group (off unless planGroup() turned it on)
  /// --leave-out-stragglers: under --nnodes MIN:MAX, node 0 leaves the nodes named stragglers out of the next
  /// re-formation (the TCP group only).
  bool leave_out_stragglers = false;
};

/// Runs this node: with the node group on, forms the group first (node 0 listens, the others join; waits the
/// plan's master wait, else group::kDefaultJoinTimeout), takes the ranks it agreed on (nodes may run different
/// counts: node k starts at the sum of the counts of nodes 0..k-1) and stops the workers when the group says so; without it,
/// waits for the master when the plan asks (nodes other than 0). Then either replaces this process with the single
/// worker (never returns on success) or supervises all local workers and returns the supervisor's exit code.
/// With the group on, --max-restarts restarts through the group: after a stop the nodes alive re-form (elastic
/// --nnodes MIN:MAX: with MIN..MAX nodes, node ranks given again in --node-rank order) and start their workers again
/// with the restart count one higher; a member that lost node 0 ends (75), never re-forms (PROTOCOL.md).
/// Returns 1 with a logged message when the master never came up or the group did not form or stopped the job,
/// 2 when the agreed ranks are impossible (world size over the limit, contradicting the plan's counts),
/// 127 when a single worker's command cannot be executed.
int launchNode(const NodeDescriptor& node, const LaunchSettings& settings, const Env& inherited,
               const std::function<void(LogLevel, const std::string&)>& log);

/// Waits up to `timeout` for `addr` to resolve and `port` to accept a TCP connection; fails with the last error.
Status waitForMaster(const std::string& addr, int port, std::chrono::milliseconds timeout);

/// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then released), or 0.
int freeTcpPort();

/// CPUs this process may run on (sched_getaffinity), at least 1.
int availableCpuCores();

/// This machine's host name.
std::string hostName();

/// Parses --local-ranks-filter ("0", "0,2", "0-3,5"); fails on bad syntax or an empty list.
Checked<std::vector<int>> parseRankList(const std::string& text);

/// --log-dir `dir` as the launch will use it, looked at without creating anything: a folder this process can write in,
/// or a path that does not exist yet whose nearest existing parent is one (the launch creates the rest). Fails with
/// one line naming what is in the way: a file, a device, a FIFO, a folder that cannot be written.
Status checkLogDir(const std::string& dir);

}  // namespace taehv
