// The k8s backend's environment mapping: each platform's documented variables -> the node plan, the WORLD_SIZE
// trap, contradictions, and detection that never ties with the pai backend.
//
// Fixture sources (the variables each platform documents):
//  Indexed Job: https://kubernetes.io/docs/tasks/job/indexed-parallel-processing-static/ (the control plane sets
//    JOB_COMPLETION_INDEX) and https://kubernetes.io/docs/tasks/job/job-with-pod-to-pod-communication/ (pod host
//    name <job>-<index>, reachable as <job>-<index>.<headless service> with spec.subdomain). The TAEHV_K8S_*
//    variables are what our own rendered manifest injects (k8s_render_test checks that contract end to end).
//  Kubeflow PyTorchJob: https://www.kubeflow.org/docs/components/trainer/legacy-v1/user-guides/pytorch/ and the
//    operator's pkg/controller.v1/pytorch/envvar.go; training-operator v1.7 (PR
//    https://github.com/kubeflow/training-operator/pull/1840) sets WORLD_SIZE = replicas x nprocPerNode, RANK,
//    PET_NODE_RANK, PET_NPROC_PER_NODE, PET_NNODES, MASTER_ADDR=<job>-master-0, MASTER_PORT=23456 and
//    PET_MASTER_ADDR/PET_MASTER_PORT; before v1.7 WORLD_SIZE = replicas
//    (https://github.com/kubeflow/training-operator/issues/1790).
//  KubeBrain-style: WORLD_SIZE = nodes, RANK = node rank, MASTER_ADDR, MASTER_PORT; the same shape as
//    Volcano's pytorch job plugin,
//    https://github.com/volcano-sh/volcano/blob/master/docs/user-guide/how_to_use_pytorch_plugin.md
//  PAI-DLC (for the no-tie checks): https://www.alibabacloud.com/help/en/pai/user-guide/general-environment-variables
//  Kubeflow Trainer v2 TrainJob: the torch plugin (kubeflow/trainer pkg/runtime/framework/plugins/torch) sets
//    PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK (from the completion-index annotation), PET_MASTER_ADDR =
//    <trainjob>-node-0-0.<trainjob>, PET_MASTER_PORT = 29500; its pods belong to an Indexed Job (JOB_COMPLETION_INDEX).
//  JobSet: pods <jobset>-<replicatedJob>-<jobIndex>-<podIndex> under a headless Service named after the JobSet; labels
//    jobset.sigs.k8s.io/jobset-name, replicatedjob-name, job-index, annotation restart-attempt, read through the
//    downward API as JOBSET_NAME, JOBSET_REPLICATED_JOB, JOBSET_JOB_INDEX, JOBSET_RESTART_ATTEMPT.
#include "taehv/k8s/k8s_mapping.h"

#include <gtest/gtest.h>

#include "taehv/pai/pai_job.h"
#include "taehv/slurm/slurm_env.h"
#include "taehv/torch_env/container_plan.h"

