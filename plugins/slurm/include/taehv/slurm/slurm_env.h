// Mapping a SLURM allocation's environment to the plan of one node (pure functions of the environment).
//
// Where the values come from (srun sets all of these in every task of a job step; checked on SLURM 22.05):
//   node count     SLURM_STEP_NUM_NODES, else SLURM_NNODES (inside a step SLURM_NNODES is the step's count)
//   task count     SLURM_STEP_NUM_TASKS, else SLURM_NTASKS
//   tasks per node SLURM_STEP_TASKS_PER_NODE, else SLURM_TASKS_PER_NODE, compressed as "2(x3),1"
//   nodes          SLURM_STEP_NODELIST, else SLURM_JOB_NODELIST / SLURM_NODELIST (these are the *job's* nodes,
//                  which are the step's only when the counts agree), expanded by our own hostlist parser
//   this task      SLURM_NODEID (index into the step's nodes), SLURM_PROCID (global task), SLURM_LOCALID
//
// Layouts, told apart by the tasks per node:
//   one task per node  every node runs one task: taehv-run starts the node's workers itself;
//                      node_rank = SLURM_NODEID, workers = --nproc-per-node or SLURM_GPUS_ON_NODE.
//   one task per GPU   some node runs more than one task: each task is exactly one worker
//                      (single_worker): rank = SLURM_PROCID, local_rank = SLURM_LOCALID,
//                      nproc_per_node = that node's task count (must be the same on every node).
// SLURM_STEP_GPUS / SLURM_JOB_GPUS are global GPU IDs, never CUDA ordinals: they are not used.
//
// Master: MASTER_ADDR if set, else the first host of the step's nodes. Port: MASTER_PORT if set, else
//   kPortBase + (SLURM_JOB_ID mod kPortJobSlots) * kPortStepSlots + (SLURM_STEP_ID mod kPortStepSlots)
// i.e. 10000..29999: below Linux's ephemeral range (32768+), different for jobs whose IDs differ by less than
// 5000 (so two jobs sharing a node do not collide) and for up to 4 concurrent steps of one job.
//
// A batch script (sbatch) or an salloc shell has SLURM_JOB_ID but no SLURM_STEP_ID and runs on the first node
// only: planning there is an error for a multi-node job (start taehv-run under srun instead).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "taehv/plugin_api.h"

namespace taehv::slurm {

inline constexpr int kPortBase = 10000;
inline constexpr int kPortJobSlots = 5000;
inline constexpr int kPortStepSlots = 4;

/// Expands SLURM's compressed counts: "2(x3),1" -> {2, 2, 2, 1}; fails on malformed text (taehv::formatCounts
/// writes the compressed form).
Checked<std::vector<int>> expandTasksPerNode(std::string_view text);

/// The master port derived from a job and step ID when MASTER_PORT is not set (rule above).
int derivedMasterPort(std::uint64_t job_id, std::uint64_t step_id);

/// How the tasks of a step map to workers.
enum class Layout { kAuto, kTaskPerNode, kTaskPerGpu };

/// How sure we are that `env` is a SLURM allocation (95 in a job step, 60 in a batch script or salloc shell).
Detection detectSlurm(const Env& env);

/// This node's plan from a SLURM environment. `layout` forces a layout (kAuto: chosen from the tasks per
/// node). The request's option "slurm-nprocs" (e.g. "3,1") gives every node's worker count with one task per node
/// (one entry per node, each at least 1; with one task per GPU it must equal the tasks per node). Contradictory or malformed variables give PlanResult::error naming the variable.
PlanResult planSlurm(const Env& env, const PlanRequest& request, Layout layout);

}  // namespace taehv::slurm
