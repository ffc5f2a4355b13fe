// The parts of the sizing bridge (taehv/sizing_bridge.h) that the doctor command shares with the launch path.
#pragma once

#include <boost/program_options.hpp>
#include <string>

#include "taehv/descriptor.h"
#include "taehv/sizing/profiles.h"
#include "taehv/sizing/sizing.h"

namespace taehv {

/// Sizing's input for `node`, the one place a resolved node becomes it: the sizing flags (--gpu-binding,
/// --collective-timeout, --nccl-buffsize), the environment and, when `node` is not null, its counts, cores, master
/// and the platform's GPUs (nproc_requested stays unset when nothing gave a count: auto). Fails on a bad sizing flag.
Checked<sizing::NodeSizingInput> nodeSizingInput(const boost::program_options::variables_map& vm, const Env& env,
                                                 const NodeDescriptor* node);

/// The --config profile for `node` into its extra_env and notes (and into `chosen` when not null).
Status applyProfile(const std::string& config, NodeDescriptor& node, sizing::TrainProfile* chosen);

}  // namespace taehv
