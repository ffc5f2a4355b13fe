#include "taehv/slurm/slurm_env.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>

#include "taehv/parse.h"
#include "taehv/slurm/hostlist.h"

namespace taehv::slurm {
namespace {

constexpr long long kIntMax = std::numeric_limits<int>::max();

/// Reads environment variables, remembering the first error.
class EnvReader {
 public:
  explicit EnvReader(const Env& env) : env_(env) {}

  const std::string* find(const std::string& name) const {
    auto it = env_.find(name);
    return it == env_.end() ? nullptr : &it->second;
  }
  /// The first of `names` that is set (and its name), or nullptr.
  const std::string* first(std::initializer_list<const char*> names, std::string& which) const {
    for (const char* n : names) {
      if (const std::string* v = find(n)) {
        which = n;
        return v;
      }
    }
    return nullptr;
  }
  /// An integer variable; records an error when set but malformed.
  std::optional<long long> number(const std::string& name, long long max = std::numeric_limits<int>::max()) {
    const std::string* v = find(name);
    if (!v) return std::nullopt;
    std::optional<long long> n = parseCount<long long>(*v, 0, max);
    if (!n) fail(name + "='" + *v + "' is not a non-negative whole number (SLURM sets it; do not override it)");
    return n;
  }
  void fail(const std::string& message) {
    if (error_.empty()) error_ = message;
  }
  const std::string& error() const { return error_; }

