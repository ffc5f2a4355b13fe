#include "taehv/cli.h"

#include <unistd.h>

#include <boost/dll/runtime_symbol_info.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <set>

#include "commands/commands.h"
#include "taehv/default_worker.h"
#include "taehv/env.h"
#include "taehv/group_plan.h"
#include "taehv/log.h"
#include "taehv/process/progress.h"
#include "taehv/sizing_bridge.h"
#include "taehv/suggest.h"


namespace taehv {
namespace po = boost::program_options;
namespace {

/// Launch options forwarded as typed to every node's taehv-run by a backend that takes over the launch
/// (JobRequest::launcher_args). Not those that place a node in the job (--nnodes, --node-rank, --nproc-per-node,
/// --master-addr, --master-port, --standalone, --restart-count): the backend gets them typed (JobFlags) and sets them
/// per node.
const std::set<std::string> kForwardedOptions = {
    "run-id",  "max-restarts", "shutdown-grace", "hang-timeout", "log-dir",  "local-ranks-filter", "no-prefix",
    // sizing (taehv/sizing_bridge.h): each node sizes itself
    "gpu-binding", "collective-timeout", "nccl-buffsize", "oversubscribe", "config",
    // the node group (a token file is not forwarded: the SSH fan-out hands every node its job's token)
    "node-timeout", "group-port", "no-node-group", "rdzv-backend", "rdzv-endpoint", "leave-out-stragglers",
    "node-local-checkpoints"};

/// Does the option named `name` (without dashes) of `desc` take a value?
bool takesValue(const po::options_description& desc, const std::string& name) {
  const po::option_description* d = desc.find_nothrow(name, false, false, false);
  return d != nullptr && d->semantic()->max_tokens() > 0;
}

/// torchrun spells options both ways (--nproc_per_node, --nproc-per-node); accept both.
std::string normalizeOption(const std::string& token) {
  if (token.size() < 3 || token.compare(0, 2, "--") != 0) return token;
  std::string out = token;
  const std::size_t end = std::min(out.find('='), out.size());
  for (std::size_t i = 2; i < end; ++i) {
    if (out[i] == '_') out[i] = '-';
  }
  return out;
}

/// The value of --NAME in `tokens` (either --NAME V or --NAME=V), every occurrence.
std::vector<std::string> scanOption(const std::vector<std::string>& tokens, const std::string& name) {
  std::vector<std::string> values;
  const std::string flag = "--" + name;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::string t = normalizeOption(tokens[i]);
    if (t == flag && i + 1 < tokens.size()) {
      values.push_back(tokens[++i]);
    } else if (t.compare(0, flag.size() + 1, flag + "=") == 0) {
      values.push_back(t.substr(flag.size() + 1));
    }
  }
  return values;
}

/// Fails with why `value` of --`flag` is outside [min, max].
Status checkRange(const std::optional<int>& value, const char* flag, int min, int max) {
  if (!value || (*value >= min && *value <= max)) return {};
  return {std::string("--") + flag + " must be in " + std::to_string(min) + ".." + std::to_string(max) + ", got " +
          std::to_string(*value)};
}

std::string joinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

/// The launch flags given in `vm`, or what is wrong with one of them.
Checked<LaunchFlags> launchFlags(const po::variables_map& vm) {
  Checked<LaunchFlags> out;
  LaunchFlags& flags = out.value;
  if (vm.count("nnodes")) {
    if (Status s = parseNnodes(vm["nnodes"].as<std::string>(), "--nnodes", flags); !s.ok()) return {s.error};
  }
  if (vm.count("node-rank")) flags.node_rank = vm["node-rank"].as<int>();
  if (vm.count("nproc-per-node")) {
    const std::string text = vm["nproc-per-node"].as<std::string>();
    flags.nproc_per_node = parseInt(text);
    if (!flags.nproc_per_node && text != "auto") {  // auto = unset: sizing decides (applySizing)
      return {"--nproc-per-node '" + text + "': give the number of worker processes, e.g. 2, or auto"};
    }
  }
  if (vm.count("master-addr")) flags.master_addr = vm["master-addr"].as<std::string>();
  if (vm.count("master-port")) flags.master_port = vm["master-port"].as<int>();
  if (vm.count("run-id")) flags.run_id = vm["run-id"].as<std::string>();
  if (vm.count("max-restarts")) flags.max_restarts = vm["max-restarts"].as<int>();
  if (vm.count("restart-count")) flags.restart_count = vm["restart-count"].as<int>();
  flags.standalone = vm.count("standalone") > 0;
  flags.no_node_group = vm.count("no-node-group") > 0;
  return out;
}


}  // namespace

