// The built-in commands of taehv-run, one file each in this folder; cli.cc lists them in subCommands().
#pragma once

#include "taehv/cli.h"

namespace taehv {

/// No sub-command: launch this node's workers (or hand the job to a backend that takes it over).
int runLaunch(Cli& cli);
/// `describe`: print each worker's rank, world and environment with provenance.
int runDescribe(Cli& cli);
/// `plugins`: list the backend plugins on the search path.
int runPlugins(Cli& cli);
/// `doctor [--output-dir DIR] [--data PATH] [--connect-timeout S]`: check this node before a job.
int runDoctor(Cli& cli);

}  // namespace taehv
