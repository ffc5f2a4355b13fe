// The parts of the sizing bridge (taehv/sizing_bridge.h) that the doctor command shares with the launch path.
#pragma once

#include <boost/program_options.hpp>
#include <string>

#include "taehv/descriptor.h"
#include "taehv/sizing/profiles.h"
#include "taehv/sizing/sizing.h"

namespace taehv {

/// --gpu-binding, --collective-timeout, --nccl-buffsize from `vm`. Sets `error` on bad values.
bool sizingPolicy(const boost::program_options::variables_map& vm, sizing::GpuBinding& binding,
                  sizing::TuningPolicy& policy, std::string& error);

/// Sizing's input for `node`, the one place a resolved node becomes it: the sizing flags, the environment and,
/// when `node` is not null, its counts, cores, master and the platform's GPUs (nproc_requested stays unset when
/// nothing gave a count: auto). Returns "" or the error of a bad sizing flag.
std::string nodeSizingInput(const boost::program_options::variables_map& vm, const Env& env, const NodeDescriptor* node,
                            sizing::NodeSizingInput& in);

/// The --config profile for `node` into its extra_env and notes. Returns "" or the error.
std::string applyProfile(const std::string& config, NodeDescriptor& node, sizing::TrainProfile* chosen);

}  // namespace taehv
