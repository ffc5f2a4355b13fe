// Starting and supervising a group of child processes: the workers of one node, or the ssh clients of an
// SSH fan-out. No libtorch, no plugin types: the core and the plugins both link this (taehv::process).
//
// Contract:
//  - Each child runs in its own process group and gets SIGKILL when this process dies (PR_SET_PDEATHSIG),
//    so no child outlives the supervisor, even after `kill -9` of it. A small watchdog process (forked once
//    per supervise() call) also SIGKILLs every child's process group when the supervisor dies, so processes a
//    child started in its group die too; only processes that leave the group (setsid) escape that case.
//  - During supervise() this process is the child subreaper (PR_SET_CHILD_SUBREAPER) of its children's trees:
//    a process a child started and left behind is re-parented to us, even after setsid(), instead of to init.
//  - When a generation ends, whatever is left in the children's process groups is killed, so a background
//    process of a finished child cannot hold the run open; then every process re-parented to us (and its
//    process group) gets SIGKILL and is reaped, repeatedly, until none is left: nothing a child started
//    survives the generation. Children this process had before supervise() and the guardian are left alone.
//    Not covered: a process that escaped the group by setsid() while this process is killed with `kill -9`
//    (it goes to the next subreaper or init; the guardian knows process groups only).
//  - Output is relayed whole line by whole line, prefixed "[label] " unless prefixing is off; lines of
//    different children never interleave mid-line.
//  - Fail fast: the first child that exits non-zero or dies by a signal makes the others get SIGTERM, then
//    SIGKILL after shutdown_grace. With restarts left, all children are then started again.
//  - SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 received by this process are forwarded to every child's
//    process group; SIGINT/SIGTERM/SIGHUP then end the run like a failure (no restart).
//  - Called from the main thread; installs its signal handlers (and ignores SIGPIPE) for the duration of the
//    call only. Children start with default dispositions for those signals and an empty signal mask.
//  - An outside stop (options.external_stop: the node group) ends the run like a failure: every child gets
//    SIGTERM, SIGKILL after shutdown_grace, no restart, and the result carries its reason even when the workers
//    then exit 0 (a trainer that saves a checkpoint on SIGTERM does). on_failure is called once, for the first
//    local failure, before the other children are signalled (the node group tells the other nodes).
//  - With options.progress (progress.h), each generation's children get their progress socket (and torchelastic's
//    timer pipe when enabled) in their environment; a rank the watch finds hung has its stacks captured while every
//    child still runs, then fails the generation as a failed worker does (SIGTERM, SIGKILL, restart per max_restarts).
//  - A command that cannot be started (not found, not executable, bad cwd) counts as a failure with exit code
//    127 and a message naming the command; it is not restarted (retrying would not help).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace taehv::process {

/// One child to start.
struct ChildSpec {
  std::vector<std::string> argv;          ///< argv[0] is looked up in PATH when it has no '/'
  std::map<std::string, std::string> env; ///< the child's complete environment
  std::string label;                      ///< output prefix without brackets, e.g. "0:3" (node:rank)
  int rank = -1;                          ///< global rank, for summaries
  std::string host;                       ///< host name, for summaries
  std::string cwd;                        ///< working directory; empty = inherit
  std::string log_file;                   ///< if set, the child's output (unprefixed) is also appended here
  bool echo = true;                       ///< relay output to our stdout/stderr (false: --local-ranks-filter)
  /// torchrun's per-stream logs (--redirects / --tee): if set, the child's stdout / stderr (unprefixed) is written
  /// here too (the file is truncated at the start, as torchrun does for each attempt).
  std::string stdout_file, stderr_file;
  bool echo_stdout = true;  ///< with echo: relay stdout to the console (false: redirected to stdout_file only)
  bool echo_stderr = true;  ///< with echo: relay stderr to the console (false: redirected to stderr_file only)
  /// Give the child a stdin pipe that stays open while the supervisor lives (a remote side can watch it
  /// for EOF); otherwise stdin is /dev/null.
  bool stdin_pipe = false;
  /// With stdin_pipe: bytes written to it right after the start (a secret that must not be in argv: the SSH
  /// fan-out's job token). At most a pipe buffer (4 KiB), so the write never blocks.
  std::string stdin_data;
};

