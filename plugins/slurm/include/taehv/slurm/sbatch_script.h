// `taehv-run --backend slurm submit`: the options and the sbatch script they render.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "taehv/plugin_api.h"

namespace taehv::slurm {

/// What the user asked `submit` for. Defaults are what an omitted option means.
struct SubmitOptions {
  int nodes = 0;                  ///< --nodes N (required, >= 1)
  int gpus_per_node = 0;          ///< --gpus-per-node G; 0 = no GPU request (CPU/Gloo)
  int nproc_per_node = 0;         ///< --nproc-per-node K workers per node; 0 = G (or 1 without GPUs)
  /// --node-nprocs LIST: every node's workers when they differ ("3,1", "2(x3),1"); empty = K on every node.
  std::vector<int> node_nprocs;
  std::string time = "01:00:00";  ///< --time, any form sbatch accepts
  std::string partition;          ///< --partition; empty = the cluster's default
  std::string job_name = "taehv";
  int max_restarts = 0;        ///< --max-restarts R: requeue after a failure up to R times
  bool task_per_gpu = false;   ///< --layout task: one SLURM task per worker instead of one per node
  int srun_wait_s = 60;        ///< srun --wait: seconds the others may run on after one task ends cleanly
  std::string output;          ///< --output; empty = "<job-name>-%j.out" in the submit directory
  std::string checkpoint_dir;  ///< --checkpoint-dir: searched for the newest checkpoint on requeue
  std::string checkpoint_pattern = "checkpoint-*";  ///< --checkpoint-pattern: glob of checkpoints in it
                                                    ///< (taehv-train writes checkpoint-STEP folders)
  std::vector<std::string> sbatch_args;             ///< --sbatch-arg ARG (repeatable): extra #SBATCH lines
  std::vector<std::string> launch_args;             ///< --launch-arg ARG (repeatable): extra taehv-run launch options
  std::vector<std::string> command;                 ///< after `--`; empty = taehv-run's default trainer
  std::size_t resume_arg_count = 0;                 ///< the last words of `command` are --resume-arg words (passed
                                                    ///< only on a requeued run that found a checkpoint)
  bool dry_run = false;
  /// --rdzv-backend etcd: the script starts etcd members on the job's first three nodes (one srun step each) and
  /// gives taehv-run their endpoints, so that any node may be lost (docs/node-group.md).
  bool etcd = false;
  /// --min-nodes M (needs etcd): the training goes on without a lost node while at least M of the N remain. The job
  /// survives a node's failure (#SBATCH --no-kill), its one srun step outlives a task (--kill-on-bad-exit=0
  /// --wait=0), each taehv-run re-forms (--nnodes M:N), and the run counts as completed when a node's taehv-run
  /// finished (exit 0), whatever srun reports for a task lost on the way. 0 (or N) = every node is needed.
  int min_nodes = 0;
  /// --reformations K: how often one run may re-form (taehv-run --max-restarts); -1 = N - M.
  int reformations = -1;
  std::string script_file;  ///< --script FILE: also write the script there
};

/// The `submit` sub-command as the backend declares it: its options, `-- COMMAND`, its help.
CommandSpec submitCommand();

/// `submit`'s options from `args` (parsed by the host from submitCommand()), or one line saying what is wrong and how
/// to fix it.
Status parseSubmitArgs(const CommandArgs& args, SubmitOptions& out);

/// The sbatch script for `opts`; `taehv_run` is the absolute path of taehv-run on the cluster,
/// `version` goes into the header comment.
std::string renderSbatchScript(const SubmitOptions& opts, const std::string& taehv_run, const std::string& version);

}  // namespace taehv::slurm
