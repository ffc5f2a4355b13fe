#include "taehv/torchrun_compat.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "taehv/parse.h"
#include "taehv/process/run.h"
#include "taehv/suggest.h"

namespace taehv {
namespace {

/// torchrun's c10d rendezvous port when --rdzv-endpoint gives none (c10d_rendezvous_backend.DEFAULT_PORT).
constexpr int kC10dDefaultPort = 29400;
/// How long the interpreter may take to say whether a -m module exists.
constexpr std::chrono::milliseconds kModuleCheckTimeout{20000};

/// What taehv-run does with one of torchrun's own options (those taehv-run has with the same meaning pass through).
enum class Handling {
  kMapped,    ///< read here and mapped onto taehv-run's options or the worker command
  kNoEffect,  ///< accepted, validated, a note for --verbose says why it changes nothing
  kRefused,   ///< refused with one line unless given its default value
};

struct TorchrunOption {
  const char* name;        ///< the dashed spelling without "--"; the underscore spelling is accepted too
  char short_name;         ///< -m, -r, -t; 0: none
  bool takes_value;
  Handling handling;
  const char* why;         ///< kNoEffect: the note; kRefused: the reason
  const char* default_value = nullptr;  ///< kRefused: this value is accepted (it asks for nothing)
};

// clang-format off
const TorchrunOption kTorchrunOptions[] = {
  {"rdzv-backend", 0, true, Handling::kMapped, ""},
  {"rdzv-endpoint", 0, true, Handling::kMapped, ""},
  {"rdzv-id", 0, true, Handling::kMapped, ""},
  {"rdzv-conf", 0, true, Handling::kMapped, ""},
  {"role", 0, true, Handling::kMapped, ""},
  {"module", 'm', false, Handling::kMapped, ""},
  {"no-python", 0, false, Handling::kMapped, ""},
  {"run-path", 0, false, Handling::kMapped, ""},
  {"python", 0, true, Handling::kMapped, ""},  // taehv-run's own: the interpreter (torchrun: its sys.executable)
  {"redirects", 'r', true, Handling::kMapped, ""},
  {"tee", 't', true, Handling::kMapped, ""},
  {"shutdown-timeout", 0, true, Handling::kMapped, ""},
  {"monitor-interval", 0, true, Handling::kNoEffect,
   "taehv-run learns of a worker's exit at once (SIGCHLD), it polls nothing"},
  {"start-method", 0, true, Handling::kNoEffect,
   "workers are exec'd programs, not Python multiprocessing children: there is no start method"},
  {"event-log-handler", 0, true, Handling::kNoEffect,
   "taehv-run logs its events through its own logger (stderr), not torch's event handlers"},
  {"local-addr", 0, true, Handling::kNoEffect,
   "taehv-run's workers reach node 0 at the master address; this node's own address is not handed out"},
  {"numa-binding", 0, true, Handling::kNoEffect,
   "not applied: taehv-run places workers with its own sizing (--gpu-binding), not torch.numa"},
  {"signals-to-handle", 0, true, Handling::kNoEffect,
   "taehv-run forwards SIGTERM, SIGINT, SIGHUP and SIGQUIT to the workers (torchrun's default set) and no other"},
  {"logs-specs", 0, true, Handling::kRefused,
   "is a Python entry point (torchrun.logs_specs) that taehv-run cannot load; use --log-dir with --redirects/--tee"},
  {"virtual-local-rank", 0, false, Handling::kRefused,
   "(LOCAL_RANK=0 for every worker, one GPU each) is not supported; taehv-run's sizing sets CUDA_VISIBLE_DEVICES"},
  {"duplicate-stdout-filters", 0, true, Handling::kRefused, "is not supported; filter the log files instead", ""},
  {"duplicate-stderr-filters", 0, true, Handling::kRefused, "is not supported; filter the log files instead", ""},
};
// clang-format on

/// torchrun's options that taehv-run has with the same meaning, and their PET_* handled by taehv-run already
/// (descriptor.cc): passed through untouched.
const std::set<std::string> kSameMeaning = {"nnodes", "nproc-per-node", "node-rank", "master-addr", "master-port",
                                            "standalone", "max-restarts", "log-dir", "local-ranks-filter"};

const TorchrunOption* findTorchrunOption(const std::string& name) {
  for (const auto& o : kTorchrunOptions) {
    if (name == o.name) return &o;
  }
  return nullptr;
}

const TorchrunOption* findShortOption(char c) {
  for (const auto& o : kTorchrunOptions) {
    if (o.short_name == c) return &o;
  }
  return nullptr;
}

/// The PET_* variable torchrun reads for option `name` (argparse's dest, upper case).
std::string petName(const std::string& name) {
  std::string out = "PET_";
  for (char c : name) out += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

/// "--nproc_per_node=2" -> name "nproc-per-node", value "2".
struct OptionToken {
  std::string name;
  std::optional<std::string> value;
};
OptionToken splitLong(const std::string& token) {
  OptionToken out;
  const std::size_t eq = token.find('=');
  out.name = token.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
  std::replace(out.name.begin(), out.name.end(), '_', '-');
  if (eq != std::string::npos) out.value = token.substr(eq + 1);
  return out;
}

/// What the walk over the command line collected.
struct Collected {
  std::map<std::string, std::string> values;  ///< torchrun-only options given, by name (flags: "1")
  std::vector<std::pair<std::string, std::vector<std::string>>> passed;  ///< taehv-run options, by name
  std::vector<std::string> rest;        ///< the sub-command and what follows
  std::vector<std::string> positional;  ///< training_script and its arguments
};

/// One value of a torchrun option given either way: the flag, else PET_*, else nullopt.
std::optional<std::string> given(const Collected& c, const Env& env, const std::string& name) {
  auto it = c.values.find(name);
  if (it != c.values.end()) return it->second;
  return envValue(env, petName(name));
}

/// A flag of torchrun's (check_env): given, or PET_<NAME> an integer other than 0.
Checked<bool> givenFlag(const Collected& c, const Env& env, const std::string& name) {
  if (c.values.count(name)) return {"", true};
  const auto pet = envValue(env, petName(name));
  if (!pet) return {"", false};
  const auto n = parseInt(*pet);
  if (!n) return {"env " + petName(name) + "='" + *pet + "': torchrun reads it as an integer (1: --" + name + ")"};
  return {"", *n != 0};
}

bool passedGiven(const Collected& c, const std::string& name) {
  return std::any_of(c.passed.begin(), c.passed.end(), [&](const auto& p) { return p.first == name; });
}

void dropPassed(Collected& c, const std::string& name) {
  c.passed.erase(std::remove_if(c.passed.begin(), c.passed.end(), [&](const auto& p) { return p.first == name; }),
                 c.passed.end());
}

void pass(Collected& c, const std::string& name, std::vector<std::string> tokens) {
  c.passed.emplace_back(name, std::move(tokens));
}

/// Walks `args`: torchrun's options into values, taehv-run's into passed, then the sub-command or the script.
Checked<Collected> walk(const std::vector<std::string>& args, const TorchrunContext& context) {
  Checked<Collected> out;
  Collected& c = out.value;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& t = args[i];
    if (t.size() > 2 && t.compare(0, 2, "--") == 0) {
      OptionToken o = splitLong(t);
      if (const TorchrunOption* opt = findTorchrunOption(o.name)) {
        if (opt->takes_value && !o.value) {
          if (i + 1 >= args.size()) return {"torchrun's --" + o.name + " needs a value"};
          o.value = args[++i];
        } else if (!opt->takes_value && o.value) {
          return {"torchrun's --" + o.name + " takes no value, got '" + *o.value + "'"};
        }
        c.values[o.name] = opt->takes_value ? *o.value : "1";
        continue;
      }
      const OptionArity arity = context.arity(o.name);
      std::vector<std::string> tokens = {t};
      if (arity == OptionArity::kValue && !o.value && i + 1 < args.size()) tokens.push_back(args[++i]);
      pass(c, o.name, tokens);  // kUnknown: the host reports it (with "did you mean")
      continue;
    }
    if (t.size() > 1 && t[0] == '-' && t != "-") {
      const TorchrunOption* opt = findShortOption(t[1]);
      if (opt != nullptr) {  // -m, -r, -t: taehv-run has no one-letter options of these names
        std::string value;
        if (opt->takes_value) {
          if (t.size() > 2) {
            value = t.substr(2);
          } else if (i + 1 < args.size()) {
            value = args[++i];
          } else {
            return {"torchrun's -" + std::string(1, t[1]) + " (--" + opt->name + ") needs a value"};
          }
        } else if (t.size() > 2) {
          return {"torchrun's -" + std::string(1, t[1]) + " (--" + opt->name + ") takes no value, got '" + t + "'"};
        }
        c.values[opt->name] = opt->takes_value ? value : "1";
        continue;
      }
      pass(c, t, {t});
      continue;
    }
    // The first positional: a sub-command (or a near miss of one, reported by the host with "did you mean"), or,
    // with no `--`, torchrun's training_script.
    const bool sub_command = context.has_separator ||
                             std::find(context.sub_commands.begin(), context.sub_commands.end(), t) !=
                                 context.sub_commands.end() ||
                             context.is_backend_command(t);
    const bool near_miss = !didYouMean(t, context.sub_commands).empty() && !std::filesystem::exists(t);
    if (sub_command || near_miss || context.has_separator) {
      c.rest.assign(args.begin() + static_cast<long>(i), args.end());
    } else {
      c.positional.assign(args.begin() + static_cast<long>(i), args.end());
    }
    break;
  }
  return out;
}

/// torchrun's --rdzv-conf: key=value,key=value; the keys its backends read are checked for their type.
Status readRendezvousConf(const std::string& conf, std::vector<std::string>& notes) {
  static const std::set<std::string> kIntegers = {"join_timeout", "last_call_timeout", "close_timeout",
                                                  "read_timeout", "timeout", "keep_alive_interval",
                                                  "keep_alive_max_attempt", "heartbeat"};
  static const std::set<std::string> kBooleans = {"is_host", "use_libuv"};
  static const std::set<std::string> kTexts = {"store_type", "rank", "local_addr"};
  if (conf.empty()) return {};
  std::stringstream in(conf);
  std::string item;
  while (std::getline(in, item, ',')) {
    const std::size_t eq = item.find('=');
    if (item.empty() || eq == std::string::npos || eq == 0) {
      return {"--rdzv-conf '" + conf + "': '" + item + "' is not key=value; write e.g. "
              "--rdzv-conf join_timeout=600,read_timeout=60"};
    }
    const std::string key = item.substr(0, eq);
    const std::string value = item.substr(eq + 1);
    if (kIntegers.count(key)) {
      if (!parseInt(value, 0)) {
        return {"--rdzv-conf " + key + "='" + value + "': give whole seconds (torchrun reads it as an integer)"};
      }
    } else if (kBooleans.count(key)) {
      static const std::set<std::string> kTruth = {"1", "0", "true", "false", "True", "False", "yes", "no", "on", "off"};
      if (!kTruth.count(value)) return {"--rdzv-conf " + key + "='" + value + "': give true or false"};
    } else if (!kTexts.count(key)) {
      notes.push_back("--rdzv-conf " + key + ": not a key torchrun's static or c10d rendezvous reads; ignored");
      continue;
    }
    notes.push_back("--rdzv-conf " + key + "=" + value +
                    ": accepted; taehv-run's node group has no torch rendezvous store to tune with it");
  }
  return {};
}

/// The largest node count of --nnodes N or MIN:MAX (given or PET_NNODES); 1 when unset or unreadable (the host
/// reports a bad --nnodes itself).
int maxNodes(const Collected& c, const Env& env) {
  std::optional<std::string> text = envValue(env, "PET_NNODES");
  for (const auto& [name, tokens] : c.passed) {
    if (name != "nnodes") continue;
    const OptionToken o = splitLong(tokens.front());
    text = o.value ? *o.value : tokens.size() > 1 ? tokens[1] : "";
  }
  if (!text) return 1;
  const std::size_t colon = text->find(':');
  return parseInt(colon == std::string::npos ? *text : text->substr(colon + 1)).value_or(1);
}

/// --rdzv-backend / --rdzv-endpoint / --rdzv-id / --rdzv-conf onto --master-addr, --master-port, --run-id.
Status mapRendezvous(Collected& c, const TorchrunContext& context, TorchrunLine& line) {
  const Env& env = context.env;
  const bool standalone = passedGiven(c, "standalone") || envValue(env, "PET_STANDALONE").value_or("0") == "1";
  const std::string backend = given(c, env, "rdzv-backend").value_or("static");
  const std::optional<std::string> endpoint = given(c, env, "rdzv-endpoint");
  if (Status s = readRendezvousConf(given(c, env, "rdzv-conf").value_or(""), line.notes); !s.ok()) return s;
  if (standalone) {
    if (c.values.count("rdzv-backend") || c.values.count("rdzv-endpoint") || c.values.count("rdzv-id")) {
      line.notes.push_back("--standalone: --rdzv-backend, --rdzv-endpoint and --rdzv-id are ignored, as torchrun "
                           "ignores them");
    }
    return {};
  }
  if (const auto id = given(c, env, "rdzv-id"); id && c.values.count("rdzv-id")) {
    dropPassed(c, "run-id");
    pass(c, "run-id", {"--run-id", *id});  // PET_RDZV_ID: read by taehv-run itself
  }
  if (backend == "etcd" || backend == "etcd-v2") {
    // The etcd node group (core/group, PROTOCOL.md): membership, formation and liveness in etcd through its v3 API,
    // which etcd 3.4+ serves and torchrun's own etcd backends (v2 API, gone in etcd 3.6) do not need to.
    if (!endpoint || endpoint->empty()) {
      return {"--rdzv-backend " + backend + " needs --rdzv-endpoint HOST:PORT[,HOST:PORT...] (the etcd cluster's "
              "client endpoints)"};
    }
    if (backend == "etcd-v2") {
      line.notes.push_back("--rdzv-backend etcd-v2: taehv-run's etcd group speaks etcd's v3 API (etcd 3.4+) to the "
                           "same cluster; torchrun's v2 API is not used");
    }
    pass(c, "rdzv-backend", {"--rdzv-backend", "etcd"});
    pass(c, "rdzv-endpoint", {"--rdzv-endpoint", *endpoint});
    // The master is chosen at each formation: resolveNode records that for master_addr (no --master-addr here).
    return {};
  }
  if (backend != "static" && backend != "c10d") {
    return {"--rdzv-backend '" + backend + "': taehv-run takes torchrun's static, c10d, etcd and etcd-v2 (the "
            "last two: the etcd node group)"};
  }
  const int max_nodes = maxNodes(c, env);
  // c10d without a node rank: taehv-run's own --rdzv-backend c10d makes the node group number the nodes as they
  // arrive (group_plan.cc); with one, the node rank orders them as before.
  const bool by_arrival =
      backend == "c10d" && max_nodes > 1 && !passedGiven(c, "node-rank") && !envValue(env, "PET_NODE_RANK");
  if (by_arrival) pass(c, "rdzv-backend", {"--rdzv-backend", "c10d"});
  if (!endpoint || endpoint->empty()) {
    if (backend == "c10d") {
      return {"--rdzv-backend c10d needs --rdzv-endpoint HOST[:PORT] (the node that hosts the rendezvous)"};
    }
    return {};  // static without an endpoint: --master-addr / --master-port, as torchrun
  }
  // torchrun's parse_rendezvous_endpoint: port 0 asks for a free one (below).
  const Checked<HostPort> parsed = parseHostPort(*endpoint, "--rdzv-endpoint", "node0:29400", 0);
  if (!parsed.ok()) return {parsed.error};
  const std::string host = parsed.value.host;
  int port = parsed.value.port.value_or(-1);
  if (port < 0) {
    if (backend == "static") {
      return {"--rdzv-endpoint '" + *endpoint + "' has no port; the static rendezvous needs HOST:PORT (torchrun: "
              "'Port is absent in endpoint'), or give --master-addr and --master-port"};
    }
    port = kC10dDefaultPort;
  }
  if (port == 0) {
    if (max_nodes > 1) {
      return {"--rdzv-endpoint '" + *endpoint + "': port 0 (any free port) works on one node only; the other nodes "
              "cannot learn it. Give a port, e.g. " + host + ":29400"};
    }
    port = context.free_port();
    line.notes.push_back("--rdzv-endpoint " + *endpoint + ": port 0, this node picked the free port " +
                         std::to_string(port));
  }
  if (passedGiven(c, "master-addr") || passedGiven(c, "master-port")) {
    line.notes.push_back("--master-addr/--master-port: replaced by --rdzv-endpoint " + *endpoint +
                         ", as torchrun uses the endpoint when one is given");
  }
  dropPassed(c, "master-addr");
  dropPassed(c, "master-port");
  pass(c, "master-addr", {"--master-addr", host});
  pass(c, "master-port", {"--master-port", std::to_string(port)});
  if (backend == "c10d") {
    line.notes.push_back("--rdzv-backend c10d: the workers' MASTER_ADDR:MASTER_PORT is the endpoint " + host + ":" +
                         std::to_string(port) + " (torchrun: the first node's address and a port it picks); " +
                         (by_arrival ? "no --node-rank: the node where " + host + " is local leads as node 0 and "
                                       "numbers the others as they join (torchrun: as its rendezvous sorts them)"
                                     : std::string("node ranks come from --node-rank")));
  }
  return {};
}

/// torchrun's --redirects / --tee value: "3" for every rank, or "0:3,1:0" per local rank (Std.from_str).
Status readStreams(const std::string& flag, const std::string& text, LogStreams& all,
                   std::vector<std::pair<int, LogStreams>>& per_rank) {
  auto stream = [](const std::string& s) -> std::optional<LogStreams> {
    const auto n = parseInt(s, 0, 3);
    if (!n) return std::nullopt;
    return static_cast<LogStreams>(*n);
  };
  const std::string usage = "--" + flag + " '" + text + "': give 0 (none), 1 (stdout), 2 (stderr), 3 (both), or per "
                            "local rank e.g. 0:3,1:1";
  if (const auto one = stream(text)) {
    all = *one;
    return {};
  }
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const std::size_t colon = item.find(':');
    if (colon == std::string::npos) return {usage};
    const auto rank = parseInt(item.substr(0, colon), 0);
    const auto s = stream(item.substr(colon + 1));
    if (!rank || !s) return {usage};
    per_rank.emplace_back(*rank, *s);
  }
  if (per_rank.empty()) return {usage};
  return {};
}

/// The interpreter and its origin: --python, PYTHON_EXEC, $VIRTUAL_ENV/bin/python3, python3 on PATH.
std::pair<std::string, std::string> chooseInterpreter(const Collected& c, const Env& env) {
  if (auto it = c.values.find("python"); it != c.values.end()) return {it->second, "--python"};
  if (const auto exec = envValue(env, "PYTHON_EXEC"); exec && !exec->empty()) return {*exec, "env PYTHON_EXEC"};
  if (const auto venv = envValue(env, "VIRTUAL_ENV"); venv && !venv->empty()) {
    const std::string python = *venv + "/bin/python3";
    if (::access(python.c_str(), X_OK) == 0) return {python, "env VIRTUAL_ENV (an active virtual environment)"};
  }
  const std::string found = process::findProgram("python3", env);
  return {found.empty() ? "python3" : found, "python3 on PATH"};
}

/// The worker command, as run.py's config_from_args builds it.
Status buildCommand(const Collected& c, const Env& env, TorchrunLine& line) {
  const Checked<bool> module = givenFlag(c, env, "module");
  const Checked<bool> no_python = givenFlag(c, env, "no-python");
  const Checked<bool> run_path = givenFlag(c, env, "run-path");
  for (const auto* f : {&module, &no_python, &run_path}) {
    if (!f->ok()) return {f->error};
  }
  const std::string& script = c.positional.front();
  const std::vector<std::string> script_args(c.positional.begin() + 1, c.positional.end());
  std::vector<std::string> command;
  if (no_python.value && !run_path.value) {
    if (module.value) {
      return {"torchrun's --no-python and -m/--module cannot be used together (a module needs the interpreter)"};
    }
    command.push_back(script);
    line.script = script;
  } else {
    const auto [python, origin] = chooseInterpreter(c, env);
    line.interpreter = python;
    line.notes.push_back("the training script runs under " + python + " (from " + origin + "; torchrun uses its own "
                         "sys.executable; choose with --python PATH or PYTHON_EXEC)");
    command = {python, "-u"};
    if (run_path.value) {
      line.notes.push_back("--run-path: the script runs as 'python -u SCRIPT' in a process of its own (torchrun runs it "
                           "with runpy.run_path in a spawned interpreter: the same sys.argv and __main__)");
    } else if (module.value) {
      command.push_back("-m");
    }
    command.push_back(script);
    if (module.value && !run_path.value) {
      line.module = script;
    } else {
      line.script = script;
    }
  }
  command.insert(command.end(), script_args.begin(), script_args.end());
  line.command = command;
  return {};
}

/// --nproc-per-node's torchrun words: cpu (this process's CPUs), gpu (taehv-run's auto: one per visible GPU), xpu.
Status mapNprocWords(Collected& c) {
  for (auto& [name, tokens] : c.passed) {
    if (name != "nproc-per-node") continue;
    OptionToken o = splitLong(tokens.front());
    const std::string value = o.value ? *o.value : tokens.size() > 1 ? tokens[1] : "";
    if (value == "cpu") {
      cpu_set_t set;
      CPU_ZERO(&set);
      const int cpus = ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                                     : static_cast<int>(std::thread::hardware_concurrency());
      tokens = {"--nproc-per-node", std::to_string(std::max(1, cpus))};
    } else if (value == "gpu") {
      tokens = {"--nproc-per-node", "auto"};
    } else if (value == "xpu") {
      return {"--nproc-per-node xpu: taehv-run sizes NVIDIA GPUs only; give the number of workers"};
    }
  }
  return {};
}

/// The options accepted without effect or refused: notes and one-line refusals.
Status checkOtherOptions(const Collected& c, const TorchrunContext& context, TorchrunLine& line) {
  for (const auto& opt : kTorchrunOptions) {
    if (opt.handling == Handling::kMapped) continue;
    const bool flag_given = c.values.count(opt.name) > 0;
    std::optional<std::string> value = given(c, context.env, opt.name);
    if (!value) continue;
    const std::string source = flag_given ? "--" + std::string(opt.name) : "env " + petName(opt.name);
    if (opt.handling == Handling::kRefused) {
      if (opt.default_value != nullptr && *value == opt.default_value) continue;
      if (!opt.takes_value && !flag_given && parseInt(*value).value_or(1) == 0) continue;
      return {"torchrun's " + source + " " + opt.why};
    }
    if (std::string(opt.name) == "start-method" && *value != "spawn" && *value != "fork" && *value != "forkserver") {
      return {source + " '" + *value + "': torchrun takes spawn, fork or forkserver"};
    }
    if (std::string(opt.name) == "monitor-interval" && !parseNumber(*value, 0)) {
      return {source + " '" + *value + "': give seconds, e.g. 0.1"};
    }
    line.notes.push_back(source + "=" + *value + ": accepted; " + opt.why);
  }
  return {};
}

}  // namespace

