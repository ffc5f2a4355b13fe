#include "taehv/slurm/slurm_env.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>

#include "taehv/env.h"
#include "taehv/parse.h"
#include "taehv/slurm/hostlist.h"

namespace taehv::slurm {
namespace {

constexpr long long kIntMax = std::numeric_limits<int>::max();

/// A count or id SLURM sets: unset = nullopt; anything but digits (an empty value too) is an error naming it.
Checked<std::optional<long long>> slurmNumber(const Env& env, const std::string& name, long long max = kIntMax) {
  return readEnv(
      env, name, [max](std::string_view text) { return parseCount<long long>(text, 0, max); },
      "a non-negative whole number (SLURM sets it; do not override it)", EmptyEnv::kText);
}

std::string describeValue(const std::string& name, const std::string& value) { return "env " + name + "=" + value; }

}  // namespace

Checked<std::vector<int>> expandTasksPerNode(std::string_view text) {
  Checked<std::vector<int>> result;
  std::vector<int>& counts = result.value;
  auto bad = [&](const std::string& why) -> Checked<std::vector<int>> {
    return {"tasks per node '" + std::string(text) + "': " + why + " (expected SLURM's form, e.g. 2(x3),1)"};
  };
  if (text.empty()) return bad("empty");
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = text.substr(pos, comma - pos);
    std::size_t paren = item.find('(');
    std::optional<long long> count = parseCount<long long>(item.substr(0, paren), 0, kIntMax);
    long long repeat = 1;
    if (!count) return bad("'" + std::string(item) + "' does not start with a task count");
    if (paren != std::string_view::npos) {
      std::string_view rep = item.substr(paren);
      if (rep.size() < 4 || rep.substr(0, 2) != "(x" || rep.back() != ')') {
        return bad("'" + std::string(item) + "' is not N or N(xK)");
      }
      std::optional<long long> k = parseCount<long long>(rep.substr(2, rep.size() - 3), 0, 1 << 20);
      if (!k || *k == 0) return bad("'" + std::string(item) + "' has a bad repeat count");
      repeat = *k;
    }
    if (counts.size() + static_cast<std::size_t>(repeat) > (1u << 20)) return bad("more than 1048576 nodes");
    counts.insert(counts.end(), static_cast<std::size_t>(repeat), static_cast<int>(*count));
    pos = comma + 1;
  }
  return result;
}

int derivedMasterPort(std::uint64_t job_id, std::uint64_t step_id) {
  return kPortBase + static_cast<int>(job_id % kPortJobSlots) * kPortStepSlots +
         static_cast<int>(step_id % kPortStepSlots);
}

Detection detectSlurm(const Env& env) {
  const std::optional<EnvEntry> job = firstEnv(env, {"SLURM_JOB_ID", "SLURM_JOBID"});
  if (!job) return {0, "SLURM_JOB_ID is not set"};
  const std::optional<EnvEntry> step = firstEnv(env, {"SLURM_STEP_ID", "SLURM_STEPID"});
  if (step && findEnv(env, "SLURM_PROCID")) {
    return {95, "SLURM job step " + job->text + "." + step->text +
                    " (SLURM_JOB_ID, SLURM_STEP_ID and SLURM_PROCID set)"};
  }
  return {60, "SLURM_JOB_ID=" + job->text +
                  " is set but SLURM_STEP_ID is not: a batch script or salloc shell, not a task started by srun"};
}