Checked<std::chrono::milliseconds> shutdownGrace(const po::variables_map& vm) {
  const double grace = vm["shutdown-grace"].as<double>();
  if (!(grace >= 0) || grace > 86400) return {"--shutdown-grace must be 0..86400 seconds, got " + std::to_string(grace)};
  return {"", std::chrono::milliseconds(static_cast<long long>(std::llround(grace * 1000)))};
}

Checked<std::chrono::milliseconds> hangTimeout(const po::variables_map& vm) {
  if (!vm.count("hang-timeout")) return {"", process::kDefaultHangFloor};
  const double s = vm["hang-timeout"].as<double>();
  if (s == 0) return {"", std::chrono::milliseconds(0)};
  if (!(s >= kMinHangTimeout && s <= kMaxHangTimeout)) {
    char value[64];
    std::snprintf(value, sizeof value, "%g", s);
    return {std::string("--hang-timeout must be 0 (off) or ") + std::to_string(static_cast<int>(kMinHangTimeout)) +
            ".." + std::to_string(static_cast<int>(kMaxHangTimeout)) + " seconds, got " + value};
  }
  return {"", std::chrono::milliseconds(static_cast<long long>(std::llround(s * 1000)))};
}

const std::vector<SubCommand>& subCommands() {
  static const std::vector<SubCommand> table = {
      {"describe", "print each worker's rank, world and environment with provenance; start nothing", runDescribe},
      {"plugins", "list the backend plugins found on the plugin search path", runPlugins},
      {"doctor", "check this node before a job (backend, plan, master, GPUs, NCCL, network, folders); exit 1 on a fail",
       runDoctor},
      {"status", "print a running job's status file (<log-dir>/status.json) as a table: each rank's step and section",
       runStatus},
  };
  return table;
}

Cli::Cli(std::vector<std::string> args, Env env, std::string self_path)
    : env_(std::move(env)), self_path_(std::move(self_path)) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") {
      has_separator_ = true;
      command_.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      break;
    }
    raw_args_.push_back(args[i]);
  }
  host_.env = env_;
  host_.self_path = self_path_;
  host_.version = TAEHV_VERSION;
  host_.log = [this](LogLevel level, const std::string& message) { log(level, message); };
}

void Cli::log(LogLevel level, const std::string& message) const { taehv::log::write(level, message); }

