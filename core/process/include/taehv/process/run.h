// Running programs to completion and capturing what they print: sbatch, kubectl, aliyun, the SSH preflight's
// probes; and replacing this process with a worker. With supervise() (supervisor.h), the only place that
// starts programs (no fork/exec/popen outside core/process).
//
// Contract:
//  - Each program runs as spawnChild starts a supervised worker: its own process group, SIGKILL when this
//    process dies (PR_SET_PDEATHSIG), default signal dispositions, exactly the given environment.
//  - stdout, stderr and stdin are served together with poll(): a program that fills one pipe while we would be
//    blocked on another cannot deadlock the caller.
//  - At most `max_parallel` programs run at once (0: all at once); the next one starts as soon as one has ended
//    (exited and its pipes closed), in request order.
//  - The deadline is one for the whole call, not one per program: at the deadline every program still running
//    gets SIGKILL to its process group (what it wrote until then is kept), and those whose turn has not come
//    are never started (timed_out and not_started). Output held open by a process that left the group (setsid)
//    is given up 1 s after the kill.
//  - While stdin bytes are written SIGPIPE is ignored (a program may exit without reading them), then restored:
//    call from the main thread, not while supervise() runs.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace taehv::process {

/// One program to run.
struct RunRequest {
  std::vector<std::string> argv;           ///< argv[0] is looked up in env's PATH (else ours) when it has no '/'
  std::map<std::string, std::string> env;  ///< the program's complete environment
  std::optional<std::string> input;        ///< bytes written to its stdin, then EOF; nullopt: stdin is /dev/null
  bool capture_output = true;              ///< false: it writes to our stdout and stderr (out, err stay empty)
};

/// How one program ended and what it printed.
struct RunResult {
  int exit_code = -1;       ///< valid when it was started and neither signal nor timed_out
  int signal = 0;           ///< the terminating signal, 0 if none
  bool timed_out = false;   ///< killed at the deadline, or never started before it (not_started)
  bool not_started = false; ///< the deadline came before a free slot did (runPrograms' max_parallel)
  std::string spawn_error;  ///< not started, and why (names the program); then nothing else is valid
  std::string out;          ///< its stdout (when captured)
  std::string err;          ///< its stderr (when captured)

  bool started() const { return spawn_error.empty(); }
  /// The shell's `$?`: the exit code, or 128 + the signal; 127 when it could not be started.
  int status() const { return !started() ? 127 : signal != 0 ? 128 + signal : exit_code; }
};

/// No deadline.
inline constexpr std::chrono::milliseconds kNoTimeout{0};

/// All requests at once in runPrograms.
inline constexpr std::size_t kAllAtOnce = 0;

/// Runs the requests, at most `max_parallel` at a time (kAllAtOnce: all), and waits for all of them; kills what
/// still runs after `timeout` from the call (kNoTimeout: never) and starts nothing after it. Results are in the
/// order of `requests`.
std::vector<RunResult> runPrograms(const std::vector<RunRequest>& requests,
                                   std::chrono::milliseconds timeout = kNoTimeout,
                                   std::size_t max_parallel = kAllAtOnce);

/// runPrograms for one request.
RunResult runProgram(const RunRequest& request, std::chrono::milliseconds timeout = kNoTimeout);

/// Replaces this process with argv (same pid: a platform that supervises us supervises the program), with
/// exactly `env`; argv[0] is looked up in this process's PATH when it has no '/' (execvpe). Returns only when
/// that failed, with a message naming argv[0] and the reason.
std::string replaceProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env);

/// Looks argv0 up in the search path `path` (colon separated, empty entries mean "."), like execvp: the first
/// executable regular file (links followed). Returns "" when there is none. A name containing '/' is returned
/// unchanged.
std::string findExecutable(const std::string& argv0, const std::string& path);

/// Where runProgram would find `name` with environment `env`: findExecutable on env's PATH, else on ours,
/// else on /usr/local/bin:/usr/bin:/bin.
std::string findProgram(const std::string& name, const std::map<std::string, std::string>& env);

}  // namespace taehv::process
