// `taehv-run --backend k8s render|submit`, through the built plugin (.so loaded as taehv-run loads it):
// argument errors, the manifest's content, the render -> pod environment -> plan round trip, and submit with a
// fake kubectl. Schema validation of the rendered manifests is in k8s_validate_test.cc.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "plugin_host.h"
#include "pod_env.h"
#include "taehv/k8s/k8s_mapping.h"

namespace taehv::k8s {
namespace {

namespace fs = std::filesystem;
using testing::CommandOutput;
using testing::joinLogs;
using testing::loadPlugin;
using testing::runPluginCommand;

Backend* k8s() { return testing::sharedPlugin("k8s"); }

Env baseEnv() {
  Env env;
  env["PATH"] = "/usr/bin:/bin";
  return env;
}

CommandOutput render(const std::vector<std::string>& args) {
  return runPluginCommand(k8s(), baseEnv(), "render", args);
}

std::vector<YAML::Node> docs(const std::string& text) { return YAML::LoadAll(text); }

std::string tempDir() { return testing::makeTempDir(); }
using testing::readFile;
using testing::writeFile;

TEST(K8sRender, PluginLoadsWithItsCommands) {
  auto plugin = loadPlugin("k8s");
  ASSERT_TRUE(plugin.backend) << plugin.error;
  EXPECT_STREQ(plugin.info->name, "k8s");
  auto commands = plugin.backend->commands();
  ASSERT_EQ(commands.size(), 2u);
  EXPECT_EQ(commands[0].name, "render");
  EXPECT_EQ(commands[1].name, "submit");
}

// Issue 17, kind 10: the image reaches the pod spec; only a space was refused before.
TEST(HostileK8sRender, TheImageIsAContainerImageReference) {
  for (const char* bad : {"img; rm -rf /", "img$(id)", "'img'", "Img", "img:", "reg.example//img"}) {
    auto out = render({"--nodes", "2", "--gpus-per-node", "8", "--image", bad});
    EXPECT_EQ(out.rc, 2) << bad;
    EXPECT_TRUE(out.out.empty()) << "no partial manifest on errors";
    EXPECT_NE(joinLogs(out).find("--image '" + std::string(bad) + "' is not a container image reference"),
              std::string::npos)
        << joinLogs(out);
  }
  auto out = render({"--nodes", "2", "--gpus-per-node", "8", "--image", "localhost:5000/team/taehv_train:v1.2"});
  EXPECT_EQ(out.rc, 0) << joinLogs(out);
}

// Issue 38, defect 4: a command word that is not UTF-8 went into the manifest as it was: YAML that is not UTF-8,
// exit 0, and kubectl refusing it later. A rendered job's values are what the job runs with: refused, one line.
TEST(HostileK8sRender, TextThatIsNotUtf8IsRefusedAndNamed) {
  const std::vector<std::string> base = {"--nodes", "2", "--gpus-per-node", "8", "--image", "img"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--", "python", "a\xE9.py"}, "the command's word 2 'a\\xE9.py' is not valid UTF-8 (byte 0xE9 at offset 1)"},
      {{"--namespace", "ns\xE9"}, "--namespace 'ns\\xE9' is not valid UTF-8"},
      {{"--flavor", "jobset", "--shm-size", "1\xFFGi"}, "--shm-size '1\\xFFGi' is not valid UTF-8"},
  };
  for (const auto& [extra, expect] : cases) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    auto out = render(args);
    EXPECT_EQ(out.rc, 2) << expect;
    EXPECT_TRUE(out.out.empty()) << "no manifest that is not UTF-8";
    EXPECT_NE(joinLogs(out).find(expect), std::string::npos) << joinLogs(out);
  }
}

TEST(K8sRender, MissingOrBadArgumentsAreUsageErrors) {
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  const Case cases[] = {
      {{"--gpus-per-node", "8", "--image", "img"}, "--nodes N is required"},
      {{"--nodes", "2", "--image", "img"}, "--gpus-per-node G is required"},
      {{"--nodes", "2", "--gpus-per-node", "8"}, "--image IMAGE is required"},
      {{"--nodes", "zero", "--gpus-per-node", "8", "--image", "img"}, "--nodes zero"},
      {{"--nodes", "2", "--gpus-per-node", "8", "--image", "img", "--flavor", "mpijob"}, "--flavor mpijob"},
      {{"--nodes", "2", "--gpus-per-node", "8", "--image", "img", "--name", "Bad_Name"}, "--name Bad_Name"},
      {{"--nodes", "2", "--gpus-per-node", "8", "--image", "img", "--nodez", "2"},
       "unknown option '--nodez' (did you mean '--nodes'?)"},
      {{"--nodes", "2", "--gpus-per-node", "8", "--image", "img", "--"}, "nothing after `--`"},
      {{"--nodes", "2", "--gpus-per-node", "8", "--image", "img", "--name", std::string(62, 'a')}, "too long"},
      // Pods of a JobSet/TrainJob are <name>-node-0-<index>: 55 + 9 > 63.
      {{"--nodes", "2", "--gpus-per-node", "8", "--image", "img", "--flavor", "jobset", "--name", std::string(55, 'a')},
       "too long"},
      {{"--nodes", "2", "--gpus-per-node", "8", "--image", "img", "--max-restarts", "2"},
       "--max-restarts applies to --flavor jobset and trainjob"},
      {{"--nodes", "2", "--gpus-per-node", "8", "--image", "img", "--flavor", "jobset", "--max-restarts", "-1"},
       "--max-restarts -1"},
      {{"--nodes", "2", "--gpus-per-node", "8", "--image", "img", "--flavor", "jobset", "--runtime", "r"},
       "--runtime and --runtime-kind apply to --flavor trainjob only"},
      {{"--nodes", "2", "--gpus-per-node", "8", "--image", "img", "--flavor", "trainjob", "--runtime-kind", "Runtime"},
       "--runtime-kind Runtime is unknown"},
      {{"--nodes", "2", "--gpus-per-node", "8", "--image", "img", "--flavor", "trainjob", "--runtime", "Bad_R"},
       "--runtime Bad_R"},
      {{"--nodes", "2", "--gpus-per-node", "8", "--image", "img", "--flavor", "trainjob", "--port", "29501"},
       "fixes the master port at 29500"},
  };
  for (const auto& c : cases) {
    auto out = render(c.args);
    EXPECT_EQ(out.rc, 2) << c.expect;
    EXPECT_TRUE(out.out.empty()) << "no partial manifest on errors";
    EXPECT_NE(joinLogs(out).find(c.expect), std::string::npos) << joinLogs(out);
  }
}

TEST(K8sRender, IndexedJobHasServiceFailurePolicyGpusShmAndCommand) {
  auto out = render({"--nodes", "4", "--gpus-per-node", "8", "--image", "registry.example/taehv:1", "--name", "vae",
                     "--namespace", "ml", "--", "taehv-train", "--config", "c.yaml"});
  ASSERT_EQ(out.rc, 0) << joinLogs(out);
  auto d = docs(out.out);
  ASSERT_EQ(d.size(), 2u);
  const auto& svc = d[0];
  EXPECT_EQ(svc["kind"].as<std::string>(), "Service");
  EXPECT_EQ(svc["spec"]["clusterIP"].as<std::string>(), "None");
  EXPECT_EQ(svc["metadata"]["namespace"].as<std::string>(), "ml");
  const auto& job = d[1];
  EXPECT_EQ(job["kind"].as<std::string>(), "Job");
  const auto& spec = job["spec"];
  EXPECT_EQ(spec["completionMode"].as<std::string>(), "Indexed");
  EXPECT_EQ(spec["completions"].as<int>(), 4);
  EXPECT_EQ(spec["parallelism"].as<int>(), 4);
  EXPECT_EQ(spec["backoffLimit"].as<int>(), 0);
  EXPECT_EQ(spec["podFailurePolicy"]["rules"][0]["action"].as<std::string>(), "FailJob");
  const auto& pod = spec["template"]["spec"];
  EXPECT_EQ(pod["subdomain"].as<std::string>(), svc["metadata"]["name"].as<std::string>());
  EXPECT_EQ(pod["restartPolicy"].as<std::string>(), "Never");
  // The Service selects exactly the Job's pods.
  for (auto kv : svc["spec"]["selector"]) {
    EXPECT_EQ(spec["template"]["metadata"]["labels"][kv.first.as<std::string>()].as<std::string>(),
              kv.second.as<std::string>());
  }
  const auto& c = pod["containers"][0];
  EXPECT_EQ(c["image"].as<std::string>(), "registry.example/taehv:1");
  EXPECT_EQ(c["command"][0].as<std::string>(), "taehv-run");
  EXPECT_EQ(c["args"][0].as<std::string>(), "--");
  EXPECT_EQ(c["args"][1].as<std::string>(), "taehv-train");
  EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpu"].as<int>(), 8);
  EXPECT_EQ(c["volumeMounts"][0]["mountPath"].as<std::string>(), "/dev/shm");
  EXPECT_EQ(pod["volumes"][0]["emptyDir"]["medium"].as<std::string>(), "Memory");
}

TEST(K8sRender, CpuOnlyRenderHasNoGpuLimit) {
  auto out = render({"--nodes", "2", "--gpus-per-node", "0", "--image", "img"});
  ASSERT_EQ(out.rc, 0) << joinLogs(out);
  auto d = docs(out.out);
  EXPECT_FALSE(d[1]["spec"]["template"]["spec"]["containers"][0]["resources"]);
}

// The contract between render and plan: each pod's environment (the manifest's env + what the Job controller
// adds) maps to the right node, and every pod agrees on the master, which is pod 0's stable name.
TEST(K8sRender, RenderedEnvironmentMapsToEachNode) {
  auto out = render({"--nodes", "3", "--gpus-per-node", "2", "--image", "img", "--name", "vae", "--port", "29555"});
  ASSERT_EQ(out.rc, 0) << joinLogs(out);
  auto job = docs(out.out)[1];
  const auto& c = job["spec"]["template"]["spec"]["containers"][0];
  for (int index = 0; index < 3; ++index) {
    Env env;
    for (auto e : c["env"]) {
      if (e["value"]) env[e["name"].as<std::string>()] = e["value"].as<std::string>();
    }
    env["JOB_COMPLETION_INDEX"] = std::to_string(index);  // what the controller sets (downward API entry)
    auto r = planK8s(env, {});
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(*r.value.node_rank.value, index);
    EXPECT_EQ(*r.value.nnodes.value, 3);
    EXPECT_EQ(*r.value.nproc_per_node.value, 2);
    EXPECT_EQ(*r.value.master_addr.value, "vae-0.vae");
    EXPECT_EQ(*r.value.master_port.value, 29555);
  }
  EXPECT_EQ(c["ports"][0]["containerPort"].as<int>(), 29555);
}

TEST(K8sRender, PyTorchJobHasMasterAndWorkers) {
  auto out = render({"--nodes", "3", "--gpus-per-node", "4", "--image", "img", "--flavor", "pytorchjob"});
  ASSERT_EQ(out.rc, 0) << joinLogs(out);
  auto d = docs(out.out);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0]["kind"].as<std::string>(), "PyTorchJob");
  EXPECT_EQ(d[0]["spec"]["nprocPerNode"].as<std::string>(), "4");
  const auto& replicas = d[0]["spec"]["pytorchReplicaSpecs"];
  EXPECT_EQ(replicas["Master"]["replicas"].as<int>(), 1);
  EXPECT_EQ(replicas["Worker"]["replicas"].as<int>(), 2);
  EXPECT_EQ(replicas["Worker"]["template"]["spec"]["containers"][0]["name"].as<std::string>(), "pytorch");
  EXPECT_EQ(d[0]["spec"]["runPolicy"]["backoffLimit"].as<int>(), 0);
}