po::options_description Cli::launchOptions() const {
  po::options_description desc("launch options");
  // clang-format off
  desc.add_options()
    ("backend", po::value<std::string>()->default_value("auto")->value_name("NAME"),
        "backend plugin (slurm, k8s, pai, ssh, ...), 'auto' (detect) or 'local' (no plugin)")
    ("plugin-dir", po::value<std::vector<std::string>>()->composing()->value_name("DIR"),
        "also search DIR for plugins (repeatable; searched before TAEHV_PLUGIN_PATH and the install folder)")
    ("nnodes", po::value<std::string>()->value_name("N|MIN:MAX"),
        ("number of nodes, at most " + std::to_string(kMaxNodes) + "; MIN:MAX (torchrun's elastic form): the job "
         "forms with MIN..MAX nodes and, with --max-restarts, re-forms with the nodes alive after a loss "
         "[env PET_NNODES, default 1]").c_str())
    ("node-rank", po::value<int>()->value_name("R"), "this node's rank 0..N-1 [env PET_NODE_RANK, default 0]")
    ("nproc-per-node", po::value<std::string>()->value_name("N"),
        ("worker processes on this node (at most " + std::to_string(kMaxNprocPerNode) + "; world size at most " +
         std::to_string(kMaxWorldSize) + "), or auto [env PET_NPROC_PER_NODE; default auto: one per visible GPU, "
         "else 1]").c_str())
    ("master-addr", po::value<std::string>()->value_name("HOST"),
        "address of node 0 [env PET_MASTER_ADDR; required when nnodes > 1]")
    ("master-port", po::value<int>()->value_name("PORT"),
        ("TCP port on the master [env PET_MASTER_PORT, default " + std::to_string(kDefaultMasterPort) + "]").c_str())
    ("standalone", "one node on this machine: master 127.0.0.1, a free port, a random run id")
    ("run-id", po::value<std::string>()->value_name("ID"), "job id given to workers [env PET_RDZV_ID, default none]")
    ("max-restarts", po::value<int>()->value_name("N"),
        "restart the workers up to N times after a failure; with the node group every node restarts together, "
        "re-formed with the nodes alive (--nnodes MIN:MAX) [env PET_MAX_RESTARTS, default 0]")
    ("restart-count", po::value<int>()->value_name("R"),
        "restarts an outer launcher that restarts the whole job has already made (the SSH fan-out passes it): "
        "workers get TORCHELASTIC_RESTART_COUNT=R, and this taehv-run leaves restarting to that launcher")
    ("shutdown-grace",
        po::value<double>()
            ->default_value(std::chrono::duration<double>(process::kDefaultShutdownGrace).count())
            ->value_name("SECONDS"),
        "after a failure, SIGTERM the other workers, SIGKILL them after this long")
    ("hang-timeout", po::value<double>()->value_name("SECONDS"),
        ("a worker that reports progress (TAEHV_PROGRESS_SOCKET; taehv-train does) and is silent for longer than "
         "max(SECONDS, 10 x its 99th-percentile step time) is hung: every local rank's stacks go to the log folder, "
         "then the workers stop as after a failure (longer bounds before the first step, in checkpoints and "
         "evaluations); 0 = off [default " + std::to_string(process::kDefaultHangFloor.count()) + "]").c_str())
    ("leave-out-stragglers",
        "with --nnodes MIN:MAX and --max-restarts: node 0 leaves a node it named a straggler (its ranks' busy time "
        "over 1.5x the other nodes') out of the next re-formation, while MIN nodes remain (the TCP node group)")
    ("node-timeout",
        po::value<double>()->value_name("SECONDS"),
        ("multi-node: a node not heard from for this long is lost and every node stops its workers [default " +
         std::to_string(group::kDefaultNodeTimeout.count()) + ", at least " +
         std::to_string(group::kMinNodeTimeout.count()) + "]").c_str())
    ("group-port", po::value<int>()->value_name("PORT"),
        "multi-node: node 0's port for the node group [env TAEHV_GROUP_PORT, default master port + 1]")
    ("job-token-file", po::value<std::string>()->value_name("FILE"),
        "multi-node: the job's secret for the node group, first line of FILE [default env TAEHV_JOB_TOKEN]")
    ("no-node-group", "multi-node: do not form the node group (no detection of lost nodes across nodes)")
    ("rdzv-backend", po::value<std::string>()->value_name("NAME"),
        "multi-node: etcd keeps the node group in an etcd cluster, so any node (node 0 too) may be lost; c10d "
        "without --node-rank numbers the nodes as they join, led by the node where --master-addr is local "
        "[env PET_RDZV_BACKEND, default: the group led by node 0]")
    ("rdzv-endpoint", po::value<std::string>()->value_name("HOST:PORT[,...]"),
        "multi-node: with --rdzv-backend etcd, the etcd cluster's client endpoints [env PET_RDZV_ENDPOINT]")
    ("node-local-checkpoints", po::value<std::string>()->value_name("DIR"),
        "multi-node, etcd: this node keeps its own copy of each checkpoint in DIR; each formation agrees on the "
        "newest step every node holds and the workers get it as TAEHV_RESUME_STEP")
    ("log-dir", po::value<std::string>()->value_name("DIR"), "also write each worker's output to DIR/rank_<RANK>.log")
    ("local-ranks-filter", po::value<std::string>()->value_name("LIST"),
        "show output of these local ranks only, e.g. 0 or 0,2 (log files still get everything)")
    ("no-prefix", "do not prefix output lines with [node:rank]")
    ("verbose,v", "log debug messages (plugin search, detection)")
    ("help,h", "show this help")
    ("version", "print the version");
  // clang-format on
  addSizingOptions(desc);
  return desc;
}