namespace taehv::k8s {
namespace {

// Every pod gets these from the kubelet; they are not a training platform by themselves.
Env pod(Env extra) {
  extra["KUBERNETES_SERVICE_HOST"] = "10.96.0.1";
  extra["KUBERNETES_PORT"] = "tcp://10.96.0.1:443";
  extra["HOSTNAME"] = "some-pod";
  return extra;
}

Env indexedJob(int index) {
  return pod({{"JOB_COMPLETION_INDEX", std::to_string(index)},
              {"TAEHV_K8S_NNODES", "3"},
              {"TAEHV_K8S_MASTER_ADDR", "train-0.train"},
              {"TAEHV_K8S_MASTER_PORT", "29500"},
              {"TAEHV_K8S_NPROC_PER_NODE", "8"},
              {"TAEHV_K8S_GPUS_PER_NODE", "8"},
              {"TAEHV_K8S_JOB_NAME", "train"}});
}

// training-operator >= v1.7, PyTorchJob "mnist" with Master 1 + Worker 1 and nprocPerNode "4"; this is worker-0.
Env pytorchJobV17() {
  return pod({{"PYTHONUNBUFFERED", "1"},
              {"MASTER_ADDR", "mnist-master-0"},
              {"MASTER_PORT", "23456"},
              {"PET_MASTER_ADDR", "mnist-master-0"},
              {"PET_MASTER_PORT", "23456"},
              {"WORLD_SIZE", "8"},
              {"RANK", "1"},
              {"PET_NODE_RANK", "1"},
              {"PET_NPROC_PER_NODE", "4"},
              {"PET_NNODES", "2"}});
}

// training-operator < v1.7: the same job's worker-0 saw WORLD_SIZE = replicas.
Env pytorchJobOld() {
  return pod({{"PYTHONUNBUFFERED", "0"},
              {"MASTER_ADDR", "mnist-master-0"},
              {"MASTER_PORT", "23456"},
              {"WORLD_SIZE", "2"},
              {"RANK", "1"}});
}

Env kubeBrain(int rank) {
  return pod({{"WORLD_SIZE", "4"},
              {"RANK", std::to_string(rank)},
              {"MASTER_ADDR", "job-abc-master.ns.svc"},
              {"MASTER_PORT", "29500"}});
}

Env paiDlc() {
  return pod({{"MASTER_ADDR", "dlc18isgeayd1234-master-0"},
              {"MASTER_PORT", "23456"},
              {"WORLD_SIZE", "3"},
              {"RANK", "2"},
              {"NPROC_PER_NODE", "8"}});
}

// Trainer v2, TrainJob "tj" of 2 nodes x 8 processes (what the issue tried as a new user would); `rank` is the pod.
Env trainJob(int rank) {
  return pod({{"PET_NNODES", "2"},
              {"PET_NPROC_PER_NODE", "8"},
              {"PET_NODE_RANK", std::to_string(rank)},
              {"PET_MASTER_ADDR", "tj-node-0-0.tj"},
              {"PET_MASTER_PORT", "29500"},
              {"JOB_COMPLETION_INDEX", std::to_string(rank)}});
}

// Our `render --flavor jobset --name js --nodes 3 --gpus-per-node 8`, pod `index`, as the kubelet resolves it.
Env ourJobSet(int index) {
  return pod({{"JOB_COMPLETION_INDEX", std::to_string(index)},
              {"JOBSET_NAME", "js"},
              {"JOBSET_REPLICATED_JOB", "node"},
              {"JOBSET_JOB_INDEX", "0"},
              {"JOBSET_RESTART_ATTEMPT", "2"},
              {"TAEHV_K8S_NNODES", "3"},
              {"TAEHV_K8S_MASTER_ADDR", "js-node-0-0.js"},
              {"TAEHV_K8S_MASTER_PORT", "29500"},
              {"TAEHV_K8S_NPROC_PER_NODE", "8"},
              {"TAEHV_K8S_GPUS_PER_NODE", "8"},
              {"TAEHV_K8S_JOB_NAME", "js"},
              {"TAEHV_JOB_TOKEN", "0123abcd"}});
}

// A user's JobSet "train" (replicated Job "workers", 4 pods) passing the labels and the node count only.
Env userJobSet(int index) {
  return pod({{"JOB_COMPLETION_INDEX", std::to_string(index)},
              {"JOBSET_NAME", "train"},
              {"JOBSET_REPLICATED_JOB", "workers"},
              {"TAEHV_K8S_NNODES", "4"}});
}

Env slurmStep() {
  return {{"SLURM_JOB_ID", "41"},         {"SLURM_STEP_ID", "0"},         {"SLURM_PROCID", "1"},
          {"SLURM_LOCALID", "0"},         {"SLURM_NODEID", "1"},          {"SLURM_NNODES", "2"},
          {"SLURM_NTASKS", "2"},          {"SLURM_TASKS_PER_NODE", "1(x2)"}, {"SLURM_STEP_NODELIST", "n[1-2]"},
          {"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_STEP_NUM_NODES", "2"}, {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"}};
}

PlanResult plan(const Env& env, PlanRequest request = {}) { return planK8s(env, request); }

bool hasNote(const NodePlan& p, const std::string& text) {
  for (const auto& n : p.notes) {
    if (n.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(K8sMapping, IndexedJobReadsCompletionIndexAndInjectedValues) {
  auto r = plan(indexedJob(2));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.value.node_rank.value, 2);
  EXPECT_EQ(r.value.node_rank.source, "env JOB_COMPLETION_INDEX");
  EXPECT_EQ(*r.value.nnodes.value, 3);
  EXPECT_EQ(r.value.nnodes.source, "env TAEHV_K8S_NNODES");
  EXPECT_EQ(*r.value.master_addr.value, "train-0.train");
  EXPECT_EQ(*r.value.master_port.value, 29500);
  EXPECT_EQ(*r.value.nproc_per_node.value, 8);
  EXPECT_EQ(*r.value.run_id.value, "train");
  EXPECT_EQ(*r.value.master_wait_seconds.value, torch_env::kDefaultMasterWaitSeconds);
}

TEST(K8sMapping, MasterDoesNotWaitForItself) {
  auto r = plan(indexedJob(0));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.value.master_wait_seconds.value, 0);
}

TEST(K8sMapping, MasterWaitOptionOverridesDefault) {
  PlanRequest req;
  req.options["master-wait"] = {"42"};
  auto r = plan(indexedJob(1), req);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.value.master_wait_seconds.value, 42);
  EXPECT_EQ(r.value.master_wait_seconds.source, "flag --master-wait");
  req.options["master-wait"] = {"soon"};
  r = plan(indexedJob(1), req);
  EXPECT_NE(r.error.find("--master-wait soon"), std::string::npos) << r.error;
}

TEST(K8sMapping, IndexedJobWithoutInjectedCountSaysHowToFix) {
  auto r = plan(pod({{"JOB_COMPLETION_INDEX", "1"}}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.find("TAEHV_K8S_NNODES"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("taehv-run --backend k8s render"), std::string::npos) << r.error;
}

TEST(K8sMapping, IndexedJobIndexBeyondCountIsAnError) {
  Env env = indexedJob(3);  // completions 3 -> indexes 0..2
  auto r = plan(env);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.find("node rank 3"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("node count 3"), std::string::npos) << r.error;
}

TEST(K8sMapping, IndexedJobWithoutMasterIsAnError) {
  Env env = indexedJob(1);
  env.erase("TAEHV_K8S_MASTER_ADDR");
  auto r = plan(env);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.find("no master address"), std::string::npos) << r.error;
}

TEST(K8sMapping, PyTorchJobV17WorldSizeCountsProcessesNotNodes) {
  auto r = plan(pytorchJobV17());
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.value.nnodes.value, 2) << "WORLD_SIZE=8 must not become the node count";
  EXPECT_EQ(r.value.nnodes.source, "env PET_NNODES");
  EXPECT_EQ(*r.value.node_rank.value, 1);
  EXPECT_EQ(*r.value.nproc_per_node.value, 4);
  EXPECT_EQ(*r.value.master_addr.value, "mnist-master-0");
  EXPECT_EQ(*r.value.master_port.value, 23456);
  EXPECT_EQ(*r.value.run_id.value, "mnist");
  bool explained = false;
  for (const auto& n : r.value.notes) explained |= n.find("WORLD_SIZE=8 counts processes") != std::string::npos;
  EXPECT_TRUE(explained) << "describe must explain the WORLD_SIZE derivation";
}

TEST(K8sMapping, PyTorchJobWithoutPetNnodesDividesWorldSize) {
  Env env = pytorchJobV17();
  env.erase("PET_NNODES");
  auto r = plan(env);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.value.nnodes.value, 2);
  EXPECT_NE(r.value.nnodes.source.find("WORLD_SIZE / PET_NPROC_PER_NODE"), std::string::npos);
}

TEST(K8sMapping, PyTorchJobBeforeV17WorldSizeCountsPods) {
  auto r = plan(pytorchJobOld());
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.value.nnodes.value, 2);
  EXPECT_EQ(*r.value.node_rank.value, 1);
  EXPECT_FALSE(r.value.nproc_per_node.has()) << "GPUs per node are left to taehv-run's detection";
}

TEST(K8sMapping, PyTorchJobAutoNprocCountsOnePerPod) {
  Env env = pytorchJobV17();
  env["PET_NPROC_PER_NODE"] = "auto";
  env["WORLD_SIZE"] = "2";  // the operator multiplies by 1 when nprocPerNode is not a number
  auto r = plan(env);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.value.nnodes.value, 2);
  EXPECT_FALSE(r.value.nproc_per_node.has());
}

TEST(K8sMapping, PyTorchJobWorldSizeNotMultipleOfNprocIsAnError) {
  Env env = pytorchJobV17();
  env["WORLD_SIZE"] = "7";
  auto r = plan(env);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.find("WORLD_SIZE=7 is not a multiple of PET_NPROC_PER_NODE=4"), std::string::npos) << r.error;
}

