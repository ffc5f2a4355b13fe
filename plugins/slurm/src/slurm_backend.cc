// The SLURM backend: detection and node plan (taehv/slurm/slurm_env.h), plus the sub-commands
//   hostnames [LIST]   one host per line, like `scontrol show hostnames` (LIST defaults to SLURM_JOB_NODELIST)
//   hostlist LIST...   the compressed form, like `scontrol show hostlist`
//   submit ...         render an sbatch script and submit it (taehv/slurm/sbatch_script.h)
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "taehv/env.h"
#include "taehv/files/output_file.h"
#include "taehv/plugin_api.h"
#include "taehv/process/run.h"
#include "taehv/slurm/hostlist.h"
#include "taehv/slurm/sbatch_script.h"
#include "taehv/slurm/slurm_env.h"

namespace taehv::slurm {
namespace {

/// The backend class the plugin's factory creates.
class SlurmBackend final : public Backend {
 public:
  Detection detect(const HostContext& host) const override;
  PlanResult plan(const HostContext& host, const PlanRequest& request) const override;
  std::vector<OptionSpec> options() const override;
  std::vector<CommandSpec> commands() const override;
  int runCommand(const HostContext& host, const std::string& name, const CommandArgs& args) override;
};

void logTo(const HostContext& host, LogLevel level, const std::string& message) {
  if (host.log) host.log(level, message);
}

/// Joins the arguments with commas so `hostnames a b,c` reads as one list, as SLURM's separators allow.
std::string joinArgs(const std::vector<std::string>& args) {
  std::string out;
  for (const std::string& a : args) out += (out.empty() ? "" : ",") + a;
  return out;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

/// `hostnames` and `hostlist` (`compress`): `args` are the words the host parsed (a word starting with '-' is an
/// unknown option to it, and no host name starts with '-').
int runHostnames(const HostContext& host, const std::vector<std::string>& args, bool compress) {
  std::string list = joinArgs(args);
  if (args.empty()) {
    const std::string* nodelist = findEnv(host.env, "SLURM_JOB_NODELIST");
    if (nodelist == nullptr) {
      logTo(host, LogLevel::kError,
            std::string("usage: taehv-run --backend slurm ") + (compress ? "hostlist" : "hostnames") +
                " LIST (e.g. n[1-4]); without LIST, SLURM_JOB_NODELIST is used but it is not set");
      return 2;
    }
    list = *nodelist;
  }
  HostlistResult hosts = expandHostlist(list);
  if (!hosts.ok()) {  // bad input, like every usage error: exit 2
    logTo(host, LogLevel::kError, hosts.error);
    return 2;
  }
  if (compress) {
    std::cout << compressHostlist(hosts.value) << '\n';
  } else {
    std::string out;
    for (const std::string& h : hosts.value) out.append(h).push_back('\n');
    std::cout << out;
  }
  std::cout.flush();
  return std::cout ? 0 : 1;
}

int runSubmit(const HostContext& host, const CommandArgs& args) {
  SubmitOptions opts;
  if (Status parsed = parseSubmitArgs(args, opts); !parsed.ok()) {
    logTo(host, LogLevel::kError, "submit: " + parsed.error + "; see taehv-run --backend slurm submit --help");
    return 2;
  }
  std::string script = renderSbatchScript(opts, host.self_path, host.version);
  if (!opts.script_file.empty()) {
    if (Status written = files::writeFileAtomically(opts.script_file, script); !written.ok()) {
      logTo(host, LogLevel::kError, "submit: --script: " + written.error);
      return 1;
    }
  }
  if (opts.dry_run) {
    std::cout << script;
    std::cout.flush();
    return 0;
  }
  std::string file = opts.script_file;
  bool temporary = file.empty();
  if (temporary) {
    const std::string tmpdir = envValue(host.env, "TMPDIR").value_or("/tmp");
    std::string pattern = tmpdir + "/taehv-sbatch-XXXXXX";
    int fd = mkstemp(pattern.data());
    if (fd < 0) {
      logTo(host, LogLevel::kError, "submit: cannot create a script file in " + tmpdir + ": " + std::strerror(errno));
      return 1;
    }
    bool ok = write(fd, script.data(), script.size()) == static_cast<ssize_t>(script.size());
    close(fd);
    file = pattern;
    if (!ok) {
      unlink(file.c_str());
      logTo(host, LogLevel::kError, "submit: cannot write " + file);
      return 1;
    }
  }
  const process::RunResult sbatch = process::runProgram({{"sbatch", "--parsable", file}, host.env, std::nullopt, true});
  if (temporary) unlink(file.c_str());  // sbatch keeps its own copy of the script
  const int rc = sbatch.status();
  if (rc != 0) {
    logTo(host, LogLevel::kError,
          "submit: sbatch failed (exit code " + std::to_string(rc) + "): " +
              trim(sbatch.started() ? sbatch.err : sbatch.spawn_error) +
              (rc == 127 ? " (is SLURM's client installed and on PATH?)" : ""));
    return 1;
  }
  const std::string& out = sbatch.out;
  const std::string& err = sbatch.err;
  std::string job_id = trim(out);
  job_id = job_id.substr(0, job_id.find(';'));  // "<id>;<cluster>" on federated setups
  if (job_id.empty() || job_id.find_first_not_of("0123456789_") != std::string::npos) {
    logTo(host, LogLevel::kError, "submit: sbatch printed no job ID: '" + trim(out) + "' " + trim(err));
    return 1;
  }
  std::cout << job_id << '\n';
  std::cout.flush();
  logTo(host, LogLevel::kInfo,
        "submitted SLURM job " + job_id + " (" + std::to_string(opts.nodes) + " nodes); follow it with `squeue -j " +
            job_id + "`, cancel with `scancel " + job_id + "`");
  return 0;
}

}  // namespace

Detection SlurmBackend::detect(const HostContext& host) const { return detectSlurm(host.env); }

PlanResult SlurmBackend::plan(const HostContext& host, const PlanRequest& request) const {
  Layout layout = Layout::kAuto;
  if (auto it = request.options.find("slurm-layout"); it != request.options.end() && !it->second.empty()) {
    const std::string& v = it->second.back();
    if (v == "node") {
      layout = Layout::kTaskPerNode;
    } else if (v == "task" || v == "gpu") {
      layout = Layout::kTaskPerGpu;
    } else if (v != "auto") {
      PlanResult bad;
      bad.error = "--slurm-layout '" + v + "': expected auto, node (one task per node) or task (one task per GPU)";
      return bad;
    }
  }
  return planSlurm(host.env, request, layout);  // an exception: GuardedBackend (TAEHV_DEFINE_PLUGIN)
}

std::vector<OptionSpec> SlurmBackend::options() const {
  return {{"slurm-layout", "auto|node|task",
           "how SLURM tasks map to workers: node = one task per node starts the node's workers, task = each task "
           "is one worker (one task per GPU); auto (default) picks task when a node runs several tasks",
           false},
          {"slurm-nprocs", "LIST",
           "workers of every node in SLURM's compressed form (3,1 or 2(x3),1) when nodes differ, with one task per "
           "node: each node runs its own count (what `submit --node-nprocs` renders)",
           false}};
}

std::vector<CommandSpec> SlurmBackend::commands() const {
  return {{"hostnames", "expand a SLURM hostlist (default SLURM_JOB_NODELIST), one host per line", {},
           Operands::kWords, "LIST...",
           "Expands SLURM hostlists (e.g. n[1-4],gpu[01-02]) to one host per line; without LIST,\n"
           "SLURM_JOB_NODELIST.\n"},
          {"hostlist", "compress host names into a SLURM hostlist", {}, Operands::kWords, "HOST...",
           "Compresses host names (n1 n2 n3 or n1,n2,n3) into one SLURM hostlist, e.g. n[1-3].\n"},
          submitCommand()};
}

int SlurmBackend::runCommand(const HostContext& host, const std::string& name, const CommandArgs& args) {
  if (name == "hostnames") return runHostnames(host, args.words, false);
  if (name == "hostlist") return runHostnames(host, args.words, true);
  if (name == "submit") return runSubmit(host, args);
  logTo(host, LogLevel::kError, "unknown slurm command '" + name + "': use hostnames, hostlist or submit");
  return 2;
}

}  // namespace taehv::slurm

TAEHV_DEFINE_PLUGIN(taehv::slurm::SlurmBackend, "slurm", "1.0.0",
                    "SLURM: srun task layouts (one per node or per GPU), hostlists, sbatch submission")
