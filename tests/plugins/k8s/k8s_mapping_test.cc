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
#include "taehv/k8s/k8s_mapping.h"

#include <gtest/gtest.h>

#include "taehv/torch_env/env_reader.h"
#include "taehv/pai/pai_job.h"

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

PlanResult plan(const Env& env, PlanRequest request = {}) { return planK8s(env, request); }

TEST(K8sMapping, IndexedJobReadsCompletionIndexAndInjectedValues) {
  auto r = plan(indexedJob(2));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.plan.node_rank.value, 2);
  EXPECT_EQ(r.plan.node_rank.source, "env JOB_COMPLETION_INDEX");
  EXPECT_EQ(*r.plan.nnodes.value, 3);
  EXPECT_EQ(r.plan.nnodes.source, "env TAEHV_K8S_NNODES");
  EXPECT_EQ(*r.plan.master_addr.value, "train-0.train");
  EXPECT_EQ(*r.plan.master_port.value, 29500);
  EXPECT_EQ(*r.plan.nproc_per_node.value, 8);
  EXPECT_EQ(*r.plan.run_id.value, "train");
  EXPECT_EQ(*r.plan.master_wait_seconds.value, torch_env::kDefaultMasterWaitSeconds);
}

TEST(K8sMapping, MasterDoesNotWaitForItself) {
  auto r = plan(indexedJob(0));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.plan.master_wait_seconds.value, 0);
}

TEST(K8sMapping, MasterWaitOptionOverridesDefault) {
  PlanRequest req;
  req.options["master-wait"] = {"42"};
  auto r = plan(indexedJob(1), req);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.plan.master_wait_seconds.value, 42);
  EXPECT_EQ(r.plan.master_wait_seconds.source, "flag --master-wait");
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
  EXPECT_EQ(*r.plan.nnodes.value, 2) << "WORLD_SIZE=8 must not become the node count";
  EXPECT_EQ(r.plan.nnodes.source, "env PET_NNODES");
  EXPECT_EQ(*r.plan.node_rank.value, 1);
  EXPECT_EQ(*r.plan.nproc_per_node.value, 4);
  EXPECT_EQ(*r.plan.master_addr.value, "mnist-master-0");
  EXPECT_EQ(*r.plan.master_port.value, 23456);
  EXPECT_EQ(*r.plan.run_id.value, "mnist");
  bool explained = false;
  for (const auto& n : r.plan.notes) explained |= n.find("WORLD_SIZE=8 counts processes") != std::string::npos;
  EXPECT_TRUE(explained) << "describe must explain the WORLD_SIZE derivation";
}

TEST(K8sMapping, PyTorchJobWithoutPetNnodesDividesWorldSize) {
  Env env = pytorchJobV17();
  env.erase("PET_NNODES");
  auto r = plan(env);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.plan.nnodes.value, 2);
  EXPECT_NE(r.plan.nnodes.source.find("WORLD_SIZE / PET_NPROC_PER_NODE"), std::string::npos);
}

TEST(K8sMapping, PyTorchJobBeforeV17WorldSizeCountsPods) {
  auto r = plan(pytorchJobOld());
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.plan.nnodes.value, 2);
  EXPECT_EQ(*r.plan.node_rank.value, 1);
  EXPECT_FALSE(r.plan.nproc_per_node.has()) << "GPUs per node are left to taehv-run's detection";
}

TEST(K8sMapping, PyTorchJobAutoNprocCountsOnePerPod) {
  Env env = pytorchJobV17();
  env["PET_NPROC_PER_NODE"] = "auto";
  env["WORLD_SIZE"] = "2";  // the operator multiplies by 1 when nprocPerNode is not a number
  auto r = plan(env);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.plan.nnodes.value, 2);
  EXPECT_FALSE(r.plan.nproc_per_node.has());
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
  EXPECT_EQ(*r.plan.nnodes.value, 4);
  EXPECT_EQ(r.plan.nnodes.source, "env WORLD_SIZE");
  EXPECT_EQ(*r.plan.node_rank.value, 3);
  EXPECT_EQ(r.plan.node_rank.source, "env RANK");
  EXPECT_EQ(*r.plan.master_addr.value, "job-abc-master.ns.svc");
  EXPECT_EQ(*r.plan.master_port.value, 29500);
  EXPECT_FALSE(r.plan.nproc_per_node.has()) << "GPUs per node are left to taehv-run's detection";
  EXPECT_GT(*r.plan.master_wait_seconds.value, 0);
  ASSERT_FALSE(r.plan.notes.empty());
  EXPECT_NE(r.plan.notes[0].find("WORLD_SIZE=4 read as the number of nodes"), std::string::npos);
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
  EXPECT_NE(r.error.find("WORLD_SIZE=4x"), std::string::npos) << r.error;
  env = kubeBrain(1);
  env["MASTER_PORT"] = "70000";
  r = plan(env);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.find("MASTER_PORT=70000"), std::string::npos) << r.error;
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

}  // namespace
}  // namespace taehv::k8s
