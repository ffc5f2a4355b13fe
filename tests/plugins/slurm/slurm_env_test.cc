// SLURM environment -> node plan. The fixtures are environments captured from tasks of a real SLURM 22.05
// cluster (tests/infra/slurm/slurm_cluster.sh), trimmed to the variables SLURM sets.
#include "taehv/slurm/slurm_env.h"

#include <gtest/gtest.h>

#include <string>

namespace taehv::slurm {
namespace {

/// Task `proc` of `srun -N3 --ntasks-per-node=1` in job 41 (one task per node).
Env perNodeTask(int node) {
  std::string n = std::to_string(node);
  return {{"SLURM_JOB_ID", "41"},
          {"SLURM_JOBID", "41"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_STEPID", "0"},
          {"SLURM_PROCID", n},
          {"SLURM_LOCALID", "0"},
          {"SLURM_NODEID", n},
          {"SLURM_NNODES", "3"},
          {"SLURM_JOB_NUM_NODES", "3"},
          {"SLURM_STEP_NUM_NODES", "3"},
          {"SLURM_NTASKS", "3"},
          {"SLURM_STEP_NUM_TASKS", "3"},
          {"SLURM_TASKS_PER_NODE", "1(x3)"},
          {"SLURM_STEP_TASKS_PER_NODE", "1(x3)"},
          {"SLURM_JOB_NODELIST", "n[1-3]"},
          {"SLURM_NODELIST", "n[1-3]"},
          {"SLURM_STEP_NODELIST", "n[1-3]"},
          {"SLURMD_NODENAME", "n" + std::to_string(node + 1)},
          {"SLURM_CPUS_ON_NODE", "2"}};
}

/// Task `proc` of `srun -N2 --ntasks-per-node=2` in job 77 step 1 (one task per GPU), block distribution.
Env perGpuTask(int proc) {
  int node = proc / 2;
  return {{"SLURM_JOB_ID", "77"},
          {"SLURM_STEP_ID", "1"},
          {"SLURM_PROCID", std::to_string(proc)},
          {"SLURM_LOCALID", std::to_string(proc % 2)},
          {"SLURM_NODEID", std::to_string(node)},
          {"SLURM_NNODES", "2"},
          {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_NTASKS", "4"},
          {"SLURM_STEP_NUM_TASKS", "4"},
          {"SLURM_TASKS_PER_NODE", "2(x2)"},
          {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
          {"SLURM_JOB_NODELIST", "gpu[07-08]"},
          {"SLURM_STEP_NODELIST", "gpu[07-08]"},
          {"SLURMD_NODENAME", node == 0 ? "gpu07" : "gpu08"},
          {"SLURM_GPUS_ON_NODE", "2"},
          {"SLURM_STEP_GPUS", "4,5"},  // global IDs: must never become device ordinals
          {"SLURM_JOB_GPUS", "4,5"},
          {"CUDA_VISIBLE_DEVICES", "0,1"}};
}

/// The batch script of `sbatch -N3 --ntasks-per-node=2` (no job step).
Env batchScript() {
  return {{"SLURM_JOB_ID", "5"},
          {"SLURM_PROCID", "0"},
          {"SLURM_LOCALID", "0"},
          {"SLURM_NODEID", "0"},
          {"SLURM_NNODES", "3"},
          {"SLURM_JOB_NUM_NODES", "3"},
          {"SLURM_NTASKS", "6"},
          {"SLURM_TASKS_PER_NODE", "2(x3)"},
          {"SLURM_JOB_NODELIST", "n[1-3]"},
          {"SLURM_NODELIST", "n[1-3]"},
          {"SLURMD_NODENAME", "n1"}};
}

PlanResult plan(const Env& env, Layout layout = Layout::kAuto, std::optional<int> nproc = std::nullopt) {
  PlanRequest request;
  request.nproc_per_node = nproc;
  return planSlurm(env, request, layout);
}

void expectError(const Env& env, const std::string& part, Layout layout = Layout::kAuto,
                 std::optional<int> nproc = std::nullopt) {
  PlanResult r = plan(env, layout, nproc);
  EXPECT_FALSE(r.ok()) << "expected an error containing: " << part;
  EXPECT_NE(r.error.find(part), std::string::npos) << r.error;
}

TEST(SlurmTasksPerNode, ExpandsAndCompressesSlurmsForm) {
  EXPECT_EQ(expandTasksPerNode("2(x3),1").value, (std::vector<int>{2, 2, 2, 1}));
  EXPECT_TRUE(expandTasksPerNode("2(x3),1").ok());
  EXPECT_EQ(expandTasksPerNode("4").value, (std::vector<int>{4}));
  EXPECT_EQ(expandTasksPerNode("3,1").value, (std::vector<int>{3, 1}));
  EXPECT_EQ(expandTasksPerNode("1(x2),8(x1),2").value, (std::vector<int>{1, 1, 8, 2}));
  for (const char* bad : {"", "2(x3", "2(3)", "x,1", "2(x0)", "2(xa)", "2,,1", "-1", "2(x3)1"}) {
    const Checked<std::vector<int>> counts = expandTasksPerNode(bad);
    EXPECT_TRUE(counts.value.empty()) << bad;
    EXPECT_NE(counts.error.find("tasks per node"), std::string::npos) << bad << ": " << counts.error;
  }
}

TEST(SlurmDetect, StepBatchAndNothing) {
  EXPECT_EQ(detectSlurm({}).confidence, 0);
  EXPECT_EQ(detectSlurm({{"SLURM_CONF", "/etc/slurm.conf"}}).confidence, 0);
  Detection step = detectSlurm(perNodeTask(0));
  EXPECT_EQ(step.confidence, 95);
  EXPECT_NE(step.reason.find("41.0"), std::string::npos) << step.reason;
  Detection batch = detectSlurm(batchScript());
  EXPECT_EQ(batch.confidence, 60);
  EXPECT_NE(batch.reason.find("batch script"), std::string::npos) << batch.reason;
}

TEST(SlurmPlan, OneTaskPerNodeStartsTheNodesWorkers) {
  for (int node = 0; node < 3; ++node) {
    PlanResult r = plan(perNodeTask(node));
    ASSERT_TRUE(r.ok()) << r.error;
    const NodePlan& p = r.value;
    EXPECT_EQ(p.nnodes.value, 3);
    EXPECT_EQ(p.nnodes.source, "env SLURM_STEP_NUM_NODES=3");
    EXPECT_EQ(p.node_rank.value, node);
    EXPECT_EQ(p.node_rank.source, "env SLURM_NODEID=" + std::to_string(node));
    EXPECT_EQ(p.single_worker.value, false);
    EXPECT_FALSE(p.rank.has());
    EXPECT_FALSE(p.nproc_per_node.has());  // no GPUs, no flag: the host's default
    EXPECT_EQ(p.master_addr.value, "n1");
    EXPECT_EQ(p.master_addr.source, "rule: first host of SLURM_STEP_NODELIST=n[1-3]");
    EXPECT_EQ(p.master_port.value, 10000 + 41 * 4 + 0);
    EXPECT_NE(p.master_port.source.find("SLURM_JOB_ID=41 mod 5000"), std::string::npos) << p.master_port.source;
    EXPECT_EQ(p.run_id.value, "slurm-41.0");
    EXPECT_EQ(p.restart_count.value, 0);
  }
}

TEST(SlurmPlan, OneTaskPerNodeUsesGpusOnNodeButNeverStepGpus) {
  Env env = perNodeTask(2);
  env["SLURM_GPUS_ON_NODE"] = "8";
  env["SLURM_STEP_GPUS"] = "8,9,10,11,12,13,14,15";
  PlanResult r = plan(env);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.value.gpus_on_node.value, 8);
  EXPECT_EQ(r.value.nproc_per_node.value, 8);
  EXPECT_EQ(r.value.nproc_per_node.source, "rule: one worker per GPU, env SLURM_GPUS_ON_NODE=8");
  for (const auto& [name, value] : r.value.extra_env) {
    EXPECT_EQ(value.value->find("8,9"), std::string::npos) << name << " leaks SLURM_STEP_GPUS";
  }
  // The list reaches the host as the plan's physical GPU indices (sizing matches them to NVML's ordinals).
  EXPECT_EQ(r.value.gpu_indices.value, "8,9,10,11,12,13,14,15");
  EXPECT_EQ(r.value.gpu_indices.source, "env SLURM_STEP_GPUS");
  env.erase("SLURM_STEP_GPUS");
  env["SLURM_JOB_GPUS"] = "2,3";
  EXPECT_EQ(plan(env).value.gpu_indices.value, "2,3");
  // A --nproc-per-node flag wins; the backend then leaves the count to the host.
  PlanResult flagged = plan(env, Layout::kAuto, 2);
  ASSERT_TRUE(flagged.ok());
  EXPECT_FALSE(flagged.value.nproc_per_node.has());
}

TEST(SlurmPlan, OneTaskPerGpuMakesEachTaskOneWorker) {
  for (int proc = 0; proc < 4; ++proc) {
    PlanResult r = plan(perGpuTask(proc));
    ASSERT_TRUE(r.ok()) << r.error;
    const NodePlan& p = r.value;
    EXPECT_EQ(p.single_worker.value, true);
    EXPECT_NE(p.single_worker.source.find("SLURM_STEP_TASKS_PER_NODE=2(x2)"), std::string::npos);
    EXPECT_EQ(p.rank.value, proc);
    EXPECT_EQ(p.rank.source, "env SLURM_PROCID=" + std::to_string(proc));
    EXPECT_EQ(p.local_rank.value, proc % 2);
    EXPECT_EQ(p.node_rank.value, proc / 2);
    EXPECT_EQ(p.nproc_per_node.value, 2);
    EXPECT_EQ(p.nnodes.value, 2);
    EXPECT_EQ(p.gpus_on_node.value, 2);
    EXPECT_EQ(p.master_addr.value, "gpu07");
    EXPECT_EQ(p.master_port.value, 10000 + 77 * 4 + 1);
    EXPECT_EQ(p.run_id.value, "slurm-77.1");
  }
}

TEST(SlurmPlan, GpuAndTaskCountMismatchIsNoted) {
  Env env = perGpuTask(1);
  env["SLURM_GPUS_ON_NODE"] = "8";
  PlanResult r = plan(env);
  ASSERT_TRUE(r.ok()) << r.error;
  bool noted = false;
  for (const std::string& n : r.value.notes) noted |= n.find("8 GPUs but runs 2 tasks") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(SlurmPlan, ForcedTaskLayoutWithOneTaskPerNode) {
  PlanResult r = plan(perNodeTask(1), Layout::kTaskPerGpu);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.value.single_worker.value, true);
  EXPECT_EQ(r.value.rank.value, 1);
  EXPECT_EQ(r.value.nproc_per_node.value, 1);
  expectError(perGpuTask(0), "needs one task per node", Layout::kTaskPerNode);
}

TEST(SlurmPlan, CyclicDistributionKeepsProcidAsRankWithANote) {
  Env env = perGpuTask(0);
  env["SLURM_PROCID"] = "1";  // -m cyclic: node 0 holds tasks 0 and 2
  env["SLURM_LOCALID"] = "0";
  PlanResult r = plan(env);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.value.rank.value, 1);
  bool noted = false;
  for (const std::string& n : r.value.notes) noted |= n.find("not distributed in blocks") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(SlurmPlan, SubStepUsesTheStepsNodesNotTheJobs) {
  // srun -N2 -r1 inside a 3-node job: the step runs on n[2-3]; the job's list starts with n1.
  Env env = perNodeTask(0);
  env["SLURM_STEP_NODELIST"] = "n[2-3]";
  env["SLURM_STEP_NUM_NODES"] = env["SLURM_NNODES"] = "2";
  env["SLURM_STEP_NUM_TASKS"] = env["SLURM_NTASKS"] = "2";
  env["SLURM_STEP_TASKS_PER_NODE"] = env["SLURM_TASKS_PER_NODE"] = "1(x2)";
  env["SLURMD_NODENAME"] = "n2";
  PlanResult r = plan(env);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.value.master_addr.value, "n2");
  EXPECT_EQ(r.value.nnodes.value, 2);
}

TEST(SlurmPlan, MasterAndRestartFromTheEnvironment) {
  Env env = perNodeTask(1);
  env["MASTER_PORT"] = "29555";
  env["MASTER_ADDR"] = "10.0.0.9";
  env["SLURM_RESTART_COUNT"] = "2";
  PlanResult r = plan(env);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.value.master_port.value, 29555);
  EXPECT_EQ(r.value.master_port.source, "env MASTER_PORT=29555");
  EXPECT_EQ(r.value.master_addr.value, "10.0.0.9");
  EXPECT_EQ(r.value.restart_count.value, 2);
  EXPECT_EQ(r.value.restart_count.source, "env SLURM_RESTART_COUNT=2");
  env["MASTER_PORT"] = "70000";
  expectError(env, "MASTER_PORT='70000'");
}

TEST(SlurmPlan, DerivedPortsDifferForNeighbouringJobsAndSteps) {
  EXPECT_NE(derivedMasterPort(1000, 0), derivedMasterPort(1001, 0));
  EXPECT_NE(derivedMasterPort(1000, 0), derivedMasterPort(1000, 1));
  for (std::uint64_t job : {0ull, 1ull, 4999ull, 5000ull, 123456789ull}) {
    for (std::uint64_t step : {0ull, 3ull, 4294967294ull}) {
      int p = derivedMasterPort(job, step);
      EXPECT_GE(p, 10000);
      EXPECT_LT(p, 30000);  // below the ephemeral range
    }
  }
}

TEST(SlurmPlan, BatchScriptOfAMultiNodeJobIsAnError) {
  expectError(batchScript(), "srun --ntasks-per-node=1 taehv-run");
}

TEST(SlurmPlan, BatchScriptOfASingleNodeJobPlansThatNode) {
  Env env = batchScript();
  env["SLURM_NNODES"] = env["SLURM_JOB_NUM_NODES"] = "1";
  env["SLURM_JOB_NODELIST"] = env["SLURM_NODELIST"] = "n4";
  env["SLURM_TASKS_PER_NODE"] = "2";
  env["SLURM_NTASKS"] = "2";
  PlanResult r = plan(env);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.value.nnodes.value, 1);
  EXPECT_EQ(r.value.node_rank.value, 0);
  EXPECT_EQ(r.value.single_worker.value, false);
  EXPECT_EQ(r.value.master_addr.value, "n4");
}

TEST(SlurmPlan, ContradictionsAreErrors) {
  Env e = perNodeTask(0);
  e["SLURM_NNODES"] = "4";
  expectError(e, "SLURM_STEP_NUM_NODES=3 contradicts SLURM_NNODES=4");

  e = perNodeTask(0);
  e["SLURM_STEP_NODELIST"] = "n[1-4]";
  expectError(e, "names 4 hosts");

  e = perNodeTask(0);
  e["SLURM_STEP_TASKS_PER_NODE"] = "1(x2)";
  expectError(e, "lists 2 nodes");

  e = perNodeTask(0);
  e["SLURM_STEP_NUM_TASKS"] = e["SLURM_NTASKS"] = "4";
  expectError(e, "adds up to 3 tasks");

  e = perNodeTask(0);
  e["SLURM_NTASKS"] = "4";
  expectError(e, "SLURM_STEP_NUM_TASKS=3 contradicts SLURM_NTASKS=4");

  e = perNodeTask(2);
  e["SLURM_NODEID"] = "3";
  expectError(e, "SLURM_NODEID=3 is not below");

  e = perGpuTask(3);
  e["SLURM_PROCID"] = "4";
  expectError(e, "SLURM_PROCID=4 is not below the task count 4");

  e = perGpuTask(3);
  e["SLURM_LOCALID"] = "2";
  expectError(e, "SLURM_LOCALID=2 is not below the 2 tasks of node 1");

  e = perNodeTask(1);
  e["SLURMD_NODENAME"] = "n3";
  expectError(e, "SLURMD_NODENAME=n3 but node 1");

  e = perGpuTask(0);
  expectError(e, "contradicts SLURM_STEP_TASKS_PER_NODE=2(x2)", Layout::kAuto, 4);
}

TEST(SlurmPlan, UnevenTasksPerGpuCarryEveryNodesCount) {
  // srun -N2 -n4 on the real cluster gave 3,1: task 3 is node 1's only task.
  Env e = perGpuTask(3);
  e["SLURM_STEP_TASKS_PER_NODE"] = e["SLURM_TASKS_PER_NODE"] = "3,1";
  e["SLURM_LOCALID"] = "0";
  PlanResult r = plan(e);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.value.node_nprocs.value, (std::vector<int>{3, 1}));
  EXPECT_EQ(r.value.node_nprocs.source, "rule: tasks per node in SLURM_STEP_TASKS_PER_NODE=3,1");
  EXPECT_EQ(*r.value.nproc_per_node.value, 1);
  EXPECT_EQ(*r.value.rank.value, 3);
  EXPECT_EQ(*r.value.local_rank.value, 0);
  // An uneven step of one task per node is still the node layout (nothing to carry: each launcher has 1 task).
  e = perNodeTask(1);
  r = plan(e);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_FALSE(r.value.node_nprocs.has());
}