TEST(K8sMapping, PyTorchJobWorldSizeContradictingNodesIsAnError) {
  Env env = pytorchJobV17();
  env["WORLD_SIZE"] = "12";  // a multiple of 4, but not PET_NNODES=2 x 4
  auto r = plan(env);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.find("contradicts PET_NNODES=2"), std::string::npos) << r.error;
}

TEST(K8sMapping, PyTorchJobRankDisagreeingWithPetNodeRankIsAnError) {
  Env env = pytorchJobV17();
  env["PET_NODE_RANK"] = "0";
  auto r = plan(env);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.find("disagree"), std::string::npos) << r.error;
}

TEST(K8sMapping, PyTorchJobRankBeyondNodesIsAnError) {
  Env env = pytorchJobV17();
  env["RANK"] = "2";
  env["PET_NODE_RANK"] = "2";
  auto r = plan(env);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.find("node rank 2"), std::string::npos) << r.error;
}

TEST(K8sMapping, PyTorchJobElasticRangeIsRefused) {
  Env env = pytorchJobV17();
  env["PET_NNODES"] = "1:4";
  auto r = plan(env);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.find("elastic"), std::string::npos) << r.error;
}

TEST(K8sMapping, KubeBrainWorldSizeIsNodes) {
  auto r = plan(kubeBrain(3));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.value.nnodes.value, 4);
  EXPECT_EQ(r.value.nnodes.source, "env WORLD_SIZE");
  EXPECT_EQ(*r.value.node_rank.value, 3);
  EXPECT_EQ(r.value.node_rank.source, "env RANK");
  EXPECT_EQ(*r.value.master_addr.value, "job-abc-master.ns.svc");
  EXPECT_EQ(*r.value.master_port.value, 29500);
  EXPECT_FALSE(r.value.nproc_per_node.has()) << "GPUs per node are left to taehv-run's detection";
  EXPECT_GT(*r.value.master_wait_seconds.value, 0);
  ASSERT_FALSE(r.value.notes.empty());
  EXPECT_NE(r.value.notes[0].find("WORLD_SIZE=4 read as the number of nodes"), std::string::npos);
}