// --- JobSet and Trainer v2 ---

TEST(K8sRender, JobSetHasSecretDnsRestartsShmGpusNcclAndToken) {
  auto out = render({"--nodes", "4", "--gpus-per-node", "8", "--image", "img:1", "--name", "vae", "--namespace", "ml",
                     "--flavor", "jobset", "--max-restarts", "3", "--shm-size", "16Gi", "--", "taehv-train"});
  ASSERT_EQ(out.rc, 0) << joinLogs(out);
  auto d = docs(out.out);
  ASSERT_EQ(d.size(), 2u);
  const auto secret = testing::docOfKind(d, "Secret");
  EXPECT_EQ(secret["metadata"]["name"].as<std::string>(), "vae-token");
  EXPECT_EQ(secret["metadata"]["namespace"].as<std::string>(), "ml");
  const std::string token = secret["stringData"]["token"].as<std::string>();
  EXPECT_EQ(token.size(), 64u);
  EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos) << token;
  const auto js = testing::docOfKind(d, "JobSet");
  EXPECT_EQ(js["apiVersion"].as<std::string>(), "jobset.x-k8s.io/v1alpha2");
  EXPECT_TRUE(js["spec"]["network"]["enableDNSHostnames"].as<bool>());
  EXPECT_TRUE(js["spec"]["network"]["publishNotReadyAddresses"].as<bool>());
  EXPECT_EQ(js["spec"]["failurePolicy"]["maxRestarts"].as<int>(), 3);
  ASSERT_EQ(js["spec"]["replicatedJobs"].size(), 1u);
  const auto rjob = js["spec"]["replicatedJobs"][0];
  EXPECT_EQ(rjob["replicas"].as<int>(), 1);
  const auto job = rjob["template"]["spec"];
  EXPECT_EQ(job["completionMode"].as<std::string>(), "Indexed");
  EXPECT_EQ(job["completions"].as<int>(), 4);
  EXPECT_EQ(job["parallelism"].as<int>(), 4);
  EXPECT_EQ(job["backoffLimit"].as<int>(), 0);
  EXPECT_EQ(job["template"]["spec"]["volumes"][0]["emptyDir"]["sizeLimit"].as<std::string>(), "16Gi");
  const auto c = testing::jobSetContainer(d);
  EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpu"].as<int>(), 8);
  EXPECT_EQ(c["volumeMounts"][0]["mountPath"].as<std::string>(), "/dev/shm");
  // Pod 2's environment as the cluster builds it: the token from the Secret, sizing's values for 4 GPU nodes.
  Env env = testing::jobSetPodEnv(d, 2);
  EXPECT_EQ(env["TAEHV_JOB_TOKEN"], token);
  EXPECT_EQ(env["NCCL_BUFFSIZE"], std::to_string(16 << 20)) << "sizing: 2-7 nodes, 16 MiB";
  EXPECT_EQ(env["TAEHV_COLLECTIVE_TIMEOUT_S"], "7200") << "sizing: 2-7 nodes";
  EXPECT_EQ(env["JOBSET_NAME"], "vae");
  // CPU pods get no NCCL variables; a larger job a longer collective timeout.
  auto cpu = render({"--nodes", "8", "--gpus-per-node", "0", "--image", "img:1", "--flavor", "jobset"});
  ASSERT_EQ(cpu.rc, 0) << joinLogs(cpu);
  Env cpu_env = testing::jobSetPodEnv(docs(cpu.out), 0);
  EXPECT_EQ(cpu_env.count("NCCL_BUFFSIZE"), 0u);
  EXPECT_EQ(cpu_env["TAEHV_COLLECTIVE_TIMEOUT_S"], "14400") << "sizing: 8+ nodes";
  EXPECT_FALSE(testing::jobSetContainer(docs(cpu.out))["resources"]);
}