po::options_description Cli::backendOptions() const {
  po::options_description desc("backend options");
  std::set<std::string> added;
  const auto generic = launchOptions();
  for (const auto& plugin : backends_.plugins()) {
    std::vector<OptionSpec> specs;
    for (OptionSpec& spec : plugin.backend->options()) {
      spec.short_name = 0;  // one-letter names are the launcher's own (-v, -h)
      if (generic.find_nothrow(spec.name, false) == nullptr && added.insert(spec.name).second) specs.push_back(spec);
    }
    addOptionSpecs(desc, specs, " [" + plugin.name + "]");
  }
  return desc;
}

std::vector<LoadedPlugin*> Cli::allPlugins(std::vector<std::string>& errors) {
  return backends_.allPlugins(backend_, self_path_, plugin_dirs_, env_, errors);
}

std::optional<int> Cli::parse(const po::options_description& extra, po::variables_map& vm) {
  po::options_description all;
  all.add(launchOptions()).add(backendOptions()).add(extra);
  if (sub_command_ != nullptr &&
      std::any_of(args_.begin(), args_.end(), [](const std::string& t) { return t == "--help" || t == "-h"; })) {
    std::cout << "usage: taehv-run [options] " << sub_command_->name << " [options] [-- command...]\n\n"
              << sub_command_->summary << ".\n\n"
              << all;
    return 0;
  }
  std::vector<std::string> tokens;
  for (const auto& t : args_) tokens.push_back(normalizeOption(t));
  try {
    po::parsed_options parsed = po::command_line_parser(tokens).options(all).style(commandLineStyle()).run();
    for (const auto& option : parsed.options) {
      if (option.position_key >= 0 || option.string_key.empty()) {
        const std::string token = option.original_tokens.empty() ? "" : option.original_tokens.front();
        log(LogLevel::kError, "unexpected argument '" + token + "'; put the worker command after --, e.g. "
                              "taehv-run [options] -- python train.py");
        return kUsageError;
      }
    }
    po::store(parsed, vm);
    po::notify(vm);
    launcher_args_.clear();
    for (const auto& option : parsed.options) {
      if (kForwardedOptions.count(option.string_key)) {
        launcher_args_.insert(launcher_args_.end(), option.original_tokens.begin(), option.original_tokens.end());
      }
    }
  } catch (const po::unknown_option& e) {
    log(LogLevel::kError, unknownOption(e.get_option_name(), all) + "; see taehv-run --help");
    return kUsageError;
  } catch (const po::error& e) {
    log(LogLevel::kError, std::string(e.what()) + "; see taehv-run --help");
    return kUsageError;
  }
  return std::nullopt;
}

Checked<std::vector<std::string>> Cli::workerCommand() const {
  if (!command_.empty()) return {"", command_};
  std::filesystem::path trainer = std::filesystem::path(self_path_).parent_path() / default_worker::kProgram;
  if (::access(trainer.c_str(), X_OK) != 0) {
    return {"no worker command after -- and the default worker " + trainer.string() +
            " does not exist; give one (taehv-run [options] -- python train.py) or build taehv-train"};
  }
  return {"", {trainer.string()}};
}

Checked<ResolvedLaunch> Cli::resolve(const po::variables_map& vm, bool plan_when_taken_over) {
  Checked<ResolvedLaunch> result;
  ResolvedLaunch& r = result.value;
  Checked<LaunchFlags> flags = launchFlags(vm);
  if (!flags.ok()) return {flags.error};
  flags.value.formation_master = formationMaster(groupFlags(vm), env_);
  std::string passed_over;
  if (Status s = chooseBackend(flags.value, r, passed_over); !s.ok()) return {s.error};
  if (Status s = backendRequest(vm, r); !s.ok()) return {s.error};
  r.request.nproc_per_node = flags.value.nproc_per_node;
  if (Status s = planNode(flags.value, plan_when_taken_over, r); !s.ok()) return {s.error};
  if (!passed_over.empty()) r.node.notes.push_back(passed_over);
  return result;
}

