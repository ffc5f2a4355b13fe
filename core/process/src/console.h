// What the supervisor writes to its own stderr: whole writes that survive a full or closed pipe, the names of
// children and exits, and the failure summary.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "taehv/process/supervisor.h"

namespace taehv::process {

/// Writes all of data to fd, waiting while a non-blocking fd is full. Gives up on errors such as EPIPE:
/// lost console output must not stop supervision.
void writeAll(int fd, std::string_view data);

/// Writes `text` to stderr (writeAll).
void say(const std::string& text);

/// "exited with code N" or "died by signal SIGNAME (N)".
std::string describeExit(int exit_code, int sig);

/// "rank R [label] on host" for messages about one child.
std::string who(const ChildSpec& spec);

/// Prints the worker-failure block (rank, label, host, exit, time, restarts, stderr tail) to stderr.
void printSummary(const ChildExit& f, int restarts, int max_restarts, std::size_t tail_lines);

}  // namespace taehv::process