namespace {

/// The job this process belongs to and, under srun, its step (a batch script or salloc shell has no step).
struct SlurmJob {
  EnvEntry job;                  ///< SLURM_JOB_ID (or the older SLURM_JOBID)
  long long job_id = 0;
  std::optional<EnvEntry> step;  ///< SLURM_STEP_ID (or SLURM_STEPID)
  std::string name() const { return job.text + (step ? "." + step->text : ""); }
};

/// The job, refusing a batch script of a multi-node job (it runs on the first node only).
Checked<SlurmJob> readJob(const Env& env) {
  Checked<SlurmJob> result;
  SlurmJob& job = result.value;
  std::optional<EnvEntry> id = firstEnv(env, {"SLURM_JOB_ID", "SLURM_JOBID"});
  if (!id) return {"not inside a SLURM allocation: SLURM_JOB_ID is not set (submit with sbatch/srun)"};
  job.job = *id;
  auto job_id = slurmNumber(env, job.job.name, std::numeric_limits<long long>::max());
  if (!job_id.ok()) return {job_id.error};
  job.job_id = *job_id.value;
  job.step = firstEnv(env, {"SLURM_STEP_ID", "SLURM_STEPID"});
  if (job.step) return result;
  auto job_nodes = slurmNumber(env, "SLURM_JOB_NUM_NODES");
  if (job_nodes.ok() && !job_nodes.value) job_nodes = slurmNumber(env, "SLURM_NNODES");
  if (!job_nodes.ok()) return {job_nodes.error};
  if (job_nodes.value && *job_nodes.value > 1) {
    return {"taehv-run runs in the batch script (or salloc shell) of SLURM job " + job.job.text +
            ", which runs on its first node only, but the job has " + std::to_string(*job_nodes.value) +
            " nodes: start it with `srun --ntasks-per-node=1 taehv-run ...` (or submit with "
            "`taehv-run --backend slurm submit`)"};
  }
  return result;
}

/// The step's nodes and every node's task count.
struct StepShape {
  long long nnodes = 0;
  std::string nnodes_src;             ///< where the count came from, for messages and the plan
  EnvEntry nodelist;                  ///< the variable the hosts came from
  std::vector<std::string> hosts;     ///< in node order
  std::optional<EnvEntry> tpn;        ///< tasks per node as SLURM wrote them; unset in a batch script
  std::vector<int> tasks_per_node;    ///< expanded, one per node
  long long tasks = 0;                ///< their sum
  std::string tpnDesc() const { return tpn ? tpn->name + "=" + tpn->text : "batch script"; }
};

/// The node count SLURM states (SLURM_STEP_NUM_NODES, else SLURM_NNODES; in a batch script SLURM_JOB_NUM_NODES),
/// 0 when none is set.
Status readNodeCount(const Env& env, const SlurmJob& job, StepShape& shape) {
  auto nnodes = slurmNumber(env, "SLURM_STEP_NUM_NODES");
  if (!nnodes.ok()) return {nnodes.error};
  auto nnodes_alt = slurmNumber(env, "SLURM_NNODES");
  if (nnodes_alt.ok() && !job.step && !nnodes_alt.value) nnodes_alt = slurmNumber(env, "SLURM_JOB_NUM_NODES");
  if (!nnodes_alt.ok()) return {nnodes_alt.error};
  if (nnodes.value && nnodes_alt.value && *nnodes.value != *nnodes_alt.value) {
    return {"SLURM_STEP_NUM_NODES=" + std::to_string(*nnodes.value) + " contradicts SLURM_NNODES=" +
            std::to_string(*nnodes_alt.value) + ": the environment was changed after srun set it"};
  }
  if (nnodes.value) {
    shape.nnodes = *nnodes.value;
    shape.nnodes_src = describeValue("SLURM_STEP_NUM_NODES", *findEnv(env, "SLURM_STEP_NUM_NODES"));
  } else if (nnodes_alt.value) {
    shape.nnodes = *nnodes_alt.value;
    const char* var = findEnv(env, "SLURM_NNODES") ? "SLURM_NNODES" : "SLURM_JOB_NUM_NODES";
    shape.nnodes_src = describeValue(var, *findEnv(env, var));
  }
  return {};
}

/// The step's hosts (SLURM_STEP_NODELIST, else the job's list), as many as the node count says.
Status readNodeList(const Env& env, StepShape& shape) {
  std::optional<EnvEntry> list = firstEnv(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  if (!list) return {"SLURM_STEP_NODELIST and SLURM_JOB_NODELIST are not set: cannot tell the job's nodes"};
  shape.nodelist = *list;
  HostlistResult hosts = expandHostlist(list->text);
  if (!hosts.ok()) return {list->name + ": " + hosts.error};
  shape.hosts = std::move(hosts.value);
  if (shape.nnodes_src.empty()) {
    shape.nnodes = static_cast<long long>(shape.hosts.size());
    shape.nnodes_src = "rule: number of hosts in " + list->name + "=" + list->text;
  }
  if (shape.nnodes == 0) return {shape.nnodes_src + ": a step has at least one node"};
  if (static_cast<long long>(shape.hosts.size()) != shape.nnodes) {
    return {list->name + "=" + list->text + " names " + std::to_string(shape.hosts.size()) + " hosts but " +
            shape.nnodes_src +
            (list->name == "SLURM_STEP_NODELIST" ? "" : " (set SLURM_STEP_NODELIST: run under srun)")};
  }
  return {};
}

/// Every node's task count (a batch script is the only task of node 0..), and the task count SLURM states.
Status readTasksPerNode(const Env& env, const SlurmJob& job, StepShape& shape) {
  shape.tpn = firstEnv(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  if (shape.tpn) {
    Checked<std::vector<int>> tpn = expandTasksPerNode(shape.tpn->text);
    if (!tpn.ok()) return {shape.tpn->name + ": " + tpn.error};
    shape.tasks_per_node = std::move(tpn.value);
    if (static_cast<long long>(shape.tasks_per_node.size()) != shape.nnodes) {
      return {shape.tpnDesc() + " lists " + std::to_string(shape.tasks_per_node.size()) + " nodes but " +
              shape.nnodes_src};
    }
  } else if (!job.step) {
    shape.tasks_per_node.assign(static_cast<std::size_t>(shape.nnodes), 1);  // batch script: itself is the only task
  } else {
    return {"SLURM_STEP_TASKS_PER_NODE and SLURM_TASKS_PER_NODE are not set inside a job step"};
  }
  shape.tasks = std::accumulate(shape.tasks_per_node.begin(), shape.tasks_per_node.end(), 0LL);

  auto ntasks = slurmNumber(env, "SLURM_STEP_NUM_TASKS");
  if (!ntasks.ok()) return {ntasks.error};
  auto ntasks_alt = slurmNumber(env, "SLURM_NTASKS");
  if (!ntasks_alt.ok()) return {ntasks_alt.error};
  if (!job.step) return {};
  if (ntasks.value && ntasks_alt.value && *ntasks.value != *ntasks_alt.value) {
    return {"SLURM_STEP_NUM_TASKS=" + std::to_string(*ntasks.value) +
            " contradicts SLURM_NTASKS=" + std::to_string(*ntasks_alt.value)};
  }
  const std::optional<long long> stated = ntasks.value ? ntasks.value : ntasks_alt.value;
  if (stated && *stated != shape.tasks) {
    return {shape.tpnDesc() + " adds up to " + std::to_string(shape.tasks) + " tasks but SLURM_" +
            (ntasks.value ? "STEP_NUM_TASKS=" : "NTASKS=") + std::to_string(*stated)};
  }
  return {};
}

Checked<StepShape> readStepShape(const Env& env, const SlurmJob& job) {
  Checked<StepShape> result;
  if (Status s = readNodeCount(env, job, result.value); !s.ok()) return {s.error};
  if (Status s = readNodeList(env, result.value); !s.ok()) return {s.error};
  if (Status s = readTasksPerNode(env, job, result.value); !s.ok()) return {s.error};
  return result;
}

/// This task: its node and, inside a step, its global and local task ids.
struct SlurmTask {
  long long node_id = 0;
  long long proc_id = 0;   ///< inside a step only
  long long local_id = 0;  ///< inside a step only
  int tasks_here = 0;      ///< tasks on this node
};

Checked<SlurmTask> readTask(const Env& env, const SlurmJob& job, const StepShape& shape) {
  Checked<SlurmTask> result;
  SlurmTask& task = result.value;
  auto node_id = slurmNumber(env, "SLURM_NODEID");
  if (!node_id.ok()) return {node_id.error};
  auto proc_id = slurmNumber(env, "SLURM_PROCID");
  if (!proc_id.ok()) return {proc_id.error};
  auto local_id = slurmNumber(env, "SLURM_LOCALID");
  if (!local_id.ok()) return {local_id.error};
  if (!node_id.value && job.step) {
    return {"SLURM_NODEID is not set inside a job step: is this a task started by srun?"};
  }
  task.node_id = node_id.value.value_or(0);
  if (task.node_id >= shape.nnodes) {
    return {"SLURM_NODEID=" + std::to_string(task.node_id) + " is not below the node count, " + shape.nnodes_src};
  }
  const std::string& this_host = shape.hosts[static_cast<std::size_t>(task.node_id)];
  const std::string* node_name = findEnv(env, "SLURMD_NODENAME");
  if (node_name && job.step && *node_name != this_host) {
    return {"SLURMD_NODENAME=" + *node_name + " but node " + std::to_string(task.node_id) + " of " +
            shape.nodelist.name + "=" + shape.nodelist.text + " is " + this_host +
            ": the environment does not belong to this task"};
  }
  task.tasks_here = shape.tasks_per_node[static_cast<std::size_t>(task.node_id)];
  if (!job.step) return result;
  if (!proc_id.value || !local_id.value) return {"SLURM_PROCID or SLURM_LOCALID is not set inside a job step"};
  task.proc_id = *proc_id.value;
  task.local_id = *local_id.value;
  if (task.proc_id >= shape.tasks) {
    return {"SLURM_PROCID=" + std::to_string(task.proc_id) + " is not below the task count " +
            std::to_string(shape.tasks) + " (" + shape.tpnDesc() + ")"};
  }
  if (task.local_id >= task.tasks_here) {
    return {"SLURM_LOCALID=" + std::to_string(task.local_id) + " is not below the " +
            std::to_string(task.tasks_here) + " tasks of node " + std::to_string(task.node_id) + " (" +
            shape.tpnDesc() + ")"};
  }
  return result;
}

/// One task per GPU (each task is one worker) or one per node (taehv-run starts the node's workers). A batch script
/// is one process on node 0 whatever the tasks per node: it can only start workers.
Checked<bool> oneTaskPerGpu(Layout layout, const SlurmJob& job, const StepShape& shape) {
  const int max_tasks = *std::max_element(shape.tasks_per_node.begin(), shape.tasks_per_node.end());
  const bool per_task = layout == Layout::kTaskPerGpu || (layout == Layout::kAuto && max_tasks > 1 && job.step);
  if (layout == Layout::kTaskPerNode && max_tasks > 1 && job.step) {
    return {"--slurm-layout node needs one task per node but " + shape.tpnDesc() +
            ": use srun --ntasks-per-node=1, or --slurm-layout task"};
  }
  if (per_task && !job.step) {
    return {"one task per GPU needs a job step: run taehv-run under srun, not in the batch script"};
  }
  return {"", per_task};
}

/// --slurm-nprocs: every node's workers when they differ (one task per node); empty when not given.
Checked<std::vector<int>> readNodeNprocs(const PlanRequest& request, const StepShape& shape, const SlurmTask& task,
                                         bool per_task) {
  auto it = request.options.find("slurm-nprocs");
  if (it == request.options.end() || it->second.empty()) return {};
  const std::string& text = it->second.back();
  Checked<std::vector<int>> counts = expandTasksPerNode(text);
  if (!counts.ok()) return {"--slurm-nprocs: " + counts.error};
  const std::vector<int>& node_nprocs = counts.value;
  if (static_cast<long long>(node_nprocs.size()) != shape.nnodes) {
    return {"--slurm-nprocs " + text + " lists " + std::to_string(node_nprocs.size()) + " nodes but " +
            shape.nnodes_src + "; give one count per node"};
  }
  for (std::size_t k = 0; k < node_nprocs.size(); ++k) {
    if (node_nprocs[k] < 1) {
      return {"--slurm-nprocs " + text + ": node " + std::to_string(k) + " has 0 workers; every node runs at least 1"};
    }
  }
  if (per_task && node_nprocs != shape.tasks_per_node) {
    return {"--slurm-nprocs " + text + " contradicts " + shape.tpnDesc() +
            ": with one task per GPU the tasks per node are the workers; drop one of them"};
  }
  const int here = node_nprocs[static_cast<std::size_t>(task.node_id)];
  if (request.nproc_per_node && *request.nproc_per_node != here) {
    return {"--nproc-per-node " + std::to_string(*request.nproc_per_node) + " contradicts --slurm-nprocs " + text +
            " (node " + std::to_string(task.node_id) + " runs " + std::to_string(here) + "); drop one of them"};
  }
  return counts;
}

/// One task per GPU: this task is one worker, its rank SLURM_PROCID; every node's count is known from the step.
Status planTaskPerGpu(const Env& env, const PlanRequest& request, Layout layout, const StepShape& shape,
                      const SlurmTask& task, NodePlan& plan) {
  const std::string tpn_desc = shape.tpnDesc();
  // Nodes may hold different task counts (3,1; 2(x3),1): every task knows them all from the step's layout.
  plan.node_nprocs.set(shape.tasks_per_node, "rule: tasks per node in " + tpn_desc);
  if (request.nproc_per_node && *request.nproc_per_node != task.tasks_here) {
    return {"--nproc-per-node " + std::to_string(*request.nproc_per_node) + " contradicts " + tpn_desc +
            ": with one task per GPU each task is one worker; drop --nproc-per-node or use "
            "srun --ntasks-per-node=1"};
  }
  plan.single_worker.set(true, "rule: " + tpn_desc +
                                   (layout == Layout::kAuto ? " runs several tasks per node: one task per GPU"
                                                            : " and --slurm-layout task"));
  plan.nproc_per_node.set(task.tasks_here, "rule: tasks on node " + std::to_string(task.node_id) + " in " + tpn_desc);
  plan.rank.set(static_cast<int>(task.proc_id), describeValue("SLURM_PROCID", *findEnv(env, "SLURM_PROCID")));
  plan.local_rank.set(static_cast<int>(task.local_id), describeValue("SLURM_LOCALID", *findEnv(env, "SLURM_LOCALID")));
  const long long block_rank =
      std::accumulate(shape.tasks_per_node.begin(), shape.tasks_per_node.begin() + task.node_id, 0LL) + task.local_id;
  if (block_rank != task.proc_id) {
    plan.notes.push_back("tasks are not distributed in blocks (SLURM_PROCID=" + std::to_string(task.proc_id) +
                         " on node " + std::to_string(task.node_id) + " local " + std::to_string(task.local_id) +
                         "): ranks follow SLURM_PROCID");
  }
  if (const std::string* cvd = findEnv(env, "CUDA_VISIBLE_DEVICES");
      cvd && !cvd->empty() && cvd->find(',') == std::string::npos && task.tasks_here > 1) {
    plan.notes.push_back("CUDA_VISIBLE_DEVICES=" + *cvd +
                         " shows this task only its own GPU: the worker's device "
                         "is index 0 there, not LOCAL_RANK");
  }
  if (plan.gpus_on_node.has() && *plan.gpus_on_node.value > 0 && *plan.gpus_on_node.value != task.tasks_here) {
    plan.notes.push_back("SLURM gave this node " + std::to_string(*plan.gpus_on_node.value) + " GPUs but runs " +
                         std::to_string(task.tasks_here) + " tasks on it: one task per GPU expects as many of each");
  }
  return {};
}

/// One task per node: taehv-run starts the node's workers, --slurm-nprocs' count, else one per GPU SLURM gave.
void planTaskPerNode(const PlanRequest& request, const StepShape& shape, const SlurmTask& task,
                     const std::vector<int>& node_nprocs, NodePlan& plan) {
  plan.single_worker.set(false, "rule: " + shape.tpnDesc() +
                                    " runs one task per node: taehv-run starts the node's workers");
  if (!node_nprocs.empty()) {
    const std::string nprocs_desc = "flag --slurm-nprocs " + request.options.at("slurm-nprocs").back();
    plan.node_nprocs.set(node_nprocs, nprocs_desc);
    plan.nproc_per_node.set(node_nprocs[static_cast<std::size_t>(task.node_id)],
                            "rule: node " + std::to_string(task.node_id) + " in " + nprocs_desc);
  } else if (plan.gpus_on_node.has() && *plan.gpus_on_node.value > 0 && !request.nproc_per_node) {
    plan.nproc_per_node.set(*plan.gpus_on_node.value, "rule: one worker per GPU, " + plan.gpus_on_node.source);
  }
}

/// How many GPUs SLURM gave this node, when it says.
Status readGpuCount(const Env& env, NodePlan& plan) {
  auto gpus = slurmNumber(env, "SLURM_GPUS_ON_NODE");
  if (!gpus.ok()) return {gpus.error};
  if (gpus.value) {
    plan.gpus_on_node.set(static_cast<int>(*gpus.value),
                          describeValue("SLURM_GPUS_ON_NODE", *findEnv(env, "SLURM_GPUS_ON_NODE")));
  }
  return {};
}

/// The job's GPUs as physical indices: sizing uses them only while CUDA_VISIBLE_DEVICES is unset, and then gives
/// each worker its own; they are never CUDA ordinals.
void readGpuIndices(const Env& env, NodePlan& plan) {
  for (const char* var : {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS"}) {
    if (const auto list = envValue(env, var)) {
      plan.gpu_indices.set(*list, std::string("env ") + var);
      break;
    }
  }
  plan.notes.push_back("SLURM_STEP_GPUS/SLURM_JOB_GPUS are global GPU IDs and are not used as CUDA ordinals");
}

/// MASTER_ADDR/MASTER_PORT when set, else the step's first host and the port derived from the job and step ids.
Status planMaster(const Env& env, const SlurmJob& job, const StepShape& shape, NodePlan& plan) {
  if (const auto addr = envValue(env, "MASTER_ADDR")) {
    plan.master_addr.set(*addr, describeValue("MASTER_ADDR", *addr));
  } else {
    plan.master_addr.set(shape.hosts[0], "rule: first host of " + shape.nodelist.name + "=" + shape.nodelist.text);
  }
  auto port = readEnv(env, "MASTER_PORT", parsePort, "a port number 1..65535");
  if (!port.ok()) return {port.error};
  if (port.value) {
    plan.master_port.set(*port.value, describeValue("MASTER_PORT", *findEnv(env, "MASTER_PORT")));
    return {};
  }
  long long step_id = 0;
  if (job.step) {
    auto id = slurmNumber(env, job.step->name, std::numeric_limits<long long>::max());
    if (!id.ok()) return {id.error};
    step_id = *id.value;
  }
  const int derived = derivedMasterPort(static_cast<std::uint64_t>(job.job_id), static_cast<std::uint64_t>(step_id));
  const std::string step = job.step ? job.step->name + "=" + job.step->text : std::string("step 0");
  plan.master_port.set(derived, "rule: " + std::to_string(kPortBase) + " + (" + job.job.name + "=" + job.job.text +
                                    " mod " + std::to_string(kPortJobSlots) + ")*" + std::to_string(kPortStepSlots) +
                                    " + (" + step + " mod " + std::to_string(kPortStepSlots) + ")");
  return {};
}

/// The run id (one per job step) and the restarts SLURM made (a requeued job).
Status planRunAndRestarts(const Env& env, const SlurmJob& job, NodePlan& plan) {
  plan.run_id.set("slurm-" + job.name(), "env " + job.job.name + (job.step ? " + " + job.step->name : ""));
  auto restarts = slurmNumber(env, "SLURM_RESTART_COUNT");
  if (!restarts.ok()) return {restarts.error};
  if (restarts.value) {
    plan.restart_count.set(static_cast<int>(*restarts.value),
                           describeValue("SLURM_RESTART_COUNT", *findEnv(env, "SLURM_RESTART_COUNT")));
  } else {
    plan.restart_count.set(0, "default (SLURM_RESTART_COUNT unset: the job was not requeued)");
  }
  return {};
}

}  // namespace

PlanResult planSlurm(const Env& env, const PlanRequest& request, Layout layout) {
  const Checked<SlurmJob> job = readJob(env);
  if (!job.ok()) return {job.error};
  const Checked<StepShape> shape = readStepShape(env, job.value);
  if (!shape.ok()) return {shape.error};
  const Checked<SlurmTask> task = readTask(env, job.value, shape.value);
  if (!task.ok()) return {task.error};
  const Checked<bool> per_task = oneTaskPerGpu(layout, job.value, shape.value);
  if (!per_task.ok()) return {per_task.error};

  PlanResult result;
  NodePlan& plan = result.value;
  plan.nnodes.set(static_cast<int>(shape.value.nnodes), shape.value.nnodes_src);
  const std::string* node_id = findEnv(env, "SLURM_NODEID");
  plan.node_rank.set(static_cast<int>(task.value.node_id), node_id ? describeValue("SLURM_NODEID", *node_id)
                                                                   : "rule: the batch script runs on node 0");
  if (Status s = readGpuCount(env, plan); !s.ok()) return {s.error};
  const Checked<std::vector<int>> node_nprocs = readNodeNprocs(request, shape.value, task.value, per_task.value);
  if (!node_nprocs.ok()) return {node_nprocs.error};
  if (per_task.value) {
    if (Status s = planTaskPerGpu(env, request, layout, shape.value, task.value, plan); !s.ok()) return {s.error};
  } else {
    planTaskPerNode(request, shape.value, task.value, node_nprocs.value, plan);
  }
  if (!job.value.step) plan.notes.push_back("running in the batch script of single-node job " + job.value.job.text);
  readGpuIndices(env, plan);
  if (Status s = planMaster(env, job.value, shape.value, plan); !s.ok()) return {s.error};
  if (Status s = planRunAndRestarts(env, job.value, plan); !s.ok()) return {s.error};
  return result;
}

}  // namespace taehv::slurm