Status Cli::chooseBackend(const LaunchFlags& flags, ResolvedLaunch& r, std::string& passed_over) {
  if (!backends_.errors().empty() && !(backend_ == "auto" && flags.standalone)) return {backends_.errors().front()};
  // An explicit --nnodes or --node-rank is the manual multi-node form: the flags say where this node stands, so
  // no backend is detected from the environment (stray RANK/WORLD_SIZE/PET_* of an outer launcher's worker
  // would otherwise outrank them). Which backend would have claimed the environment becomes a note.
  const bool manual = flags.nnodes.has_value() || flags.node_rank.has_value();
  if (backend_ == "auto" && !flags.standalone) {
    const Checked<BackendChoice> choice = backends_.detect(host_, manual);
    if (!choice.ok()) return {choice.error};
    passed_over = choice.value.passed_over;
    r.plugin = choice.value.plugin;
    r.detection = choice.value.detection;
  } else if (backend_ != "auto" && backend_ != "local") {
    if (!backend_loaded_) return {backends_.errors().front()};  // not reached: load() failed with an error
    r.plugin = &backends_.plugins().front();
  }
  return {};
}

Status Cli::backendRequest(const po::variables_map& vm, ResolvedLaunch& r) const {
  const po::options_description declared = backendOptions();
  // Backend options belong to their backend only.
  for (const auto& [name, owners] : backends_.optionOwners()) {
    if (!vm.count(name)) continue;
    const bool mine = r.plugin && std::find(owners.begin(), owners.end(), r.plugin->name) != owners.end();
    if (!mine) {
      return {"--" + name + " is an option of backend " + joinNames(owners) + ", but the backend in use is " +
              (r.plugin ? r.plugin->name : std::string("local")) + "; add --backend " + owners.front()};
    }
    r.request.options[name] = optionTexts(vm[name], !takesValue(declared, name));
  }
  return {};
}

Checked<JobFlags> Cli::jobFlags(const po::variables_map& vm) const {
  Checked<LaunchFlags> flags = launchFlags(vm);
  if (!flags.ok()) return {flags.error};
  if (!vm["shutdown-grace"].defaulted()) {
    const Checked<std::chrono::milliseconds> grace = shutdownGrace(vm);
    if (!grace.ok()) return {grace.error};
    flags.value.shutdown_grace = grace.value;
  }
  const LaunchFlags& f = flags.value;
  for (const Status& range :
       {checkRange(f.nnodes, "nnodes", 1, kMaxNodes), checkRange(f.node_rank, "node-rank", 0, kMaxNodes - 1),
        checkRange(f.master_port, "master-port", 1, 65535), checkRange(f.max_restarts, "max-restarts", 0, kMaxRestarts),
        checkRange(f.restart_count, "restart-count", 0, kMaxRestarts)}) {
    if (!range.ok()) return {range.error};
  }
  return {"", static_cast<const JobFlags&>(f)};  // what a backend gets of them
}

Status Cli::planNode(const LaunchFlags& flags, bool plan_when_taken_over, ResolvedLaunch& r) const {
  PlanResult plan;
  const std::string backend_name = r.plugin ? r.plugin->name : "local";
  if (r.plugin) {
    r.backend_takes_over = r.plugin->backend->takesOverLaunch(host_, r.request);
    // The backend starts the job elsewhere; the nodes' own taehv-run resolve their plans there.
    if (r.backend_takes_over && !plan_when_taken_over) return {};
    plan = r.plugin->backend->plan(host_, r.request);
    if (!plan.ok()) return {"backend " + backend_name + ": " + plan.error};
  }
  auto node = resolveNode(flags, r.plugin ? &plan.value : nullptr, backend_name, env_, hostName(),
                          availableCpuCores(), freeTcpPort);
  if (!node.ok()) return {node.error};
  r.node = std::move(node.value);
  r.node.role = torchrun_.role;
  return {};
}