TEST(K8sMapping, KubeBrainRankAtOrBeyondWorldSizeIsAnError) {
  auto r = plan(kubeBrain(4));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.find("node rank 4"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("node count 4"), std::string::npos) << r.error;
}

TEST(K8sMapping, KubeBrainWithoutMasterIsAnError) {
  Env env = kubeBrain(1);
  env.erase("MASTER_ADDR");
  auto r = plan(env);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.find("no master address"), std::string::npos) << r.error;
}

TEST(K8sMapping, GarbageNumbersAreErrorsNamingTheVariable) {
  Env env = kubeBrain(1);
  env["WORLD_SIZE"] = "4x";
  auto r = plan(env);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.find("WORLD_SIZE='4x'"), std::string::npos) << r.error;
  env = kubeBrain(1);
  env["MASTER_PORT"] = "70000";
  r = plan(env);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.find("MASTER_PORT='70000'"), std::string::npos) << r.error;
}

TEST(K8sMapping, NothingToReadIsAClearError) {
  auto r = plan(pod({}));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.find("JOB_COMPLETION_INDEX"), std::string::npos) << r.error;
  EXPECT_EQ(detectK8s(pod({})).confidence, 0);
}

// On each platform's environment, exactly one of k8s/pai is most confident (the host refuses ties).
TEST(K8sMapping, DetectionNeverTiesWithPai) {
  struct Case {
    const char* platform;
    Env env;
    bool k8s_wins;
  };
  const Case cases[] = {{"indexed job", indexedJob(1), true},
                        {"pytorchjob v1.7", pytorchJobV17(), true},
                        {"pytorchjob old", pytorchJobOld(), true},
                        {"kubebrain", kubeBrain(1), true},
                        {"pai-dlc", paiDlc(), false}};
  for (const auto& c : cases) {
    const int k8s = detectK8s(c.env).confidence;
    const int pai = taehv::pai::detectPai(c.env).confidence;
    EXPECT_NE(k8s, pai) << c.platform;
    EXPECT_EQ(k8s > pai, c.k8s_wins) << c.platform << ": k8s " << k8s << " vs pai " << pai;
  }
}

