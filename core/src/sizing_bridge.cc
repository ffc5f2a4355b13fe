#include "taehv/sizing_bridge.h"

#include "sizing_bridge_detail.h"
#include "taehv/default_worker.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "taehv/sizing/nccl.h"
#include "taehv/sizing/profiles.h"
#include "taehv/sizing/sizing.h"

namespace taehv {
namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

constexpr const char* kConfigEnv = "TAEHV_CONFIG";
constexpr const char* kConfigSetEnv = "TAEHV_CONFIG_SET";  // "key=value;key=value"

/// --gpu-binding, --collective-timeout, --nccl-buffsize from `vm` into `in` (binding, policy).
Status addSizingFlags(const po::variables_map& vm, sizing::NodeSizingInput& in) {
  const std::string mode = vm.count("gpu-binding") ? vm["gpu-binding"].as<std::string>() : "local-rank";
  auto parsed = sizing::parseGpuBinding(mode);
  if (!parsed) {
    return {"--gpu-binding '" + mode +
            "': use local-rank (cuda:LOCAL_RANK, torchrun's way), visible-devices "
            "(CUDA_VISIBLE_DEVICES = the worker's GPU only) or none"};
  }
  in.binding = *parsed;
  if (vm.count("collective-timeout")) {
    const double s = vm["collective-timeout"].as<double>();
    if (!(s >= 1) || s > 7 * 86400) return {"--collective-timeout must be 1..604800 seconds, got " + std::to_string(s)};
    in.policy.collective_timeout.set(std::chrono::seconds(std::llround(s)), "flag --collective-timeout");
  }
  if (vm.count("nccl-buffsize")) {
    const std::string text = vm["nccl-buffsize"].as<std::string>();
    auto bytes = sizing::parseByteSize(text);
    if (!bytes) return {"--nccl-buffsize '" + text + "': give bytes with an optional unit, e.g. 16M or 33554432"};
    in.policy.nccl_buffsize_bytes.set(*bytes, "flag --nccl-buffsize");
  }
  return {};
}

}  // namespace

Status applyProfile(const std::string& config, NodeDescriptor& node, sizing::TrainProfile* chosen) {
  std::error_code ec;
  if (fs::is_regular_file(config, ec)) {
    node.extra_env[kConfigEnv].set(config, "flag --config (a file: given to the trainer as it is)", Origin::kFlag);
    node.profile = {config, {}, ""};
    return {};
  }
  if (!fs::is_directory(config, ec)) {
    return {"--config " + config +
            ": no such file or folder; give a trainer config file or a folder of "
            "profiles such as examples/configs"};
  }
  const Checked<sizing::ProfileChoice> chosen_profile =
      sizing::chooseProfile(config, *node.nnodes.value, *node.nproc_per_node.value);
  if (!chosen_profile.ok()) return {chosen_profile.error};
  const sizing::ProfileChoice& c = chosen_profile.value;
  node.extra_env[kConfigEnv].set(c.config_path, "flag --config " + config + ": " + c.reason, Origin::kProfile);
  node.profile = {c.config_path, {}, c.reason};
  if (!c.overrides.empty()) {
    std::string joined;
    for (const auto& [key, value] : c.overrides) {
      node.profile.sets.push_back(key + "=" + value);
      joined += (joined.empty() ? "" : ";") + node.profile.sets.back();
    }
    node.extra_env[kConfigSetEnv].set(joined, "derived profile: " + c.reason, Origin::kProfile);
  }
  node.notes.push_back("profile: " + c.reason);
  if (chosen != nullptr) *chosen = c.profile;
  return {};
}