int Cli::run() {
  // torchrun's form (a training script, no `--`): what follows the script is the script's, not ours to scan. Read
  // with the launch options only (the backends' are not loaded yet); dispatch() reads it again with all of them.
  std::vector<std::string> ours = raw_args_;
  if (!has_separator_) {
    const Checked<TorchrunLine> line = readTorchrunLine(raw_args_, torchrunContext(launchOptions(), false));
    if (line.ok()) ours = line.value.launcher_args;
  }
  // Before the plugins load, so that --verbose shows where they are searched for.
  if (std::find(ours.begin(), ours.end(), "--verbose") != ours.end() ||
      std::find(ours.begin(), ours.end(), "-v") != ours.end()) {
    taehv::log::setVerbose(true);
  }
  // Where plugins come from is needed before the full option table exists (backends add options).
  auto backends = scanOption(ours, "backend");
  if (!backends.empty()) backend_ = backends.back();
  plugin_dirs_ = scanOption(ours, "plugin-dir");
  // --standalone means this machine only: auto-detection is skipped, so the plugins need not be loaded either
  // (that keeps the launch overhead of the common single-machine case at a few milliseconds).
  if (backend_ == "auto" && std::find(ours.begin(), ours.end(), "--standalone") != ours.end()) {
    backend_ = "local";
  }
  // A failed load is not reported here: --help, --version and `plugins` still work; resolve() and a backend's
  // sub-command report errors() when they need the backend.
  backend_loaded_ = backends_.load(backend_, self_path_, plugin_dirs_, env_, host_);
  return dispatch();
}

TorchrunContext Cli::torchrunContext(const po::options_description& table, bool with_backend_commands) const {
  TorchrunContext context;
  context.env = env_;
  context.arity = [&table](const std::string& name) {
    const po::option_description* d = table.find_nothrow(name, false, false, false);
    if (d == nullptr) return OptionArity::kUnknown;
    return d->semantic()->max_tokens() > 0 ? OptionArity::kValue : OptionArity::kFlag;
  };
  for (const auto& c : subCommands()) context.sub_commands.push_back(c.name);
  if (with_backend_commands) {
    context.is_backend_command = [this](const std::string& name) {
      for (const auto& p : backends_.plugins()) {
        for (const auto& c : p.backend->commands()) {
          if (c.name == name) return true;
        }
      }
      return false;
    };
  }
  context.has_separator = has_separator_;
  context.free_port = freeTcpPort;
  return context;
}

std::optional<int> Cli::readTorchrun(const po::options_description& table) {
  Checked<TorchrunLine> line = readTorchrunLine(raw_args_, torchrunContext(table, true));
  if (!line.ok()) {
    log(LogLevel::kError, line.error);
    return kUsageError;
  }
  torchrun_ = std::move(line.value);
  raw_args_ = torchrun_.launcher_args;
  if (torchrun_.command) {
    command_ = *torchrun_.command;
    has_separator_ = true;
  }
  for (const auto& note : torchrun_.notes) log(LogLevel::kDebug, "torchrun: " + note);
  return std::nullopt;
}