// ---- Kubeflow Trainer v2 TrainJob ----

// The reproduction: this environment stopped with "TAEHV_K8S_NNODES is not set".
TEST(K8sMapping, TrainJobPodMapsWithProvenance) {
  auto r = plan(trainJob(1));
  ASSERT_TRUE(r.ok()) << r.error;
  const NodePlan& p = r.value;
  EXPECT_EQ(*p.node_rank.value, 1);
  EXPECT_EQ(p.node_rank.source, "env PET_NODE_RANK");
  EXPECT_EQ(*p.nnodes.value, 2);
  EXPECT_EQ(p.nnodes.source, "env PET_NNODES");
  EXPECT_EQ(*p.nproc_per_node.value, 8);
  EXPECT_EQ(*p.master_addr.value, "tj-node-0-0.tj");
  EXPECT_EQ(p.master_addr.source, "env PET_MASTER_ADDR");
  EXPECT_EQ(*p.master_port.value, 29500);
  EXPECT_EQ(*p.run_id.value, "tj") << p.run_id.source;
  EXPECT_GT(*p.master_wait_seconds.value, 0);
  EXPECT_TRUE(hasNote(p, "Kubeflow Trainer v2 TrainJob")) << "describe must name the flavour";
  EXPECT_EQ(k8sFlavor(trainJob(1)), K8sFlavor::kTrainJob);
}

TEST(K8sMapping, TrainJobAutoProcessesAndRestartAttempt) {
  Env env = trainJob(0);
  env["PET_NPROC_PER_NODE"] = "auto";
  env["JOBSET_RESTART_ATTEMPT"] = "1";  // a runtime that passes it (ours does)
  auto r = plan(env);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_FALSE(r.value.nproc_per_node.has()) << "auto: left to taehv-run's GPU detection";
  EXPECT_EQ(*r.value.restart_count.value, 1);
  EXPECT_EQ(r.value.restart_count.source, "env JOBSET_RESTART_ATTEMPT");
}

