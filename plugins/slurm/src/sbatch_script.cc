#include "taehv/slurm/sbatch_script.h"

#include <algorithm>
#include <optional>
#include <regex>
#include <sstream>

#include "taehv/parse.h"
#include "taehv/shell_quote.h"
#include "taehv/slurm/slurm_env.h"

namespace taehv::slurm {
namespace {

/// Text safe inside an #SBATCH line: no newline, no '#', not empty.
bool safeDirective(const std::string& s) { return !s.empty() && s.find_first_of("\n\r") == std::string::npos; }

/// Bash words for `word` where every "{ckpt}" becomes the value of $resume.
std::string quoteWithCheckpoint(const std::string& word) {
  static const std::string kMark = "{ckpt}";
  std::string out;
  std::size_t pos = 0;
  for (std::size_t hit; (hit = word.find(kMark, pos)) != std::string::npos; pos = hit + kMark.size()) {
    if (hit > pos) out += shellQuote(word.substr(pos, hit - pos));
    out += "\"$resume\"";
  }
  if (pos < word.size() || out.empty()) out += shellQuote(word.substr(pos));
  return out;
}

/// Is `text` a time limit sbatch takes (man sbatch, --time): MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS,
/// DAYS-HOURS, DAYS-HOURS:MINUTES, DAYS-HOURS:MINUTES:SECONDS, or UNLIMITED / INFINITE?
bool isSlurmTime(const std::string& text) {
  static const std::regex kTime(R"(^([0-9]{1,7}(:[0-5]?[0-9]){0,2}|[0-9]{1,5}-[0-9]{1,2}(:[0-5]?[0-9]){0,2})$)");
  static const std::regex kUnlimited(R"(^(unlimited|infinite)$)", std::regex::icase);
  return std::regex_match(text, kTime) || std::regex_match(text, kUnlimited);
}

/// etcd members of the job's own cluster: three survive the loss of any one.
constexpr int kEtcdMembers = 3;
/// How long the script waits for every member to say it is healthy before it gives up (exit 2).
constexpr int kEtcdWaitSeconds = 60;
/// How long the script's end waits for the members to stop and remove their data before srun ends their steps.
constexpr int kEtcdStopSeconds = 10;

/// The script's lines that start `members` etcd members, one background srun step (--overlap: beside the training
/// step) on each of the job's first nodes, wait until each answers {"health":"true"} on its client port, and set
/// $etcd_endpoints. Each member runs under a small bash on its node that, when the step is signalled (scancel: TERM;
/// the end of this script: USR1, which srun passes on, where a TERM to srun would SIGKILL the step at once), kills
/// etcd and then removes the member's data directory there (${TMPDIR:-/tmp}/taehv-etcd-JOB-RESTART-I).
/// Ports: 2379 (clients) and 2380 (peers), or TAEHV_ETCD_CLIENT_PORT / TAEHV_ETCD_PEER_PORT where they are taken.
void renderEtcdMembers(std::ostringstream& s, int members) {
  s << "# The node group's etcd: " << members << " member(s) on the job's first nodes.\n"
    << "etcd_hosts=($(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n " << members << "))\n"
    << "if [ \"${#etcd_hosts[@]}\" -ne " << members << " ]; then\n"
    << "  echo \"taehv: scontrol named ${#etcd_hosts[@]} of the " << members << " nodes for etcd\"; exit 2\n"
    << "fi\n"
    << "etcd_port=${TAEHV_ETCD_CLIENT_PORT:-2379} etcd_peer_port=${TAEHV_ETCD_PEER_PORT:-2380}\n"
    << "etcd_cluster= etcd_endpoints= etcd_pids=() etcd_t0=$SECONDS\n"
    << "for i in \"${!etcd_hosts[@]}\"; do\n"
    << "  etcd_cluster+=\"${etcd_cluster:+,}taehv-etcd-$i=http://${etcd_hosts[$i]}:$etcd_peer_port\"\n"
    << "  etcd_endpoints+=\"${etcd_endpoints:+,}${etcd_hosts[$i]}:$etcd_port\"\n"
    << "done\n"
    << "# On its node: run etcd (\"$@\"), kill it when the step is signalled (its data is thrown away: no graceful "
       "stop,\n# whose leader hand-over waits 5 s for members already gone), then remove its data directory ($1) "
       "with the\n# signals ignored (scancel's TERM, then this script's USR1, reach the whole step, rm included).\n"
    << "etcd_member='d=$1; shift; \"$@\" & p=$!; trap \"kill -KILL $p 2>/dev/null\" TERM INT HUP USR1; "
       "while kill -0 \"$p\" 2>/dev/null; do wait \"$p\" 2>/dev/null; done; trap \"\" TERM INT HUP USR1; "
       "rm -rf -- \"$d\"'\n"
    << "for i in \"${!etcd_hosts[@]}\"; do\n"
    << "  h=${etcd_hosts[$i]} d=\"${TMPDIR:-/tmp}/taehv-etcd-$SLURM_JOB_ID-$restart-$i\"\n"
    << "  srun --overlap --nodes=1 --ntasks=1 -w \"$h\" bash -c \"$etcd_member\" taehv-etcd \"$d\" \\\n"
    << "    etcd --name \"taehv-etcd-$i\" --data-dir \"$d\" --logger zap --log-level error \\\n"
    << "    --listen-client-urls \"http://0.0.0.0:$etcd_port\" --advertise-client-urls \"http://$h:$etcd_port\" \\\n"
    << "    --listen-peer-urls \"http://0.0.0.0:$etcd_peer_port\" --initial-advertise-peer-urls "
       "\"http://$h:$etcd_peer_port\" \\\n"
    << "    --initial-cluster \"$etcd_cluster\" --initial-cluster-token \"taehv-$SLURM_JOB_ID-$restart\" &\n"
    << "  etcd_pids+=($!)\n"
    << "done\n"
    << "# When this script exits: each member stops and removes its data (" << kEtcdStopSeconds
    << " s at most; then srun ends their steps).\n"
    << "etcd_stop() {\n"
    << "  kill -USR1 \"${etcd_pids[@]}\" 2>/dev/null\n"
    << "  local n p up\n"
    << "  for ((n = 0; n < " << kEtcdStopSeconds * 10 << "; n++)); do\n"
    << "    up=0; for p in \"${etcd_pids[@]}\"; do kill -0 \"$p\" 2>/dev/null && up=1; done\n"
    << "    [ \"$up\" = 0 ] && return 0; sleep 0.1\n"
    << "  done\n"
    << "  echo \"taehv: etcd members still running " << kEtcdStopSeconds
    << " s after USR1; ending their steps\"; kill -TERM \"${etcd_pids[@]}\" 2>/dev/null\n"
    << "}\n"
    << "trap etcd_stop EXIT\n"
    << "# Healthy: the member's GET /health says so (bash's /dev/tcp: no curl needed on the nodes), within 5 s.\n"
    << "etcd_healthy() {\n"
    << "  timeout 5 bash -c 'exec 3<>\"/dev/tcp/$1/$2\" && printf \"GET /health HTTP/1.0\\r\\nHost: %s\\r\\n\\r\\n\" "
       "\"$1\" >&3 && grep -q \"\\\"health\\\":\\\"true\\\"\" <&3' taehv-etcd-health \"$1\" \"$etcd_port\" "
       "2>/dev/null\n"
    << "}\n"
    << "etcd_wait=${TAEHV_ETCD_WAIT_S:-" << kEtcdWaitSeconds << "}\n"
    << "for h in \"${etcd_hosts[@]}\"; do\n"
    << "  until etcd_healthy \"$h\"; do\n"
    << "    if [ $((SECONDS - etcd_t0)) -ge \"$etcd_wait\" ]; then\n"
    << "      echo \"taehv: etcd on $h did not answer healthy on port $etcd_port within ${etcd_wait} s (is "
       "etcd-server installed on the nodes, the port free? TAEHV_ETCD_CLIENT_PORT/TAEHV_ETCD_PEER_PORT pick "
       "others)\"; exit 2\n"
    << "    fi\n"
    << "    sleep 0.2\n"
    << "  done\n"
    << "done\n"
    << "echo \"taehv: etcd at $etcd_endpoints, healthy after $((SECONDS - etcd_t0)) s\"\n";
}

/// An elastic step's lines before its srun: each task (`bash -c "$task_report" taehv-task "$task_mark" COMMAND...`)
/// runs COMMAND and then prints its exit code on a line of its own, marked with this run's nonce ("taehv-task MARK
/// NODEID HOST CODE"); task_exits_filter, which srun's output goes through, notes those lines in $task_exits and
/// prints a readable one instead (TERM ignored: scancel must not cut off the end of the job's output). A node that
/// failed as a node reports nothing.
void renderTaskExits(std::ostringstream& s) {
  s << "# Each task reports its taehv-run's exit code on a line marked with this run's nonce; the filter that\n"
    << "# srun's output goes through notes those lines in $task_exits (a failed node reports none).\n"
    << "task_mark=$(od -An -N8 -tx1 /dev/urandom | tr -dc 0-9a-f)\n"
    << "task_exits=$(mktemp) || exit 1\n"
    << "task_report='m=$1; shift; \"$@\"; rc=$?; echo \"taehv-task $m $SLURM_NODEID ${SLURMD_NODENAME:-$(hostname)} "
       "$rc\"; exit $rc'\n"
    << "task_exits_filter() {\n"
    << "  trap '' TERM\n"
    << "  awk -v m=\"$task_mark\" -v f=\"$task_exits\" '$1 == \"taehv-task\" && $2 == m && NF == 5 "
       "{ print $3, $4, $5 > f; fflush(f); print \"taehv: node \" $3 \" (\" $4 \") ended: taehv-run exited with "
       "code \" $5; fflush(); next } { print; fflush() }'\n"
    << "}\n";
}

/// An elastic step's lines after its srun (whose exit code is in $rc): srun reports the largest exit code of its
/// tasks, so a node lost on the way (its taehv-run killed, or no exit reported: the node failed) makes it non-zero
/// although the others re-formed and finished (srun --no-kill exits 0 for a node that failed as a node). When a node's
/// taehv-run exited 0 the training has completed (its node's workers of the last formation all ended cleanly): rc
/// becomes 0, and one line names the nodes lost on the way. No node reporting a clean end is a failure, whatever
/// srun says.
void renderElasticOutcome(std::ostringstream& s) {
  s << "# The run has completed when a node's taehv-run finished (exit 0): srun's own code is the largest of its\n"
    << "# tasks', so a node lost on the way makes it non-zero although the others re-formed and finished.\n"
    << "declare -A task_code=()\n"
    << "while read -r _ host code; do task_code[$host]=$code; done < \"$task_exits\"\n"
    << "rm -f -- \"$task_exits\"\n"
    << "finished=0 lost=\n"
    << "for h in $(scontrol show hostnames \"$SLURM_JOB_NODELIST\"); do\n"
    << "  c=${task_code[$h]-}\n"
    << "  if [ \"$c\" = 0 ]; then finished=$((finished + 1))\n"
    << "  elif [ -z \"$c\" ]; then lost+=\"${lost:+, }$h (no exit reported: the node failed)\"\n"
    << "  else lost+=\"${lost:+, }$h (exit code $c)\"; fi\n"
    << "done\n"
    << "if [ \"$finished\" -gt 0 ] && { [ \"$rc\" -ne 0 ] || [ -n \"$lost\" ]; }; then\n"
    << "  echo \"taehv: the run has completed: the training finished on $finished node(s); lost on the way: "
       "${lost:-none named}; srun's exit code $rc\"\n"
    << "  rc=0\n"
    << "elif [ \"$finished\" -eq 0 ] && [ \"$rc\" -eq 0 ]; then\n"
    << "  echo \"taehv: srun exited 0 but no node reported that its taehv-run finished (${lost:-none named}); the run "
       "counts as failed\"\n"
    << "  rc=1\n"
    << "fi\n";
}

/// Does `arg` (one --launch-arg word) give taehv-run's option `name` ("--nnodes", "--nnodes=2:3")?
bool givesOption(const std::string& arg, const std::string& name) {
  return arg == name || arg.rfind(name + "=", 0) == 0;
}

/// --min-nodes and --reformations against the rest of `out` (read before): one line saying what is wrong, or ok.
Status checkElastic(const OptionValues& given, const SubmitOptions& out) {
  if (!given.count("min-nodes")) {
    if (given.count("reformations")) {
      return {"--reformations needs --min-nodes (a run re-forms only without a lost node)"};
    }
    return {};
  }
  if (out.min_nodes > out.nodes) {
    return {"--min-nodes " + std::to_string(out.min_nodes) + " is more than --nodes " + std::to_string(out.nodes) +
            "; give at most the job's node count"};
  }
  if (!out.etcd) {
    return {"--min-nodes needs --rdzv-backend etcd: without it node 0 leads the node group and its loss ends the job; "
            "with etcd any node may be lost"};
  }
  if (out.task_per_gpu) {
    return {"--min-nodes needs --layout node: one taehv-run per node re-forms the group without a lost node"};
  }
  if (given.count("srun-wait")) {
    return {"--srun-wait does not apply with --min-nodes: the step waits for every task (srun --wait=0), since a lost "
            "node's task ends first"};
  }
  for (const std::string& a : out.launch_args) {
    for (const char* name : {"--nnodes", "--max-restarts"}) {
      if (givesOption(a, name)) {
        return {"--launch-arg " + a + ": with --min-nodes, submit sets " + name +
                " itself (--nnodes M:N, --max-restarts = --reformations)"};
      }
    }
  }
  return {};
}

}  // namespace

CommandSpec submitCommand() {
  return {"submit",
          "render an sbatch script for a multi-node training and submit it (--dry-run prints it)",
          {{"nodes", "N", "nodes of the job (required)", false, 'N'},
           {"gpus-per-node", "G", "GPUs to request per node (default none: CPU/Gloo)"},
           {"nproc-per-node", "K", "workers per node (default G, or 1 without GPUs)"},
           {"node-nprocs", "LIST", "workers of each node when they differ, e.g. 3,1 or 2(x3),1 (one per node)"},
           {"time", "T", "time limit, in a form sbatch takes (default 01:00:00)", false, 't'},
           {"partition", "P", "partition (default: the cluster's)", false, 'p'},
           {"job-name", "J", "job name (default taehv)", false, 'J'},
           {"max-restarts", "R", "after a failure, requeue the job up to R times (SLURM_RESTART_COUNT counts)"},
           {"layout", "node|task",
            "node (default): one SLURM task per node, taehv-run starts its K workers; task: one SLURM task per "
            "worker (K tasks per node), each task is one worker"},
           {"output", "FILE", "the job's output file (default <job-name>-%j.out)", false, 'o'},
           {"checkpoint-dir", "DIR", "on a requeued run, TAEHV_RESUME_FROM = the newest DIR/PATTERN (by time)"},
           {"checkpoint-pattern", "PATTERN",
            "checkpoints in --checkpoint-dir (default checkpoint-*, taehv-train's checkpoint-STEP folders)"},
           {"resume-arg", "ARG",
            "appended to COMMAND on a resumed run, {ckpt} replaced by that path (repeatable; taehv-train: "
            "--resume-arg=--resume --resume-arg={ckpt})",
            true},
           {"sbatch-arg", "ARG", "an extra #SBATCH line (repeatable)", true},
           {"launch-arg", "ARG", "an extra taehv-run launch option for every task (repeatable)", true},
           {"rdzv-backend", "etcd",
            "etcd: start an etcd member on each of the job's first 3 nodes and keep the node group there, so that "
            "any node may be lost"},
           {"min-nodes", "M",
            "with --rdzv-backend etcd: go on without a lost node while at least M of the N remain (the job survives "
            "a node's failure, taehv-run re-forms with --nnodes M:N; default N: every node is needed)"},
           {"reformations", "K", "with --min-nodes: re-formations one run may make (taehv-run --max-restarts, default "
                                 "N - M) before it counts as failed and requeues"},
           {"srun-wait", "S", "seconds the other tasks may run on after one ends cleanly (srun --wait, default 60)"},
           {"script", "FILE", "also write the script to FILE"},
           {"dry-run", "", "print the script instead of submitting it"}},
          Operands::kCommand,
          "",
          "Renders an sbatch script that runs COMMAND (default: taehv-run's trainer) on N nodes with srun,\n"
          "submits it with sbatch and prints the job ID (--dry-run prints the script instead).\n"};
}

Status parseSubmitArgs(const CommandArgs& args, SubmitOptions& out) {
  const OptionValues& given = args.options;
  // Each reads option NAME into its target when it was given, or fails with what is wrong with its value.
  const auto number = [&](const std::string& name, int min, int max, int& target) -> Status {
    const std::string* v = optionValue(given, name);
    if (!v) return {};
    const std::optional<int> n = parseCount(*v, min, max);
    if (!n) {
      return {"--" + name + " '" + *v + "': expected a whole number from " + std::to_string(min) + " to " +
             std::to_string(max)};
    }
    target = *n;
    return {};
  };
  const auto line = [&](const std::string& name, const std::string& v) -> Status {
    if (safeDirective(v)) return {};
    return {"--" + name + " must be a non-empty single line"};
  };
  const auto text = [&](const std::string& name, std::string& target) -> Status {
    const std::string* v = optionValue(given, name);
    if (!v) return {};
    target = *v;
    return line(name, *v);
  };
  const auto texts = [&](const std::string& name, std::vector<std::string>& target) -> Status {
    const auto it = given.find(name);
    if (it == given.end()) return {};
    for (const std::string& v : it->second) {
      if (Status e = line(name, v); !e.ok()) return e;
    }
    target = it->second;
    return {};
  };
  // A value that becomes an "#SBATCH --opt=VALUE" line: no blanks (sbatch would split it).
  const auto directive = [&](const std::string& name, std::string& target) -> Status {
    Status e = text(name, target);
    if (e.ok() && given.count(name) && target.find_first_of(" \t") != std::string::npos) {
      return {"--" + name + " '" + target + "': no spaces allowed (it becomes an #SBATCH line)"};
    }
    return e;
  };
  if (!given.count("nodes")) return {"--nodes N is required"};
  std::string node_nprocs, layout;
  std::vector<std::string> resume_args;
  // Read in this order (a braced list is evaluated left to right); the first error is the answer.
  for (const Status& e :
       {number("nodes", 1, 100000, out.nodes), number("gpus-per-node", 0, 1024, out.gpus_per_node),
        number("nproc-per-node", 1, 1024, out.nproc_per_node), text("node-nprocs", node_nprocs),
        directive("time", out.time), directive("partition", out.partition), directive("job-name", out.job_name),
        number("max-restarts", 0, 1000, out.max_restarts), number("srun-wait", 0, 86400, out.srun_wait_s),
        number("min-nodes", 1, 100000, out.min_nodes), number("reformations", 0, 1000, out.reformations),
        directive("output", out.output), text("checkpoint-dir", out.checkpoint_dir),
        text("checkpoint-pattern", out.checkpoint_pattern), text("script", out.script_file), text("layout", layout),
        texts("sbatch-arg", out.sbatch_args), texts("launch-arg", out.launch_args),
        texts("resume-arg", resume_args)}) {
    if (!e.ok()) return e;
  }
  out.dry_run = given.count("dry-run") > 0;
  if (const std::string* rdzv = optionValue(given, "rdzv-backend")) {
    if (*rdzv != "etcd") {
      return {"--rdzv-backend '" + *rdzv + "': submit knows etcd (members started on the job's first 3 nodes); "
              "leave it out for the node group led by node 0"};
    }
    out.etcd = true;
  }
  out.command = args.command;
  if (given.count("time") && !isSlurmTime(out.time)) {
    return {"--time '" + out.time + "': not a SLURM time limit; use MINUTES, HOURS:MINUTES:SECONDS, " +
           "DAYS-HOURS[:MINUTES[:SECONDS]] or UNLIMITED, e.g. 4:00:00 or 2-00:00:00"};
  }
  if (out.checkpoint_pattern.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                               "0123456789_.-*?") != std::string::npos) {
    return {"--checkpoint-pattern '" + out.checkpoint_pattern + "': use letters, digits, _ . - and the wildcards * ?"};
  }
  if (given.count("layout") && layout != "node" && layout != "task") {
    return {"--layout '" + layout + "': expected node (one task per node) or task (one task per worker)"};
  }
  out.task_per_gpu = layout == "task";
  if (given.count("node-nprocs")) {
    Checked<std::vector<int>> counts = expandTasksPerNode(node_nprocs);
    if (!counts.ok()) return {"--node-nprocs: " + counts.error};
    out.node_nprocs = counts.value;
    for (std::size_t k = 0; k < out.node_nprocs.size(); ++k) {
      if (out.node_nprocs[k] < 1 || out.node_nprocs[k] > 1024) {
        return {"--node-nprocs " + node_nprocs + ": node " + std::to_string(k) + " has " +
               std::to_string(out.node_nprocs[k]) + " workers; each node runs 1..1024"};
      }
    }
  }
  if (!out.node_nprocs.empty()) {
    if (static_cast<int>(out.node_nprocs.size()) != out.nodes) {
      return {"--node-nprocs " + formatCounts(out.node_nprocs) + " lists " + std::to_string(out.node_nprocs.size()) +
             " nodes but --nodes is " + std::to_string(out.nodes) + "; give one count per node"};
    }
    if (out.nproc_per_node > 0) return {"--node-nprocs and --nproc-per-node both say how many workers; give one"};
  }
  if (!resume_args.empty()) {
    if (out.checkpoint_dir.empty()) return {"--resume-arg needs --checkpoint-dir (where to look for checkpoints)"};
    if (out.command.empty()) return {"--resume-arg needs an explicit command after --"};
  }
  if (Status e = checkElastic(given, out); !e.ok()) return e;
  out.command.insert(out.command.end(), resume_args.begin(), resume_args.end());
  // Remember which trailing words are resume args: they are only passed when a checkpoint was found.
  out.resume_arg_count = resume_args.size();
  return {};
}