TEST(K8sRender, EveryRenderHasItsOwnToken) {
  auto a = render({"--nodes", "2", "--gpus-per-node", "0", "--image", "img", "--flavor", "jobset"});
  auto b = render({"--nodes", "2", "--gpus-per-node", "0", "--image", "img", "--flavor", "trainjob"});
  ASSERT_EQ(a.rc, 0);
  ASSERT_EQ(b.rc, 0);
  EXPECT_NE(testing::docOfKind(docs(a.out), "Secret")["stringData"]["token"].as<std::string>(),
            testing::docOfKind(docs(b.out), "Secret")["stringData"]["token"].as<std::string>());
}

// The render -> pod environment -> plan contract for a JobSet: every pod maps to its node, all agree on the master.
TEST(K8sRender, RenderedJobSetMapsToEachNode) {
  auto out = render({"--nodes", "3", "--gpus-per-node", "2", "--image", "img", "--name", "vae", "--flavor", "jobset",
                     "--port", "29555", "--max-restarts", "2"});
  ASSERT_EQ(out.rc, 0) << joinLogs(out);
  auto d = docs(out.out);
  for (int index = 0; index < 3; ++index) {
    Env env = testing::jobSetPodEnv(d, index, /*restart_attempt=*/1);
    ASSERT_EQ(k8sFlavor(env), K8sFlavor::kJobSet);
    auto r = planK8s(env, {});
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(*r.value.node_rank.value, index);
    EXPECT_EQ(*r.value.nnodes.value, 3);
    EXPECT_EQ(*r.value.nproc_per_node.value, 2);
    EXPECT_EQ(*r.value.master_addr.value, "vae-node-0-0.vae") << "pod 0 under the JobSet's headless Service";
    EXPECT_EQ(*r.value.master_port.value, 29555);
    EXPECT_EQ(*r.value.restart_count.value, 1);
  }
}