void addSizingOptions(po::options_description& desc) {
  // clang-format off
  desc.add_options()
    ("gpu-binding", po::value<std::string>()->value_name("MODE"),
        "how each worker owns its GPU: local-rank (cuda:LOCAL_RANK, torchrun's way; default), visible-devices "
        "(CUDA_VISIBLE_DEVICES = its GPU only) or none (no binding, no GPU-count check)")
    ("collective-timeout", po::value<double>()->value_name("SECONDS"),
        "workers' collective timeout, TAEHV_COLLECTIVE_TIMEOUT_S [default by node count: 1: 3600, 2-7: 7200, 8+: "
        "14400]")
    ("nccl-buffsize", po::value<std::string>()->value_name("BYTES"),
        "NCCL_BUFFSIZE for GPU workers, e.g. 16M [default: 16M up to 7 nodes, 32M from 8]")
    ("oversubscribe",
        ("start more than " + std::to_string(sizing::kCpuWorkersPerCore) + " CPU workers per usable core on a node "
         "without GPUs (refused without it: a mistyped --nproc-per-node would fork until fork fails)").c_str())
    ("config", po::value<std::string>()->value_name("DIR|FILE"),
        "trainer config: a folder of <name>-<NODES>x<GPUS>.yaml profiles (the one matching the world size is "
        "used, else one derived by linear LR scaling) or one config file");
  // clang-format on
}

Checked<sizing::NodeSizingInput> nodeSizingInput(const po::variables_map& vm, const Env& env,
                                                 const NodeDescriptor* node) {
  Checked<sizing::NodeSizingInput> result;
  sizing::NodeSizingInput& in = result.value;
  in.env = env;
  if (Status s = addSizingFlags(vm, in); !s.ok()) return {s.error};
  in.oversubscribe = vm.count("oversubscribe") > 0;
  if (node == nullptr) return result;
  in.single_worker = node->single_worker.has() && *node->single_worker.value;
  // auto: nothing (flag, backend plan, PET_NPROC_PER_NODE) gave a number.
  if (node->nproc_per_node.origin != Origin::kDefault || in.single_worker) in.nproc_requested = node->nproc_per_node;
  in.nnodes = *node->nnodes.value;
  in.scheduler_gpus = node->gpus_on_node;
  in.scheduler_gpu_indices = node->gpu_indices;
  in.cpu_cores = *node->cpu_cores.value;
  in.master_addr = *node->master_addr.value;
  return result;
}

Status applySizing(const po::variables_map& vm, const Env& env, NodeDescriptor& node) {
  const Checked<sizing::NodeSizingInput> in = nodeSizingInput(vm, env, &node);
  if (!in.ok()) return {in.error};
  const bool auto_nproc = !in.value.nproc_requested.has();
  sizing::NodeSizing s = sizing::sizeNode(in.value);
  if (!s.ok()) return {s.error()};

  if (auto_nproc) node.nproc_per_node = s.nproc.nproc_per_node;
  if (!node.gpus_on_node.has() && s.nproc.use_gpus) {
    node.gpus_on_node.set(static_cast<int>(s.visible.gpus.size()), "detected: " + s.visible.source);
  }
  // A backend's own extra variables win over sizing's defaults; the user's environment already won inside.
  for (const auto& [name, value] : s.nodeEnv()) {
    if (!node.extra_env.count(name)) node.extra_env[name] = value;
  }
  for (int local : node.localRanks()) node.local_env[local] = s.workerEnv(local);
  for (const auto& n : s.notes()) node.notes.push_back("sizing: " + n);

  if (vm.count("config")) {
    if (Status applied = applyProfile(vm["config"].as<std::string>(), node, nullptr); !applied.ok()) return applied;
  }
  return validateNode(node);
}

std::vector<std::string> profileTrainerArgs(const NodeDescriptor& node) {
  std::vector<std::string> args;
  if (node.profile.config.empty()) return args;
  args = {"--config", node.profile.config};
  for (const auto& set : node.profile.sets) {
    args.push_back("--set");
    args.push_back(set);
  }
  return args;
}

bool insertProfileArgs(const NodeDescriptor& node, std::vector<std::string>& command) {
  std::vector<std::string> args = profileTrainerArgs(node);
  if (args.empty() || command.empty() || fs::path(command[0]).filename() != default_worker::kProgram) return false;
  if (std::find(command.begin(), command.end(), "--config") != command.end()) return false;
  const long at = command.size() > 1 && command[1] == "train" ? 2 : 1;
  command.insert(command.begin() + at, args.begin(), args.end());
  return true;
}

}  // namespace taehv