TEST(K8sMapping, TrainJobContradictionsAreErrors) {
  struct Case {
    const char* name;
    const char* value;
    const char* expect;
  };
  const Case cases[] = {
      {"JOB_COMPLETION_INDEX", "0", "PET_NODE_RANK=1 and JOB_COMPLETION_INDEX=0 disagree"},
      {"PET_NNODES", "1", "node rank 1"},                   // PET_NODE_RANK=1 not below the node count
      {"PET_NNODES", "1:4", "elastic"},                     // the Trainer does not make these, a user might
      {"PET_NPROC_PER_NODE", "eight", "PET_NPROC_PER_NODE=eight"},
      {"PET_MASTER_PORT", "70000", "PET_MASTER_PORT='70000'"},
      {"RANK", "0", "disagree"},                            // RANK added by hand must agree with PET_NODE_RANK
  };
  for (const auto& c : cases) {
    Env env = trainJob(1);
    env[c.name] = c.value;
    auto r = plan(env);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_NE(r.error.find(c.expect), std::string::npos) << c.name << ": " << r.error;
    EXPECT_NE(r.error.find("Trainer v2 TrainJob"), std::string::npos) << "the message names the flavour: " << r.error;
  }
  Env env = trainJob(1);
  env.erase("PET_MASTER_ADDR");
  env.erase("PET_MASTER_PORT");
  auto r = plan(env);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.find("no master address"), std::string::npos) << r.error;
}

// ---- JobSet ----

TEST(K8sMapping, OurJobSetPodMapsWithProvenance) {
  auto r = plan(ourJobSet(2));
  ASSERT_TRUE(r.ok()) << r.error;
  const NodePlan& p = r.value;
  EXPECT_EQ(*p.node_rank.value, 2);
  EXPECT_EQ(p.node_rank.source, "env JOB_COMPLETION_INDEX");
  EXPECT_EQ(*p.nnodes.value, 3);
  EXPECT_EQ(*p.master_addr.value, "js-node-0-0.js");
  EXPECT_EQ(p.master_addr.source, "env TAEHV_K8S_MASTER_ADDR");
  EXPECT_EQ(*p.nproc_per_node.value, 8);
  EXPECT_EQ(*p.gpus_on_node.value, 8);
  EXPECT_EQ(*p.restart_count.value, 2);
  EXPECT_EQ(p.restart_count.source, "env JOBSET_RESTART_ATTEMPT");
  EXPECT_EQ(*p.run_id.value, "js");
  EXPECT_TRUE(hasNote(p, "JobSet js")) << "describe must name the flavour";
}

TEST(K8sMapping, UserJobSetMasterAndPortByRule) {
  auto r = plan(userJobSet(3));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.value.node_rank.value, 3);
  EXPECT_EQ(*r.value.nnodes.value, 4);
  EXPECT_EQ(*r.value.master_addr.value, "train-workers-0-0.train");
  EXPECT_EQ(r.value.master_addr.source.rfind("rule: ", 0), 0u) << r.value.master_addr.source;
  EXPECT_EQ(*r.value.master_port.value, kDefaultMasterPort);
  EXPECT_EQ(r.value.master_port.source.rfind("default", 0), 0u) << r.value.master_port.source;
  EXPECT_EQ(*r.value.run_id.value, "train");
  EXPECT_FALSE(r.value.restart_count.has());
}

TEST(K8sMapping, JobSetContradictionsAreErrors) {
  struct Case {
    Env env;
    const char* expect;
  };
  Env no_count = userJobSet(1);
  no_count.erase("TAEHV_K8S_NNODES");
  Env other_job = userJobSet(1);
  other_job["JOBSET_JOB_INDEX"] = "1";  // replicas: 2 is not a shape the mapping reads
  Env beyond = userJobSet(4);
  Env no_rjob = userJobSet(1);
  no_rjob.erase("JOBSET_REPLICATED_JOB");
  Env no_index = userJobSet(1);
  no_index.erase("JOB_COMPLETION_INDEX");
  Env bad_ws = ourJobSet(1);
  bad_ws["WORLD_SIZE"] = "5";
  Env bad_restart = ourJobSet(1);
  bad_restart["JOBSET_RESTART_ATTEMPT"] = "-1";
  const Case cases[] = {{no_count, "TAEHV_K8S_NNODES is not"},
                        {other_job, "JOBSET_JOB_INDEX=1"},
                        {beyond, "node rank 4"},
                        {no_rjob, "JOBSET_REPLICATED_JOB"},
                        {no_index, "completionMode: Indexed"},
                        {bad_ws, "WORLD_SIZE=5 matches neither"},
                        {bad_restart, "JOBSET_RESTART_ATTEMPT='-1'"}};
  for (const auto& c : cases) {
    auto r = plan(c.env);
    ASSERT_FALSE(r.ok()) << c.expect;
    EXPECT_NE(r.error.find(c.expect), std::string::npos) << r.error;
  }
}

