// Cluster sizing in taehv-run (the logic lives in taehv::sizing, core/sizing/): the launch options it adds, what
// it does to a resolved node before anything starts. The `doctor` sub-command is core/src/commands/doctor.cc.
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <vector>

#include "taehv/descriptor.h"
#include "taehv/plugin_api.h"

namespace taehv {

/// --gpu-binding, --collective-timeout, --nccl-buffsize, --config (added to the launch options).
void addSizingOptions(boost::program_options::options_description& desc);

/// Sizes a resolved node in place, before any worker starts: --nproc-per-node auto (when no flag, plan or PET_*
/// variable gave a number: one worker per visible GPU, else 1), the refusal of more workers than GPUs, the
/// tuning variables (node.extra_env), each worker's device (node.local_env), the --config profile
/// (TAEHV_CONFIG / TAEHV_CONFIG_SET in node.extra_env) and notes saying why. Fails with a one-line error.
Status applySizing(const boost::program_options::variables_map& vm, const Env& env, NodeDescriptor& node);

/// The trainer arguments for the profile chosen by applySizing ("--config FILE" and "--set k=v"...), to append
/// when the worker is the default trainer; empty when no --config was given.
std::vector<std::string> profileTrainerArgs(const NodeDescriptor& node);

/// Puts profileTrainerArgs(node) into `command` right after the program (and its `train` sub-command) when the
/// program is taehv-train and the command has no --config of its own, so the user's own --set still win.
/// Returns whether it did.
bool insertProfileArgs(const NodeDescriptor& node, std::vector<std::string>& command);

}  // namespace taehv