int Cli::dispatch() {
  po::options_description all;
  all.add(launchOptions()).add(backendOptions());
  if (auto done = readTorchrun(all)) return *done;
  // The first token that is neither an option nor an option's value names the sub-command.
  std::size_t sub = raw_args_.size();
  for (std::size_t i = 0; i < raw_args_.size(); ++i) {
    const std::string t = normalizeOption(raw_args_[i]);
    if (t.size() > 1 && t[0] == '-') {
      const bool is_long = t.compare(0, 2, "--") == 0;
      // Boost.ProgramOptions finds a short option by its dashed name ("-v"), a long one by its bare name.
      const std::string key = is_long ? t.substr(2, t.find('=') == std::string::npos ? std::string::npos
                                                                                     : t.find('=') - 2)
                                      : t.substr(0, 2);
      if (all.find_nothrow(key, false, false, false) == nullptr) {
        log(LogLevel::kError, unknownOption(raw_args_[i], all) + "; see taehv-run --help");
        return kUsageError;
      }
      if (is_long && t.find('=') == std::string::npos && takesValue(all, key)) ++i;
      continue;
    }
    sub = i;
    break;
  }
  const bool want_version = std::find(raw_args_.begin(), raw_args_.begin() + static_cast<long>(sub),
                                      "--version") != raw_args_.begin() + static_cast<long>(sub);
  const bool want_help = std::any_of(raw_args_.begin(), raw_args_.begin() + static_cast<long>(sub),
                                     [](const std::string& t) { return t == "--help" || t == "-h"; });
  if (want_version) {
    std::cout << "taehv-run " << TAEHV_VERSION << " (plugin API " << kPluginApiVersion << ")\n";
    return 0;
  }
  if (want_help) {
    std::cout << "usage: taehv-run [--backend NAME|auto|local] [launch options] [-- command...]\n"
                 "       taehv-run [options] SUB-COMMAND [options]\n"
                 "       taehv-run --backend NAME BACKEND-COMMAND ARGS...\n"
                 "       taehv-run [torchrun's options] [--python PATH] SCRIPT [ARGS...]   (torchrun's command line: "
                 "docs/launching.md)\n\n"
                 "Starts this node's share of a distributed job with torchrun's worker environment. Without a\n"
                 "command after --, the worker is taehv-train beside taehv-run.\n\nsub-commands:\n";
    for (const auto& c : subCommands()) std::cout << "  " << c.name << std::string(12 - c.name.size(), ' ') << c.summary << "\n";
    for (const auto& p : backends_.plugins()) {
      for (const auto& c : p.backend->commands()) {
        std::cout << "  --backend " << p.name << " " << c.name << ": " << c.summary << "\n";
      }
    }
    std::cout << "\n" << all;
    return 0;
  }

  args_ = raw_args_;
  if (sub == raw_args_.size() && torchrun_.command) {
    if (Status worker = checkTorchrunWorker(torchrun_, env_); !worker.ok()) {
      log(LogLevel::kError, worker.error);  // before anything starts
      return kUsageError;
    }
  }
  if (sub == raw_args_.size()) return runLaunch(*this);
  const std::string name = raw_args_[sub];
  args_.erase(args_.begin() + static_cast<long>(sub));
  for (const auto& c : subCommands()) {
    if (c.name != name) continue;
    sub_command_ = &c;
    return c.run(*this);
  }
  // A backend's own sub-command: the arguments after its name, parsed by its declaration (CommandSpec).
  std::vector<std::string> names;
  for (const auto& c : subCommands()) names.push_back(c.name);
  if (backend_ != "auto" && backend_ != "local") {
    if (!backend_loaded_ || !backends_.errors().empty()) {
      log(LogLevel::kError, backends_.errors().front());
      return kUsageError;
    }
    LoadedPlugin& plugin = backends_.plugins().front();
    for (const auto& c : plugin.backend->commands()) {
      names.push_back(c.name);
      if (c.name != name) continue;
      std::vector<std::string> command_args(raw_args_.begin() + static_cast<long>(sub) + 1, raw_args_.end());
      if (has_separator_) {
        command_args.push_back("--");
        command_args.insert(command_args.end(), command_.begin(), command_.end());
      }
      return runBackendCommand(*plugin.backend, plugin.name, c, host_, command_args);
    }
  } else {
    for (const auto& p : backends_.plugins()) {
      for (const auto& c : p.backend->commands()) {
        if (c.name == name) {
          log(LogLevel::kError, "'" + name + "' is a sub-command of backend " + p.name + "; run taehv-run --backend " +
                                    p.name + " " + name + " ...");
          return kUsageError;
        }
      }
    }
  }
  log(LogLevel::kError, "unknown sub-command '" + name + "'" + didYouMean(name, names) +
                            "; to run a program put it after --: taehv-run [options] -- " + name + " ...");
  return kUsageError;
}

int runTaehvRun(int argc, char** argv) {
  taehv::log::setup("taehv-run", taehv::log::Place::fromEnvironment(processEnvironment()));
  boost::dll::fs::error_code ec;
  std::string self = boost::dll::program_location(ec).string();
  std::vector<std::string> args(argv + 1, argv + argc);
  Cli cli(std::move(args), processEnvironment(), self);
  try {
    return cli.run();
  } catch (const PluginFault& e) {  // a plugin broke the no-exception rule (LoadedPlugin::backend's guard)
    cli.log(LogLevel::kError, e.what());
    return kUsageError;
  }
}

}  // namespace taehv