Checked<TorchrunLine> readTorchrunLine(const std::vector<std::string>& args, const TorchrunContext& given_context) {
  Checked<Collected> walked = walk(args, given_context);
  if (!walked.ok()) return {walked.error};
  Collected& c = walked.value;
  // The PET_* of torchrun's own options stand for them in torchrun's form only (a training script given): in
  // taehv-run's form (`--`, or a sub-command) a pod's PET_RDZV_* must not outrank what its backend plans.
  TorchrunContext context = given_context;
  if (c.positional.empty()) {
    for (const auto& opt : kTorchrunOptions) context.env.erase(petName(opt.name));
  }
  Checked<TorchrunLine> out;
  TorchrunLine& line = out.value;
  if (Status s = checkOtherOptions(c, context, line); !s.ok()) return {s.error};
  if (Status s = mapNprocWords(c); !s.ok()) return {s.error};
  if (Status s = mapRendezvous(c, context, line); !s.ok()) return {s.error};
  if (const auto role = given(c, context.env, "role")) {
    if (role->empty()) return {"--role is empty; give the workers' role name (ROLE_NAME), e.g. trainer"};
    line.role = *role;
  }
  if (const auto timeout = given(c, context.env, "shutdown-timeout")) {
    if (!parseInt(*timeout, 0)) return {"--shutdown-timeout '" + *timeout + "': give whole seconds, e.g. 30"};
    dropPassed(c, "shutdown-grace");
    pass(c, "shutdown-grace", {"--shutdown-grace", *timeout});
  }
  for (const auto& [flag, all, per_rank] :
       {std::tuple{"redirects", &line.redirects_default, &line.redirects},
        std::tuple{"tee", &line.tees_default, &line.tees}}) {
    if (const auto value = given(c, context.env, flag)) {
      if (Status s = readStreams(flag, *value, *all, *per_rank); !s.ok()) return {s.error};
    }
  }
  if (!c.positional.empty()) {
    if (Status s = buildCommand(c, context.env, line); !s.ok()) return {s.error};
  } else {
    for (const char* needs_script : {"module", "no-python", "run-path", "python"}) {
      if (c.values.count(needs_script)) {
        return {std::string("--") + needs_script + " needs torchrun's positional training script after the options, "
                "e.g. taehv-run --nproc-per-node 2 train.py"};
      }
    }
  }
  for (const auto& [name, tokens] : c.passed) line.launcher_args.insert(line.launcher_args.end(), tokens.begin(), tokens.end());
  line.launcher_args.insert(line.launcher_args.end(), c.rest.begin(), c.rest.end());
  return out;
}

