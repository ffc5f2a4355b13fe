// taehv-train's own sub-commands. Each takes the arguments after the sub-command name, prints errors to
// stderr and returns the exit status (0 ok, 2 bad usage or input with a message saying what to fix, 1 failure).
#pragma once

#include <string>
#include <vector>

namespace taehv::train {

/// `train [--config FILE] [--set key=value]... [--resume latest|PATH] [--stop-at-step N] [--print-config]`
int trainCommand(const std::vector<std::string>& args);

/// `eval --checkpoint latest|PATH [--config FILE] [--set key=value]... [--no-ema]`
int evalCommand(const std::vector<std::string>& args);

/// `checkpoint info DIR` | `checkpoint consolidate DIR [--out FOLDER]`
int checkpointCommand(const std::vector<std::string>& args);

}  // namespace taehv::train