std::string renderSbatchScript(const SubmitOptions& opts, const std::string& taehv_run, const std::string& version) {
  int workers = opts.nproc_per_node > 0 ? opts.nproc_per_node : (opts.gpus_per_node > 0 ? opts.gpus_per_node : 1);
  const bool uneven = !opts.node_nprocs.empty();
  int total = 0, most = 0;
  for (int n : opts.node_nprocs) total += n, most = std::max(most, n);
  if (uneven) workers = most;  // what the allocation must hold on its fullest node
  int tasks_per_node = opts.task_per_gpu ? workers : 1;
  const bool elastic = opts.min_nodes > 0 && opts.min_nodes < opts.nodes;
  std::ostringstream s;
  s << "#!/bin/bash\n"
    << "# Rendered by `taehv-run --backend slurm submit` (taehv-run " << version << ").\n";
  if (elastic) {
    s << "# One srun step runs the whole training and goes on without a lost node while at least " << opts.min_nodes
      << " of the " << opts.nodes
      << "\n# remain: the job and the step outlive a node's failure (--no-kill), the step a task's end "
      << "(--kill-on-bad-exit=0),\n# and the nodes' taehv-run re-form (--nnodes " << opts.min_nodes << ":"
      << opts.nodes << "). The run has completed when a node's taehv-run finished (exit 0);\n"
      << "# otherwise the job requeues itself up to MAX_RESTARTS times (SLURM_RESTART_COUNT counts them)\n";
  } else {
    s << "# One srun step runs the whole training: a task that fails ends every task (--kill-on-bad-exit);\n"
      << "# after a failure the job requeues itself up to MAX_RESTARTS times (SLURM_RESTART_COUNT counts them)\n";
  }
  s << "# and the next run resumes from the newest checkpoint.\n"
    << "#SBATCH --job-name=" << opts.job_name << "\n"
    << "#SBATCH --nodes=" << opts.nodes << "\n"
    << "#SBATCH --ntasks-per-node=" << tasks_per_node << "\n";
  if (opts.gpus_per_node > 0) s << "#SBATCH --gpus-per-node=" << opts.gpus_per_node << "\n";
  s << "#SBATCH --time=" << opts.time << "\n";
  if (!opts.partition.empty()) s << "#SBATCH --partition=" << opts.partition << "\n";
  s << "#SBATCH --output=" << (opts.output.empty() ? opts.job_name + "-%j.out" : opts.output) << "\n"
    << "#SBATCH --open-mode=append\n"
    << (opts.max_restarts > 0 ? "#SBATCH --requeue\n" : "#SBATCH --no-requeue\n");
  if (elastic) s << "#SBATCH --no-kill\n";
  for (const std::string& extra : opts.sbatch_args) s << "#SBATCH " << extra << "\n";
  s << "set -uo pipefail\n"
    << "export PYTHONUNBUFFERED=1\n"
    << "TAEHV_RUN=" << shellQuote(taehv_run) << "\n"
    << "MAX_RESTARTS=" << opts.max_restarts << "\n"
    << "CHECKPOINT_DIR=" << shellQuote(opts.checkpoint_dir) << "\n"
    << "restart=${SLURM_RESTART_COUNT:-0}\n"
    << "resume=\n"
    << "if [ \"$restart\" -gt 0 ] && [ -n \"$CHECKPOINT_DIR\" ] && [ -d \"$CHECKPOINT_DIR\" ]; then\n"
    << "  resume=$(ls -1td -- \"$CHECKPOINT_DIR\"/" << opts.checkpoint_pattern << " 2>/dev/null | head -n 1)\n"
    << "fi\n"
    << "export TAEHV_RESTART_COUNT=$restart TAEHV_RESUME_FROM=$resume\n"
    // The node group's per-job secret (core/group/PROTOCOL.md): made at run time, so it is in no file; srun hands
    // it to every task with the environment. A token the submitter exported is kept.
    << "if [ -z \"${TAEHV_JOB_TOKEN:-}\" ]; then TAEHV_JOB_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -dc 0-9a-f); fi\n"
    << "export TAEHV_JOB_TOKEN\n"
    << "echo \"taehv: job $SLURM_JOB_ID run $((restart + 1)) of $((MAX_RESTARTS + 1)) on $SLURM_JOB_NODELIST"
       "${resume:+, resuming from $resume}\"\n";
  std::size_t plain = opts.command.size() - opts.resume_arg_count;
  s << "resume_args=()\n";
  if (opts.resume_arg_count > 0) {
    s << "if [ -n \"$resume\" ]; then\n  resume_args=(";
    for (std::size_t i = plain; i < opts.command.size(); ++i)
      s << (i > plain ? " " : "") << quoteWithCheckpoint(opts.command[i]);
    s << ")\nfi\n";
  }
  if (uneven && opts.task_per_gpu) {
    // Uneven tasks per node: srun places task i on line i of SLURM_HOSTFILE (--distribution=arbitrary), so node k
    // gets its count, in node order; SLURM_STEP_TASKS_PER_NODE then reads like the counts.
    s << "# tasks per node " << formatCounts(opts.node_nprocs) << ": placed by a hostfile\n"
      << "node_nprocs=(";
    for (std::size_t k = 0; k < opts.node_nprocs.size(); ++k) s << (k ? " " : "") << opts.node_nprocs[k];
    s << ")\n"
      << "SLURM_HOSTFILE=$(mktemp) || exit 1\n"
      << "i=0\n"
      << "for h in $(scontrol show hostnames \"$SLURM_JOB_NODELIST\"); do\n"
      << "  for ((k = 0; k < node_nprocs[i]; k++)); do echo \"$h\"; done\n"
      << "  i=$((i + 1))\n"
      << "done > \"$SLURM_HOSTFILE\"\n"
      << "export SLURM_HOSTFILE\n";
  }
  // Fewer nodes than 3: one member (two would stop the group when either is lost, one only when its node is).
  if (opts.etcd) renderEtcdMembers(s, opts.nodes >= kEtcdMembers ? kEtcdMembers : 1);
  if (elastic) {
    renderTaskExits(s);
    s << "srun --no-kill --kill-on-bad-exit=0 --wait=0 --unbuffered --nodes=" << opts.nodes;
  } else {
    s << "srun --kill-on-bad-exit=1 --wait=" << opts.srun_wait_s << " --unbuffered --nodes=" << opts.nodes;
  }
  if (uneven && opts.task_per_gpu) {
    s << " --ntasks=" << total << " --distribution=arbitrary";
  } else {
    s << " --ntasks-per-node=" << tasks_per_node;
  }
  s << " \\\n  " << (elastic ? "bash -c \"$task_report\" taehv-task \"$task_mark\" " : "")
    << "\"$TAEHV_RUN\" --backend slurm";
  if (opts.task_per_gpu) {
    s << " --slurm-layout task";
  } else if (uneven) {
    s << " --slurm-nprocs " << shellQuote(formatCounts(opts.node_nprocs));
  } else {
    s << " --nproc-per-node " << workers;
  }
  if (opts.etcd) s << " --rdzv-backend etcd --rdzv-endpoint \"$etcd_endpoints\"";
  if (elastic) {
    s << " --nnodes " << opts.min_nodes << ":" << opts.nodes << " --max-restarts "
      << (opts.reformations >= 0 ? opts.reformations : opts.nodes - opts.min_nodes);
  }
  for (const std::string& a : opts.launch_args) s << " " << shellQuote(a);
  if (plain > 0) {
    s << " --";
    for (std::size_t i = 0; i < plain; ++i) s << " " << shellQuote(opts.command[i]);
  }
  s << " \"${resume_args[@]}\"";
  if (elastic) {
    s << " |\n  task_exits_filter\n"
      << "rc=${PIPESTATUS[0]}\n";
    renderElasticOutcome(s);
  } else {
    s << "\nrc=$?\n";
  }
  s
    << "if [ \"$rc\" -ne 0 ] && [ \"$restart\" -lt \"$MAX_RESTARTS\" ]; then\n"
    << "  echo \"taehv: run failed (exit code $rc); requeueing job $SLURM_JOB_ID, restart $((restart + 1)) of "
       "$MAX_RESTARTS\"\n"
    << "  scontrol requeue \"$SLURM_JOB_ID\" && exit 0\n"
    << "  echo \"taehv: scontrol requeue failed; giving up\"\n"
    << "fi\n"
    << "exit \"$rc\"\n";
  return s.str();
}

}  // namespace taehv::slurm