TEST(K8sRender, TrainJobReferencesItsRuntime) {
  for (const std::string kind : {"TrainingRuntime", "ClusterTrainingRuntime"}) {
    auto out = render({"--nodes", "2", "--gpus-per-node", "8", "--image", "img:1", "--name", "vae", "--namespace",
                       "ml", "--flavor", "trainjob", "--runtime-kind", kind, "--runtime", "taehv-torch",
                       "--max-restarts", "4", "--shm-size", "8Gi", "--", "taehv-train"});
    ASSERT_EQ(out.rc, 0) << joinLogs(out);
    auto d = docs(out.out);
    ASSERT_EQ(d.size(), 3u);
    const auto runtime = testing::docOfKind(d, kind);
    EXPECT_EQ(runtime["metadata"]["name"].as<std::string>(), "taehv-torch");
    EXPECT_EQ(bool(runtime["metadata"]["namespace"]), kind == "TrainingRuntime") << "a cluster runtime has none";
    EXPECT_EQ(runtime["metadata"]["labels"]["trainer.kubeflow.org/framework"].as<std::string>(), "torch");
    EXPECT_TRUE(runtime["spec"]["mlPolicy"]["torch"].IsMap());
    const auto tmpl = runtime["spec"]["template"]["spec"];
    EXPECT_EQ(tmpl["failurePolicy"]["maxRestarts"].as<int>(), 4);
    const auto rjob = tmpl["replicatedJobs"][0];
    EXPECT_EQ(rjob["name"].as<std::string>(), "node") << "the Trainer's pods are <trainjob>-node-0-<i>";
    EXPECT_EQ(rjob["template"]["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"].as<std::string>(),
              "trainer");
    const auto pod = rjob["template"]["spec"]["template"]["spec"];
    EXPECT_EQ(pod["containers"][0]["name"].as<std::string>(), "node");
    EXPECT_EQ(pod["volumes"][0]["emptyDir"]["sizeLimit"].as<std::string>(), "8Gi");
    const auto tj = testing::docOfKind(d, "TrainJob");
    EXPECT_EQ(tj["spec"]["runtimeRef"]["kind"].as<std::string>(), kind);
    EXPECT_EQ(tj["spec"]["runtimeRef"]["name"].as<std::string>(), "taehv-torch");
    const auto trainer = tj["spec"]["trainer"];
    EXPECT_EQ(trainer["numNodes"].as<int>(), 2);
    EXPECT_EQ(trainer["numProcPerNode"].as<int>(), 8);
    EXPECT_EQ(trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"].as<int>(), 8);
    EXPECT_EQ(trainer["command"][0].as<std::string>(), "taehv-run");
    EXPECT_EQ(trainer["args"][1].as<std::string>(), "taehv-train");
    // Pod 1 as the Trainer starts it maps to node 1 of 2, with the job's token.
    Env env = testing::trainJobPodEnv(d, 1, /*restart_attempt=*/2);
    auto r = planK8s(env, {});
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(*r.value.node_rank.value, 1);
    EXPECT_EQ(*r.value.nnodes.value, 2);
    EXPECT_EQ(*r.value.nproc_per_node.value, 8);
    EXPECT_EQ(*r.value.master_addr.value, "vae-node-0-0.vae");
    EXPECT_EQ(*r.value.restart_count.value, 2);
    EXPECT_EQ(env["TAEHV_JOB_TOKEN"], testing::docOfKind(d, "Secret")["stringData"]["token"].as<std::string>());
    EXPECT_EQ(env["NCCL_BUFFSIZE"], std::to_string(16 << 20));
  }
}

// --- submit ---
// No Kubernetes API server can run here: a fake `kubectl` first on PATH records its arguments and stdin.
TEST(K8sSubmit, PipesTheManifestToKubectlApply) {
  const std::string dir = tempDir();
  writeFile(dir + "/kubectl",
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + dir + "/args\ncat > " + dir + "/stdin\necho applied\n");
  chmod((dir + "/kubectl").c_str(), 0755);
  Env env = baseEnv();
  env["PATH"] = dir + ":" + env["PATH"];
  const std::vector<std::string> args = {"--nodes", "2", "--gpus-per-node", "1", "--image", "img:1"};
  auto out = runPluginCommand(k8s(), env, "submit", args);
  EXPECT_EQ(out.rc, 0) << joinLogs(out);
  EXPECT_EQ(readFile(dir + "/args"), "apply\n-f\n-\n");
  EXPECT_EQ(readFile(dir + "/stdin"), render(args).out);
  fs::remove_all(dir);
}

// A TrainJob submit applies the token Secret and the runtime before the TrainJob that needs them.
TEST(K8sSubmit, TrainJobAppliesSecretRuntimeThenTrainJob) {
  const std::string dir = tempDir();
  writeFile(dir + "/kubectl", "#!/bin/sh\ncat > " + dir + "/stdin\n");
  chmod((dir + "/kubectl").c_str(), 0755);
  Env env = baseEnv();
  env["PATH"] = dir + ":" + env["PATH"];
  auto out = runPluginCommand(k8s(), env, "submit",
                              {"--flavor", "trainjob", "--nodes", "2", "--gpus-per-node", "1", "--image", "img:1"});
  EXPECT_EQ(out.rc, 0) << joinLogs(out);
  std::vector<std::string> kinds;
  for (const auto& d : docs(readFile(dir + "/stdin"))) kinds.push_back(d["kind"].as<std::string>());
  EXPECT_EQ(kinds, (std::vector<std::string>{"Secret", "TrainingRuntime", "TrainJob"}));
  fs::remove_all(dir);
}

TEST(K8sSubmit, KubectlFailureIsReported) {
  const std::string dir = tempDir();
  writeFile(dir + "/kubectl", "#!/bin/sh\n/bin/cat >/dev/null\necho 'error: no cluster' >&2\nexit 3\n");
  chmod((dir + "/kubectl").c_str(), 0755);
  Env env = baseEnv();
  env["PATH"] = dir;
  auto out = runPluginCommand(k8s(), env, "submit", {"--nodes", "2", "--gpus-per-node", "1", "--image", "i"});
  EXPECT_EQ(out.rc, 3);
  EXPECT_NE(joinLogs(out).find("exit code 3"), std::string::npos) << joinLogs(out);
  fs::remove_all(dir);
}

TEST(K8sSubmit, MissingKubectlIsAClearError) {
  const std::string dir = tempDir();
  Env env = baseEnv();
  env["PATH"] = dir;  // empty folder: no kubectl
  auto out = runPluginCommand(k8s(), env, "submit", {"--nodes", "2", "--gpus-per-node", "1", "--image", "i"});
  EXPECT_EQ(out.rc, 1);
  EXPECT_NE(joinLogs(out).find("kubectl not found on PATH"), std::string::npos) << joinLogs(out);
  fs::remove_all(dir);
}

// A kubectl that is a dangling link (e.g. a removed cloud SDK, as on this project's build machines) is no kubectl.
TEST(K8sSubmit, DanglingKubectlLinkIsNotUsed) {
  const std::string dir = tempDir();
  fs::create_symlink(dir + "/gone/kubectl", dir + "/kubectl");
  Env env = baseEnv();
  env["PATH"] = dir;
  auto out = runPluginCommand(k8s(), env, "submit", {"--nodes", "1", "--gpus-per-node", "0", "--image", "i"});
  EXPECT_EQ(out.rc, 1);
  EXPECT_NE(joinLogs(out).find("kubectl not found on PATH"), std::string::npos) << joinLogs(out);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace taehv::k8s
