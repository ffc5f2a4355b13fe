// Starting one child process: own process group, parent-death signal, pipes, clean signal state.
#pragma once

#include <sys/types.h>

#include <string>

#include "taehv/checked.h"
#include "taehv/process/run.h"
#include "taehv/process/supervisor.h"

namespace taehv::process {

/// A started child and the supervisor's ends of its pipes (all close-on-exec, read ends non-blocking).
struct SpawnedChild {
  pid_t pid = -1;      ///< also its process group id
  int stdout_fd = -1;  ///< read end of the child's stdout
  int stderr_fd = -1;  ///< read end of the child's stderr
  int stdin_fd = -1;   ///< write end of the child's stdin when spec.stdin_pipe, else -1
};

/// Starts spec as a child, or says why none was started (command not found, not executable, bad working
/// directory, ...; the message names the command). The child gets its own process group (pgid == pid),
/// PR_SET_PDEATHSIG=SIGKILL (with the check that the parent did not die before it was set), default dispositions
/// for the signals the supervisor handles, an empty signal mask, stdin from /dev/null or a pipe, stdout/stderr
/// into pipes (or, when !capture_output, ours: then stdout_fd and stderr_fd are -1), spec.cwd, exactly spec.env.
/// PATH lookup as findProgram: spec.env's PATH (as Python's subprocess does), else ours. Blocks only until the
/// child has called execve (or failed to).
Checked<SpawnedChild> spawnChild(const ChildSpec& spec, bool capture_output = true);

}  // namespace taehv::process
