// The built-in commands of taehv-run, one file each in this folder; cli.cc lists them in subCommands().
#pragma once

#include "taehv/cli.h"
#include "taehv/launch.h"

namespace taehv {

/// No sub-command: launch this node's workers (or hand the job to a backend that takes it over).
int runLaunch(Cli& cli);
/// `describe`: print each worker's rank, world and environment with provenance.
int runDescribe(Cli& cli);
/// `plugins`: list the backend plugins on the search path.
int runPlugins(Cli& cli);
/// `status FILE`: print a job status file (<log-dir>/status.json) as a table.
int runStatus(Cli& cli);
/// `doctor [--output-dir DIR] [--data PATH] [--connect-timeout S]`: check this node before a job.
int runDoctor(Cli& cli);

/// How this node's workers run, from the launch options in `vm` (--shutdown-grace, --log-dir, --local-ranks-filter,
/// --no-prefix) for `node` as sized, checked as the launch checks them: the one reading of them, by the launch,
/// describe and doctor, so that what describe and doctor pass the launch takes. The command and the node group are
/// left for the launch to fill in.
Checked<LaunchSettings> launchSettings(const boost::program_options::variables_map& vm, const NodeDescriptor& node);

/// What the launch checks of its options before it starts anything, for `r` (sized, when this node runs the
/// workers): a backend that takes over gets the job flags (Cli::jobFlags), else this node's launchSettings. For
/// describe and doctor, which start nothing.
Status checkLaunchOptions(const Cli& cli, const boost::program_options::variables_map& vm, const ResolvedLaunch& r);

}  // namespace taehv