/// How long workers get between SIGTERM and SIGKILL when the run ends early (--shutdown-grace's default).
inline constexpr std::chrono::seconds kDefaultShutdownGrace{30};

/// A stop decided outside this process's children (the node group): `fd` becomes readable, `reason()` says why.
struct ExternalStop {
  int fd = -1;                          ///< polled for readability; -1 = none
  std::function<std::string()> reason;  ///< one line for the summary
  /// Asked once the stop fired: the SIGTERM -> SIGKILL delay for it when shorter than shutdown_grace (the node
  /// group lost a node: no collective of the workers can finish, so waiting saves nothing). Null, or a delay not
  /// shorter: shutdown_grace.
  std::function<std::chrono::milliseconds()> grace;
};

struct ChildExit;
class ProgressWatch;

struct SupervisorOptions {
  std::chrono::milliseconds shutdown_grace{kDefaultShutdownGrace};  ///< SIGTERM -> SIGKILL delay
  int max_restarts = 0;
  bool prefix_output = true;
  std::string error_file;            ///< TORCHELASTIC_ERROR_FILE: torchelastic-format summary on failure
  std::size_t stderr_tail_lines = 20;
  ExternalStop external_stop;
  /// Called (from supervise()'s thread) for the first failing child of a generation, with a one-line description.
  std::function<void(const ChildExit&, const std::string& description)> on_failure;
  /// A child exiting with this code (not a signal) was stopped *because of* another child (a remote taehv-run
  /// stopped by its node group): while others still run it is not taken as the first failure for up to
  /// consequence_window, so the child that caused it is named; after that, or when no other fails, it is. -1: none.
  int consequence_exit_code = -1;
  std::chrono::milliseconds consequence_window{0};
  /// The workers' progress channel and hang watch (progress.h), owned by the caller; null: none. A hang it finds
  /// fails the generation like a failed worker (stop, restart per max_restarts); ChildExit::hang says so.
  ProgressWatch* progress = nullptr;
  /// Called (from supervise()'s thread) on every pass of its loop, after the progress reports were read: at least
  /// every 500 ms while workers run. Null: none.
  std::function<void()> on_tick;
};

/// How a child ended.
struct ChildExit {
  int rank = -1;
  std::string label;
  std::string host;
  int exit_code = 0;  ///< valid when signal == 0
  int signal = 0;     ///< the terminating signal, or 0
  std::vector<std::string> stderr_tail;  ///< its last stderr lines
  std::string hang;  ///< when the watch found it hung (then stopped): which section, how long; else ""
};

struct SupervisorResult {
  /// 0 when every child exited 0; else the first failure's exit code, or 128 + its signal,
  /// or 128 + the signal that interrupted us.
  int exit_code = 0;
  std::optional<ChildExit> first_failure;
  int restarts = 0;         ///< restarts performed
  int interrupt_signal = 0; ///< SIGINT/SIGTERM/SIGHUP that ended the run, or 0
  std::string external_stop; ///< the outside stop's reason when one ended the run (exit_code kExternalStopExit)
};

/// The exit code when an outside stop (the node group) ended the run: 75 (EX_TEMPFAIL), so that a launcher above
/// (the SSH fan-out) and scripts can tell "stopped because of another node" from a worker's own failure.
inline constexpr int kExternalStopExit = 75;

/// Starts make_children(restart_count) and supervises them until all exit 0, a failure is final, or a signal
/// ends the run. Prints a one-line-per-fact failure summary to stderr and writes options.error_file if set.
SupervisorResult supervise(const std::function<std::vector<ChildSpec>(int restart_count)>& make_children,
                           const SupervisorOptions& options);

}  // namespace taehv::process