 private:
  const Env& env_;
  std::string error_;
};

std::string describeValue(const std::string& name, const std::string& value) { return "env " + name + "=" + value; }

}  // namespace

std::vector<int> expandTasksPerNode(std::string_view text, std::string& error) {
  std::vector<int> counts;
  auto bad = [&](const std::string& why) {
    error = "tasks per node '" + std::string(text) + "': " + why + " (expected SLURM's form, e.g. 2(x3),1)";
    return std::vector<int>{};
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
  error.clear();
  return counts;
}

std::string compressTasksPerNode(const std::vector<int>& counts) { return formatCounts(counts); }

int derivedMasterPort(std::uint64_t job_id, std::uint64_t step_id) {
  return kPortBase + static_cast<int>(job_id % kPortJobSlots) * kPortStepSlots +
         static_cast<int>(step_id % kPortStepSlots);
}

Detection detectSlurm(const Env& env) {
  auto get = [&](const char* name) -> const std::string* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : &it->second;
  };
  const std::string* job = get("SLURM_JOB_ID");
  if (!job) job = get("SLURM_JOBID");
  if (!job) return {0, "SLURM_JOB_ID is not set"};
  const std::string* step = get("SLURM_STEP_ID");
  if (!step) step = get("SLURM_STEPID");
  if (step && get("SLURM_PROCID")) {
    return {95, "SLURM job step " + *job + "." + *step + " (SLURM_JOB_ID, SLURM_STEP_ID and SLURM_PROCID set)"};
  }
  return {60, "SLURM_JOB_ID=" + *job +
                  " is set but SLURM_STEP_ID is not: a batch script or salloc shell, not a task started by srun"};
}

PlanResult planSlurm(const Env& env, const PlanRequest& request, Layout layout) {
  PlanResult result;
  NodePlan& plan = result.value;
  EnvReader r(env);
  auto failed = [&](const std::string& message) {
    PlanResult bad;
    bad.error = message;
    return bad;
  };

  std::string job_var;
  const std::string* job_text = r.first({"SLURM_JOB_ID", "SLURM_JOBID"}, job_var);
  if (!job_text) return failed("not inside a SLURM allocation: SLURM_JOB_ID is not set (submit with sbatch/srun)");
  std::optional<long long> job_id = r.number(job_var, std::numeric_limits<long long>::max());
  std::string step_var;
  const std::string* step_text = r.first({"SLURM_STEP_ID", "SLURM_STEPID"}, step_var);

  // ---- Outside a job step: a batch script or salloc shell runs on the first node only.
  if (!step_text) {
    std::optional<long long> job_nodes = r.number("SLURM_JOB_NUM_NODES");
    if (!job_nodes) job_nodes = r.number("SLURM_NNODES");
    if (!r.error().empty()) return failed(r.error());
    if (job_nodes && *job_nodes > 1) {
      return failed("taehv-run runs in the batch script (or salloc shell) of SLURM job " + *job_text +
                    ", which runs on its first node only, but the job has " + std::to_string(*job_nodes) +
                    " nodes: start it with `srun --ntasks-per-node=1 taehv-run ...` (or submit with "
                    "`taehv-run --backend slurm submit`)");
    }
  }

  // ---- Step shape: node count, nodes, tasks per node, task count.
  std::optional<long long> nnodes = r.number("SLURM_STEP_NUM_NODES");
  std::string nnodes_src = nnodes ? describeValue("SLURM_STEP_NUM_NODES", env.at("SLURM_STEP_NUM_NODES")) : "";
  std::optional<long long> nnodes_alt = r.number("SLURM_NNODES");
  if (!step_text && !nnodes_alt) nnodes_alt = r.number("SLURM_JOB_NUM_NODES");
  if (!r.error().empty()) return failed(r.error());
  if (nnodes && nnodes_alt && *nnodes != *nnodes_alt) {
    return failed("SLURM_STEP_NUM_NODES=" + std::to_string(*nnodes) + " contradicts SLURM_NNODES=" +
                  std::to_string(*nnodes_alt) + ": the environment was changed after srun set it");
  }
  if (!nnodes && nnodes_alt) {
    nnodes = nnodes_alt;
    nnodes_src = env.count("SLURM_NNODES") ? describeValue("SLURM_NNODES", env.at("SLURM_NNODES"))
                                           : describeValue("SLURM_JOB_NUM_NODES", env.at("SLURM_JOB_NUM_NODES"));
  }

  std::string list_var;
  const std::string* list_text = r.first({"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}, list_var);
  if (!list_text) return failed("SLURM_STEP_NODELIST and SLURM_JOB_NODELIST are not set: cannot tell the job's nodes");
  HostlistResult hosts = expandHostlist(*list_text);
  if (!hosts.ok()) return failed(list_var + ": " + hosts.error);
  if (!nnodes) {
    nnodes = static_cast<long long>(hosts.value.size());
    nnodes_src = "rule: number of hosts in " + list_var + "=" + *list_text;
  }
  if (*nnodes == 0) return failed(nnodes_src + ": a step has at least one node");
  if (static_cast<long long>(hosts.value.size()) != *nnodes) {
    return failed(list_var + "=" + *list_text + " names " + std::to_string(hosts.value.size()) + " hosts but " +
                  nnodes_src + (list_var == "SLURM_STEP_NODELIST" ? "" : " (set SLURM_STEP_NODELIST: run under srun)"));
  }

  std::string tpn_var;
  const std::string* tpn_text = r.first({"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}, tpn_var);
  std::vector<int> tpn;
  if (tpn_text) {
    std::string err;
    tpn = expandTasksPerNode(*tpn_text, err);
    if (!err.empty()) return failed(tpn_var + ": " + err);
    if (static_cast<long long>(tpn.size()) != *nnodes) {
      return failed(tpn_var + "=" + *tpn_text + " lists " + std::to_string(tpn.size()) + " nodes but " + nnodes_src);
    }
  } else if (!step_text) {
    tpn.assign(static_cast<std::size_t>(*nnodes), 1);  // batch script: itself is the only task
  } else {
    return failed("SLURM_STEP_TASKS_PER_NODE and SLURM_TASKS_PER_NODE are not set inside a job step");
  }
  long long tasks_sum = std::accumulate(tpn.begin(), tpn.end(), 0LL);

  std::optional<long long> ntasks = r.number("SLURM_STEP_NUM_TASKS");
  std::optional<long long> ntasks_alt = r.number("SLURM_NTASKS");
  if (!r.error().empty()) return failed(r.error());
  if (step_text) {
    if (ntasks && ntasks_alt && *ntasks != *ntasks_alt) {
      return failed("SLURM_STEP_NUM_TASKS=" + std::to_string(*ntasks) +
                    " contradicts SLURM_NTASKS=" + std::to_string(*ntasks_alt));
    }
    if (!ntasks) ntasks = ntasks_alt;
    if (ntasks && *ntasks != tasks_sum) {
      return failed(tpn_var + "=" + *tpn_text + " adds up to " + std::to_string(tasks_sum) + " tasks but SLURM_" +
                    (env.count("SLURM_STEP_NUM_TASKS") ? "STEP_NUM_TASKS=" : "NTASKS=") + std::to_string(*ntasks));
    }
  }

  // ---- This task.
  std::optional<long long> node_id = r.number("SLURM_NODEID");
  std::optional<long long> proc_id = r.number("SLURM_PROCID");
  std::optional<long long> local_id = r.number("SLURM_LOCALID");
  if (!r.error().empty()) return failed(r.error());
  if (!node_id) {
    if (step_text) return failed("SLURM_NODEID is not set inside a job step: is this a task started by srun?");
    node_id = 0;
  }
  if (*node_id >= *nnodes) {
    return failed("SLURM_NODEID=" + std::to_string(*node_id) + " is not below the node count, " + nnodes_src);
  }
  const std::string& this_host = hosts.value[static_cast<std::size_t>(*node_id)];
  if (const std::string* node_name = r.find("SLURMD_NODENAME"); node_name && step_text && *node_name != this_host) {
    return failed("SLURMD_NODENAME=" + *node_name + " but node " + std::to_string(*node_id) + " of " + list_var + "=" +
                  *list_text + " is " + this_host + ": the environment does not belong to this task");
  }
  int tasks_here = tpn[static_cast<std::size_t>(*node_id)];
  if (step_text) {
    if (!proc_id || !local_id) return failed("SLURM_PROCID or SLURM_LOCALID is not set inside a job step");
    if (*proc_id >= tasks_sum) {
      return failed("SLURM_PROCID=" + std::to_string(*proc_id) + " is not below the task count " +
                    std::to_string(tasks_sum) + " (" + tpn_var + "=" + *tpn_text + ")");
    }
    if (*local_id >= tasks_here) {
      return failed("SLURM_LOCALID=" + std::to_string(*local_id) + " is not below the " + std::to_string(tasks_here) +
                    " tasks of node " + std::to_string(*node_id) + " (" + tpn_var + "=" + *tpn_text + ")");
    }
  }

  // ---- Layout.
  int max_tasks = *std::max_element(tpn.begin(), tpn.end());
  const std::string tpn_desc = tpn_text ? tpn_var + "=" + *tpn_text : "batch script";
  // A batch script is one process on node 0 whatever the tasks per node: it can only start workers.
  bool per_task = layout == Layout::kTaskPerGpu || (layout == Layout::kAuto && max_tasks > 1 && step_text);
  if (layout == Layout::kTaskPerNode && max_tasks > 1 && step_text) {
    return failed("--slurm-layout node needs one task per node but " + tpn_desc +
                  ": use srun --ntasks-per-node=1, or --slurm-layout task");
  }
  if (per_task && !step_text) {
    return failed("one task per GPU needs a job step: run taehv-run under srun, not in the batch script");
  }

  const std::string step_name = *job_text + (step_text ? "." + *step_text : "");
  plan.nnodes.set(static_cast<int>(*nnodes), nnodes_src);
  plan.node_rank.set(static_cast<int>(*node_id), env.count("SLURM_NODEID")
                                                     ? describeValue("SLURM_NODEID", env.at("SLURM_NODEID"))
                                                     : "rule: the batch script runs on node 0");
  if (std::optional<long long> gpus = r.number("SLURM_GPUS_ON_NODE")) {
    plan.gpus_on_node.set(static_cast<int>(*gpus), describeValue("SLURM_GPUS_ON_NODE", env.at("SLURM_GPUS_ON_NODE")));
  }
  // --slurm-nprocs: every node's workers, when they differ (one task per node).
  std::vector<int> node_nprocs;
  std::string nprocs_desc;
  if (auto it = request.options.find("slurm-nprocs"); it != request.options.end() && !it->second.empty()) {
    const std::string& text = it->second.back();
    std::string err;
    node_nprocs = expandTasksPerNode(text, err);
    if (!err.empty()) return failed("--slurm-nprocs: " + err);
    nprocs_desc = "flag --slurm-nprocs " + text;
    if (static_cast<long long>(node_nprocs.size()) != *nnodes) {
      return failed("--slurm-nprocs " + text + " lists " + std::to_string(node_nprocs.size()) + " nodes but " +
                    nnodes_src + "; give one count per node");
    }
    for (std::size_t k = 0; k < node_nprocs.size(); ++k) {
      if (node_nprocs[k] < 1) {
        return failed("--slurm-nprocs " + text + ": node " + std::to_string(k) +
                      " has 0 workers; every node runs at least 1");
      }
    }
    if (per_task && node_nprocs != tpn) {
      return failed("--slurm-nprocs " + text + " contradicts " + tpn_desc +
                    ": with one task per GPU the tasks per node are the workers; drop one of them");
    }
    const int here = node_nprocs[static_cast<std::size_t>(*node_id)];
    if (request.nproc_per_node && *request.nproc_per_node != here) {
      return failed("--nproc-per-node " + std::to_string(*request.nproc_per_node) + " contradicts --slurm-nprocs " +
                    text + " (node " + std::to_string(*node_id) + " runs " + std::to_string(here) +
                    "); drop one of them");
    }
  }
  if (per_task) {
    // Nodes may hold different task counts (3,1; 2(x3),1): every task knows them all from the step's layout.
    plan.node_nprocs.set(tpn, "rule: tasks per node in " + tpn_desc);
    if (request.nproc_per_node && *request.nproc_per_node != tasks_here) {
      return failed("--nproc-per-node " + std::to_string(*request.nproc_per_node) + " contradicts " + tpn_desc +
                    ": with one task per GPU each task is one worker; drop --nproc-per-node or use "
                    "srun --ntasks-per-node=1");
    }
    plan.single_worker.set(true, "rule: " + tpn_desc +
                                     (layout == Layout::kAuto ? " runs several tasks per node: one task per GPU"
                                                              : " and --slurm-layout task"));
    plan.nproc_per_node.set(tasks_here, "rule: tasks on node " + std::to_string(*node_id) + " in " + tpn_desc);
    plan.rank.set(static_cast<int>(*proc_id), describeValue("SLURM_PROCID", env.at("SLURM_PROCID")));
    plan.local_rank.set(static_cast<int>(*local_id), describeValue("SLURM_LOCALID", env.at("SLURM_LOCALID")));
    long long block_rank = std::accumulate(tpn.begin(), tpn.begin() + *node_id, 0LL) + *local_id;
    if (block_rank != *proc_id) {
      plan.notes.push_back("tasks are not distributed in blocks (SLURM_PROCID=" + std::to_string(*proc_id) +
                           " on node " + std::to_string(*node_id) + " local " + std::to_string(*local_id) +
                           "): ranks follow SLURM_PROCID");
    }
    if (const std::string* cvd = r.find("CUDA_VISIBLE_DEVICES");
        cvd && !cvd->empty() && cvd->find(',') == std::string::npos && tasks_here > 1) {
      plan.notes.push_back("CUDA_VISIBLE_DEVICES=" + *cvd +
                           " shows this task only its own GPU: the worker's device "
                           "is index 0 there, not LOCAL_RANK");
    }
    if (plan.gpus_on_node.has() && *plan.gpus_on_node.value > 0 && *plan.gpus_on_node.value != tasks_here) {
      plan.notes.push_back("SLURM gave this node " + std::to_string(*plan.gpus_on_node.value) + " GPUs but runs " +
                           std::to_string(tasks_here) + " tasks on it: one task per GPU expects as many of each");
    }
  } else {
    plan.single_worker.set(false, "rule: " + tpn_desc + " runs one task per node: taehv-run starts the node's workers");
    if (!node_nprocs.empty()) {
      plan.node_nprocs.set(node_nprocs, nprocs_desc);
      plan.nproc_per_node.set(node_nprocs[static_cast<std::size_t>(*node_id)],
                              "rule: node " + std::to_string(*node_id) + " in " + nprocs_desc);
    } else if (plan.gpus_on_node.has() && *plan.gpus_on_node.value > 0 && !request.nproc_per_node) {
      plan.nproc_per_node.set(*plan.gpus_on_node.value, "rule: one worker per GPU, " + plan.gpus_on_node.source);
    }
  }
  if (!step_text) plan.notes.push_back("running in the batch script of single-node job " + *job_text);
  // The job's GPUs as physical indices: sizing uses them only while CUDA_VISIBLE_DEVICES is unset, and then gives
  // each worker its own; they are never CUDA ordinals.
  for (const char* var : {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS"}) {
    if (const std::string* list = r.find(var); list && !list->empty()) {
      plan.gpu_indices.set(*list, std::string("env ") + var);
      break;
    }
  }
  plan.notes.push_back("SLURM_STEP_GPUS/SLURM_JOB_GPUS are global GPU IDs and are not used as CUDA ordinals");

  // ---- Master.
  if (const std::string* addr = r.find("MASTER_ADDR"); addr && !addr->empty()) {
    plan.master_addr.set(*addr, describeValue("MASTER_ADDR", *addr));
  } else {
    plan.master_addr.set(hosts.value[0], "rule: first host of " + list_var + "=" + *list_text);
  }
  if (const std::string* port = r.find("MASTER_PORT"); port && !port->empty()) {
    std::optional<int> p = parsePort(*port);
    if (!p) return failed("MASTER_PORT='" + *port + "' is not a port number 1..65535");
    plan.master_port.set(*p, describeValue("MASTER_PORT", *port));
  } else {
    std::optional<long long> step_id = step_text ? r.number(step_var, std::numeric_limits<long long>::max()) : 0;
    if (!r.error().empty() || !job_id) return failed(r.error());
    int derived =
        derivedMasterPort(static_cast<std::uint64_t>(*job_id), static_cast<std::uint64_t>(step_id.value_or(0)));
    plan.master_port.set(derived, "rule: " + std::to_string(kPortBase) + " + (" + job_var + "=" + *job_text + " mod " +
                                      std::to_string(kPortJobSlots) + ")*" + std::to_string(kPortStepSlots) + " + (" +
                                      (step_text ? step_var + "=" + *step_text : std::string("step 0")) + " mod " +
                                      std::to_string(kPortStepSlots) + ")");
  }
  if (!r.error().empty()) return failed(r.error());

  plan.run_id.set("slurm-" + step_name, "env " + job_var + (step_text ? " + " + step_var : ""));
  if (std::optional<long long> restarts = r.number("SLURM_RESTART_COUNT")) {
    plan.restart_count.set(static_cast<int>(*restarts),
                           describeValue("SLURM_RESTART_COUNT", env.at("SLURM_RESTART_COUNT")));
  } else {
    plan.restart_count.set(0, "default (SLURM_RESTART_COUNT unset: the job was not requeued)");
  }
  if (!r.error().empty()) return failed(r.error());
  return result;
}

}  // namespace taehv::slurm