Status checkTorchrunWorker(const TorchrunLine& line, const Env& env) {
  if (line.module) {
    process::RunRequest probe;
    probe.argv = {line.interpreter, "-c",
                  "import importlib.util, sys\n"
                  "try:\n    found = importlib.util.find_spec(sys.argv[1]) is not None\n"
                  "except Exception:\n    found = False\n"
                  "sys.exit(0 if found else 3)\n",
                  *line.module};
    probe.env = env;
    const process::RunResult r = process::runProgram(probe, kModuleCheckTimeout);
    if (!r.started()) return {"-m " + *line.module + ": cannot start the interpreter: " + r.spawn_error};
    if (r.status() == 3) {
      return {"-m " + *line.module + ": no such module for " + line.interpreter + " (importlib cannot find it); check "
              "the name, the current folder and PYTHONPATH"};
    }
    if (r.status() != 0) {
      return {"-m " + *line.module + ": " + line.interpreter + " failed (exit " + std::to_string(r.status()) +
              ") while looking for it; choose the interpreter with --python PATH"};
    }
    return {};
  }
  if (!line.script) return {};
  if (line.interpreter.empty()) {  // --no-python: a program
    if (process::findProgram(*line.script, env).empty() || ::access(process::findProgram(*line.script, env).c_str(),
                                                                    X_OK) != 0) {
      return {"training program '" + *line.script + "' (--no-python) is not an executable file nor on PATH"};
    }
    return {};
  }
  if (!std::filesystem::is_regular_file(*line.script)) {
    return {"training script '" + *line.script + "' does not exist (from " + std::filesystem::current_path().string() +
            "); torchrun runs it as " + line.interpreter + " -u " + *line.script};
  }
  if (::access(line.interpreter.c_str(), X_OK) != 0 && process::findProgram(line.interpreter, env).empty()) {
    return {"interpreter '" + line.interpreter + "' not found; give --python PATH or set PYTHON_EXEC"};
  }
  return {};
}

WorkerLogStreams workerLogStreams(const TorchrunLine& line, int local_rank) {
  auto pick = [local_rank](LogStreams all, const std::vector<std::pair<int, LogStreams>>& per_rank) {
    if (per_rank.empty()) return all;
    for (const auto& [rank, s] : per_rank) {
      if (rank == local_rank) return s;
    }
    return LogStreams::kNone;
  };
  WorkerLogStreams out;
  const auto redirect = pick(line.redirects_default, line.redirects);
  const auto tee = pick(line.tees_default, line.tees);
  // A tee is a redirect that also shows on the console (torchrun: tee takes precedence for its streams).
  out.files = static_cast<LogStreams>(static_cast<int>(redirect) | static_cast<int>(tee));
  out.console_too = tee;
  return out;
}

std::string workerLogFolder(const std::string& log_dir, const std::string& run_id, int restart, int local_rank) {
  return (std::filesystem::path(log_dir) / run_id / ("attempt_" + std::to_string(restart)) /
          std::to_string(local_rank))
      .string();
}

}  // namespace taehv