TEST(SlurmPlan, SlurmNprocsGivesEveryNodeItsOwnCountWithOneTaskPerNode) {
  PlanRequest request;
  request.options["slurm-nprocs"] = {"2,1(x2)"};
  for (int node = 0; node < 3; ++node) {
    PlanResult r = planSlurm(perNodeTask(node), request, Layout::kAuto);
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(*r.value.nproc_per_node.value, node == 0 ? 2 : 1);
    EXPECT_EQ(*r.value.node_nprocs.value, (std::vector<int>{2, 1, 1}));
    EXPECT_EQ(r.value.node_nprocs.source, "flag --slurm-nprocs 2,1(x2)");
  }
  request.nproc_per_node = 3;
  EXPECT_NE(planSlurm(perNodeTask(0), request, Layout::kAuto).error.find("--nproc-per-node 3 contradicts --slurm-nprocs"),
            std::string::npos);
  request.nproc_per_node.reset();
  request.options["slurm-nprocs"] = {"2(x3)"};
  EXPECT_NE(planSlurm(perGpuTask(0), request, Layout::kAuto).error.find("--slurm-nprocs 2(x3) lists 3 nodes"),
            std::string::npos)
      << planSlurm(perGpuTask(0), request, Layout::kAuto).error;
  request.options["slurm-nprocs"] = {"1,3"};
  EXPECT_NE(planSlurm(perGpuTask(0), request, Layout::kAuto).error.find("contradicts SLURM_STEP_TASKS_PER_NODE=2(x2)"),
            std::string::npos);
}