// ---- detection: every flavour against every other and against the other backends ----

// On each platform's environment exactly one backend claims it most confidently (the host refuses ties), it is the
// right one, and k8s reads the right flavour: so no flavour is ever mistaken for another.
TEST(K8sMapping, DetectionTellsEveryFlavourApart) {
  struct Case {
    const char* platform;
    Env env;
    const char* backend;  // "k8s", "pai", "slurm" or "none"
    K8sFlavor flavor;     // what k8s reads (kNone: k8s does not claim it)
  };
  Env dlc_with_operator = paiDlc();  // DLC runs PyTorch through Kubeflow's operator: PET_* may be there too
  dlc_with_operator["PET_NNODES"] = "3";
  dlc_with_operator["PET_NODE_RANK"] = "2";
  Env plain_indexed = pod({{"JOB_COMPLETION_INDEX", "1"}});
  const Case cases[] = {
      {"Trainer v2 TrainJob", trainJob(1), "k8s", K8sFlavor::kTrainJob},
      {"JobSet (ours)", ourJobSet(1), "k8s", K8sFlavor::kJobSet},
      {"JobSet (a user's)", userJobSet(1), "k8s", K8sFlavor::kJobSet},
      {"Indexed Job (ours)", indexedJob(1), "k8s", K8sFlavor::kIndexedJob},
      {"Indexed Job (another)", plain_indexed, "k8s", K8sFlavor::kIndexedJob},
      {"PyTorchJob v1.7", pytorchJobV17(), "k8s", K8sFlavor::kPyTorchJob},
      {"PyTorchJob < v1.7", pytorchJobOld(), "k8s", K8sFlavor::kTorchStyle},
      {"KubeBrain-style", kubeBrain(1), "k8s", K8sFlavor::kTorchStyle},
      {"PAI-DLC", paiDlc(), "pai", K8sFlavor::kTorchStyle},
      {"PAI-DLC with the operator's PET_*", dlc_with_operator, "pai", K8sFlavor::kPyTorchJob},
      {"SLURM step", slurmStep(), "slurm", K8sFlavor::kNone},
      {"torchrun's PET_* outside a pod", {{"PET_NNODES", "2"}, {"PET_NODE_RANK", "1"}}, "none", K8sFlavor::kNone},
      {"an outer launcher's RANK/WORLD_SIZE outside a pod",
       {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
       "none",
       K8sFlavor::kNone},
  };
  for (const auto& c : cases) {
    const std::pair<const char*, int> scores[] = {{"k8s", detectK8s(c.env).confidence},
                                                  {"pai", taehv::pai::detectPai(c.env).confidence},
                                                  {"slurm", taehv::slurm::detectSlurm(c.env).confidence}};
    const char* winner = "none";
    int best = 0;
    bool tie = false;
    for (const auto& [name, score] : scores) {
      if (score > best) {
        winner = name;
        best = score;
        tie = false;
      } else if (score == best && score > 0) {
        tie = true;
      }
    }
    EXPECT_FALSE(tie) << c.platform << ": two backends claim it at " << best;
    EXPECT_STREQ(winner, c.backend) << c.platform << ": k8s " << scores[0].second << ", pai " << scores[1].second
                                    << ", slurm " << scores[2].second;
    EXPECT_EQ(k8sFlavor(c.env), c.flavor) << c.platform;
  }
  // And the flavours' own plans succeed on their environments (not merely detected).
  for (const Env& env : {trainJob(1), ourJobSet(1), userJobSet(1), indexedJob(1), pytorchJobV17(), kubeBrain(1)}) {
    EXPECT_TRUE(plan(env).ok()) << plan(env).error;
  }
}

}  // namespace
}  // namespace taehv::k8s