TEST(SlurmPlan, MalformedValuesNameTheVariable) {
  Env e = perNodeTask(0);
  e["SLURM_NODEID"] = "x";
  expectError(e, "SLURM_NODEID='x' is not a non-negative whole number");
  e = perNodeTask(0);
  e["SLURM_STEP_NODELIST"] = "n[3-1]";
  expectError(e, "SLURM_STEP_NODELIST: hostlist 'n[3-1]': range '3-1' goes backwards");
  e = perNodeTask(0);
  e["SLURM_STEP_TASKS_PER_NODE"] = "1(x3";
  expectError(e, "SLURM_STEP_TASKS_PER_NODE: tasks per node '1(x3'");
  e = perNodeTask(0);
  e.erase("SLURM_STEP_NODELIST");
  e.erase("SLURM_JOB_NODELIST");
  e.erase("SLURM_NODELIST");
  expectError(e, "cannot tell the job's nodes");
  expectError({}, "SLURM_JOB_ID is not set");
}

TEST(SlurmPlan, JobNodelistAloneMustMatchTheStep) {
  // Without SLURM_STEP_NODELIST the job's list is used only when its size matches the step.
  Env e = perNodeTask(0);
  e.erase("SLURM_STEP_NODELIST");
  e["SLURM_JOB_NODELIST"] = "n[1-5]";
  expectError(e, "set SLURM_STEP_NODELIST");
}

}  // namespace
}  // namespace taehv::slurm
