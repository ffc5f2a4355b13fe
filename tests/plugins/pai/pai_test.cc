// The pai backend (Alibaba Cloud PAI-DLC): environment mapping and the CreateJob request it renders/submits.
//
// Environment fixtures follow DLC's documented PyTorch variables,
// https://www.alibabacloud.com/help/en/pai/user-guide/general-environment-variables :
//   MASTER_ADDR (example dlc18isgeayd****-master-0), MASTER_PORT (23456), WORLD_SIZE = total number of nodes
//   (1 master + 1 worker -> 2), RANK = node index (master 0, worker-0 1, worker-1 2), NPROC_PER_NODE = GPUs per node.
// The request body follows the DLC OpenAPI CreateJob (POST /api/v1/jobs),
// https://www.alibabacloud.com/help/en/pai/developer-reference/api-pai-dlc-2020-12-03-createjob , and JobSpec,
// https://www.alibabacloud.com/help/en/pai/developer-reference/api-pai-dlc-2020-12-03-struct-jobspec .
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "../k8s/plugin_host.h"
#include "taehv/k8s/k8s_mapping.h"
#include "taehv/torch_env/container_plan.h"
#include "taehv/pai/pai_job.h"

namespace taehv::pai {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using testing::joinLogs;
using testing::readFile;
using testing::writeFile;

// worker-1 of a job with 1 master + 2 workers on 8-GPU nodes.
Env dlc(int rank = 2) {
  return {{"KUBERNETES_SERVICE_HOST", "172.16.0.1"},
          {"MASTER_ADDR", "dlc18isgeayd1234-master-0"},
          {"MASTER_PORT", "23456"},
          {"WORLD_SIZE", "3"},
          {"RANK", std::to_string(rank)},
          {"NPROC_PER_NODE", "8"}};
}

Backend* pai() { return testing::sharedPlugin("pai"); }

TEST(PaiMapping, DocumentedVariablesMapToTheNode) {
  auto r = planPai(dlc(), {});
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.value.nnodes.value, 3);
  EXPECT_EQ(r.value.nnodes.source, "env WORLD_SIZE");
  EXPECT_EQ(*r.value.node_rank.value, 2);
  EXPECT_EQ(*r.value.nproc_per_node.value, 8);
  EXPECT_EQ(r.value.nproc_per_node.source, "env NPROC_PER_NODE");
  EXPECT_EQ(*r.value.gpus_on_node.value, 8);
  EXPECT_EQ(*r.value.master_addr.value, "dlc18isgeayd1234-master-0");
  EXPECT_EQ(*r.value.master_port.value, 23456);
  EXPECT_EQ(*r.value.master_wait_seconds.value, torch_env::kDefaultMasterWaitSeconds);
  ASSERT_FALSE(r.value.notes.empty());
  EXPECT_NE(r.value.notes[0].find("WORLD_SIZE=3 read as the number of nodes"), std::string::npos);
}

TEST(PaiMapping, MasterNodeDoesNotWait) {
  auto r = planPai(dlc(0), {});
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.value.master_wait_seconds.value, 0);
}

TEST(PaiMapping, OlderDlcWithoutNprocLeavesWorkersToDetection) {
  Env env = dlc();
  env.erase("NPROC_PER_NODE");  // the 2024 version of the page lists no NPROC_PER_NODE
  auto r = planPai(env, {});
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_FALSE(r.value.nproc_per_node.has());
  EXPECT_GT(detectPai(env).confidence, k8s::detectK8s(env).confidence) << "the dlc*-master-0 name still says PAI";
}

TEST(PaiMapping, ContradictionsAreErrors) {
  Env env = dlc(3);  // RANK 3 with WORLD_SIZE 3
  auto r = planPai(env, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.find("node rank 3"), std::string::npos) << r.error;
  env = dlc();
  env.erase("MASTER_ADDR");
  r = planPai(env, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.find("no master address"), std::string::npos) << r.error;
  env = dlc();
  env["NPROC_PER_NODE"] = "eight";
  r = planPai(env, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.find("NPROC_PER_NODE='eight'"), std::string::npos) << r.error;
  env = dlc();
  env.erase("WORLD_SIZE");
  r = planPai(env, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.find("WORLD_SIZE"), std::string::npos) << r.error;
}

TEST(PaiMapping, PetNnodesIsCheckedAgainstWorldSize) {
  Env env = dlc();
  env["PET_NNODES"] = "3";  // agrees with WORLD_SIZE = nodes
  auto r = planPai(env, {});
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.value.nnodes.value, 3);
  env["WORLD_SIZE"] = "24";  // processes: 3 nodes x NPROC_PER_NODE 8
  r = planPai(env, {});
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(*r.value.nnodes.value, 3) << "WORLD_SIZE=24 must not become the node count";
  EXPECT_EQ(r.value.nnodes.source, "env PET_NNODES");
  env["WORLD_SIZE"] = "5";
  r = planPai(env, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.find("contradicts PET_NNODES=3"), std::string::npos) << r.error;
}

TEST(PaiMapping, NotPaiOnOtherPlatforms) {
  EXPECT_EQ(detectPai({{"JOB_COMPLETION_INDEX", "0"}, {"TAEHV_K8S_NNODES", "2"}}).confidence, 0);
  EXPECT_EQ(detectPai({{"PATH", "/bin"}}).confidence, 0);
  // Bare torch variables carry no DLC sign: pai does not claim them (in a pod k8s does, weakly; see k8s_mapping_test).
  const Env torch = {{"WORLD_SIZE", "2"}, {"RANK", "0"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}};
  EXPECT_EQ(detectPai(torch).confidence, 0);
  Env in_pod = torch;
  in_pod["KUBERNETES_SERVICE_HOST"] = "10.96.0.1";
  EXPECT_LT(detectPai(in_pod).confidence, k8s::detectK8s(in_pod).confidence);
}

// CreateJob body fields documented for the request and for JobSpec / ResourceConfig.
const std::set<std::string> kBodyFields = {"DisplayName",
                                           "JobType",
                                           "JobSpecs",
                                           "UserCommand",
                                           "WorkspaceId",
                                           "ResourceId",
                                           "DataSources",
                                           "CodeSource",
                                           "Envs",
                                           "ThirdpartyLibs",
                                           "ThirdpartyLibDir",
                                           "UserVpc",
                                           "Priority",
                                           "JobMaxRunningTimeMinutes",
                                           "Settings",
                                           "Options",
                                           "SuccessPolicy"};
const std::set<std::string> kJobSpecFields = {"Type",
                                              "Image",
                                              "ImageConfig",
                                              "PodCount",
                                              "EcsSpec",
                                              "ExtraPodSpec",
                                              "ResourceConfig",
                                              "UseSpotInstance",
                                              "SpotSpec",
                                              "AssignNodeSpec",
                                              "LocalMountSpecs",
                                              "AutoScalingSpec",
                                              "ServiceSpec",
                                              "IsChief",
                                              "RestartPolicy",
                                              "SystemDisk",
                                              "StartupDependencies"};
const std::set<std::string> kResourceConfigFields = {"CPU", "GPU", "Memory", "SharedMemory", "GPUType"};

void expectDocumentedShape(const Json& body) {
  for (auto& [k, v] : body.items()) EXPECT_TRUE(kBodyFields.count(k)) << "undocumented field " << k;
  EXPECT_EQ(body["JobType"], "PyTorchJob");
  for (const auto& spec : body["JobSpecs"]) {
    for (auto& [k, v] : spec.items()) EXPECT_TRUE(kJobSpecFields.count(k)) << "undocumented JobSpec field " << k;
    EXPECT_TRUE(spec["Type"] == "Master" || spec["Type"] == "Worker");
    EXPECT_TRUE(spec["PodCount"].is_number_integer());
    if (spec.contains("ResourceConfig")) {
      for (auto& [k, v] : spec["ResourceConfig"].items()) {
        EXPECT_TRUE(kResourceConfigFields.count(k)) << k;
        EXPECT_TRUE(v.is_string()) << "ResourceConfig values are strings";
      }
    }
  }
}

testing::CommandOutput run(const std::string& command, const std::vector<std::string>& args, Env env = {}) {
  if (!env.count("PATH")) env["PATH"] = "/usr/bin:/bin";
  return testing::runPluginCommand(pai(), env, command, args);
}

TEST(PaiRender, CreateJobBodyHasMasterWorkersAndCommand) {
  auto out = run("render", {"--nodes", "3", "--gpus-per-node", "8", "--image", "reg.example/taehv:1", "--ecs-spec",
                            "ecs.gn7i-c32g1.32xlarge", "--name", "vae", "--", "taehv-train", "--config", "a b.yaml"});
  ASSERT_EQ(out.rc, 0) << joinLogs(out);
  Json body = Json::parse(out.out);
  expectDocumentedShape(body);
  EXPECT_EQ(body["DisplayName"], "vae");
  ASSERT_EQ(body["JobSpecs"].size(), 2u);
  EXPECT_EQ(body["JobSpecs"][0]["Type"], "Master");
  EXPECT_EQ(body["JobSpecs"][0]["PodCount"], 1);
  EXPECT_EQ(body["JobSpecs"][1]["Type"], "Worker");
  EXPECT_EQ(body["JobSpecs"][1]["PodCount"], 2);
  EXPECT_EQ(body["JobSpecs"][1]["EcsSpec"], "ecs.gn7i-c32g1.32xlarge");
  EXPECT_EQ(body["UserCommand"], "taehv-run -- taehv-train --config 'a b.yaml'");
}

TEST(PaiRender, QuotaResourcesCarryGpuCount) {
  auto out = run("render", {"--nodes", "1", "--gpus-per-node", "4", "--image", "img", "--resource-id", "quota1",
                            "--cpu", "32", "--memory", "256Gi", "--workspace-id", "268"});
  ASSERT_EQ(out.rc, 0) << joinLogs(out);
  Json body = Json::parse(out.out);
  expectDocumentedShape(body);
  ASSERT_EQ(body["JobSpecs"].size(), 1u);
  EXPECT_EQ(body["JobSpecs"][0]["ResourceConfig"]["GPU"], "4");
  EXPECT_EQ(body["ResourceId"], "quota1");
  EXPECT_EQ(body["UserCommand"], "taehv-run");
}

TEST(PaiRender, BadArgumentsAreUsageErrors) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--gpus-per-node", "8", "--image", "i", "--ecs-spec", "e"}, "--nodes N is required"},
      {{"--nodes", "2", "--gpus-per-node", "8", "--image", "i"}, "exactly one of --ecs-spec"},
      {{"--nodes", "2", "--gpus-per-node", "8", "--image", "i", "--ecs-spec", "e", "--resource-id", "q"},
       "exactly one of --ecs-spec"},
      {{"--nodes", "2", "--gpus-per-node", "8", "--image", "i", "--ecs-spec", "e", "--cpu", "4"}, "--cpu/--memory"},
      {{"--nodes", "2", "--gpus-per-node", "8", "--image", "i", "--ecs-spec", "e", "--name", "a b"}, "--name a b"},
      {{"--nodes", "2", "--gpus-per-node", "8", "--image", "i", "--ecs-spec", "e", "--flavor", "x"}, "unknown option"},
  };
  for (const auto& [args, expect] : cases) {
    auto out = run("render", args);
    EXPECT_EQ(out.rc, 2) << expect;
    EXPECT_TRUE(out.out.empty());
    EXPECT_NE(joinLogs(out).find(expect), std::string::npos) << joinLogs(out);
  }
}

// Issue 17, kind 10: render accepted an image `img; rm -rf /`, negative CPUs and 99,999 GPUs.
TEST(HostilePaiRender, RefusesWhatThePlatformWouldReject) {
  const std::vector<std::string> base = {"--nodes", "2", "--resource-id", "q"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--gpus-per-node", "8", "--image", "img; rm -rf /"}, "--image 'img; rm -rf /' is not a container image"},
      {{"--gpus-per-node", "8", "--image", "img $(id)"}, "is not a container image"},
      {{"--gpus-per-node", "8", "--image", "Img:1"}, "is not a container image"},
      {{"--gpus-per-node", "8", "--image", "img:"}, "is not a container image"},
      {{"--gpus-per-node", "99999", "--image", "img"}, "--gpus-per-node 99999 is more than any DLC node has"},
      {{"--gpus-per-node", "65", "--image", "img"}, "at most 64"},
      {{"--gpus-per-node", "-1", "--image", "img"}, "--gpus-per-node -1 is not a whole number"},
      {{"--gpus-per-node", "8", "--image", "img", "--cpu", "-4"}, "--cpu -4 is not a whole number of CPU cores"},
      {{"--gpus-per-node", "8", "--image", "img", "--cpu", "0"}, "--cpu 0 is not"},
      {{"--gpus-per-node", "8", "--image", "img", "--cpu", "1e9"}, "--cpu 1e9 is not"},
      {{"--gpus-per-node", "8", "--image", "img", "--memory", "-1Gi"}, "--memory -1Gi is not a size"},
      {{"--gpus-per-node", "8", "--image", "img", "--memory", "lots"}, "--memory lots is not a size"},
  };
  for (const auto& [extra, expect] : cases) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    auto out = run("render", args);
    EXPECT_EQ(out.rc, 2) << expect;
    EXPECT_TRUE(out.out.empty()) << out.out;
    EXPECT_NE(joinLogs(out).find(expect), std::string::npos) << joinLogs(out);
  }
  for (const char* good : {"img", "reg.example/taehv:1", "localhost:5000/team/taehv_train:v1.2-gpu",
                           "registry.cn-hangzhou.aliyuncs.com/pai-dlc/pytorch-training:2.1-gpu-py310",
                           "img@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}) {
    std::vector<std::string> args = base;
    args.insert(args.end(), {"--gpus-per-node", "64", "--image", good, "--cpu", "32", "--memory", "256Gi"});
    auto out = run("render", args);
    EXPECT_EQ(out.rc, 0) << good << ": " << joinLogs(out);
  }
}

// Issue 38, defect 4: a command word that is not UTF-8 ended pai render with nlohmann's exception text. A rendered
// job's values are what the job runs with: refused with one line naming the word or option and the byte.
TEST(HostilePaiRender, TextThatIsNotUtf8IsRefusedAndNamed) {
  const std::vector<std::string> base = {"--nodes", "2", "--gpus-per-node", "8", "--image", "img", "--ecs-spec", "e"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--", "python", "tr\xE9in.py"}, "the command's word 2 'tr\\xE9in.py' is not valid UTF-8 (byte 0xE9 at offset 2)"},
      {{"--workspace-id", "w\xFF"}, "--workspace-id 'w\\xFF' is not valid UTF-8"},
      {{"--name", "n\xE9"}, "--name 'n\\xE9' is not valid UTF-8"},
  };
  for (const auto& [extra, expect] : cases) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    for (const char* command : {"render", "submit"}) {
      auto out = run(command, args);
      EXPECT_EQ(out.rc, 2) << expect;
      EXPECT_TRUE(out.out.empty()) << out.out;
      EXPECT_NE(joinLogs(out).find(expect), std::string::npos) << joinLogs(out);
      EXPECT_NE(joinLogs(out).find("give it in UTF-8"), std::string::npos) << joinLogs(out);
    }
  }
  auto out = run("render", {"--nodes", "1", "--gpus-per-node", "0", "--image", "img", "--ecs-spec", "e", "--",
                            "python", "caf\xC3\xA9.py"});
  ASSERT_EQ(out.rc, 0) << joinLogs(out);
  EXPECT_EQ(Json::parse(out.out)["UserCommand"], "taehv-run -- python 'caf\xC3\xA9.py'");
}

TEST(PaiRender, CommittedExamplesAreCurrent) {
  const std::string dir = testing::sourceDir() + "/examples/pai";
  int seen = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".json") continue;
    ++seen;
    // examples/pai/X.json is the output of the arguments in X.args (one per line).
    std::vector<std::string> args;
    std::istringstream lines(readFile(e.path().string().substr(0, e.path().string().size() - 5) + ".args"));
    for (std::string a; std::getline(lines, a);) args.push_back(a);
    auto out = run("render", args);
    ASSERT_EQ(out.rc, 0) << e.path() << joinLogs(out);
    EXPECT_EQ(readFile(e.path()), out.out) << e.path() << " is stale (see examples/pai/README.md)";
    expectDocumentedShape(Json::parse(out.out));
  }
  EXPECT_GE(seen, 1);
}

// No Alibaba Cloud account can be reached from here: a fake `aliyun` first on PATH records its arguments.
TEST(PaiSubmit, SendsTheBodyWithAliyunCli) {
  const std::string dir = testing::makeTempDir();
  writeFile(dir + "/aliyun", "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + dir + "/args\necho '{\"JobId\":\"dlc-1\"}'\n");
  chmod((dir + "/aliyun").c_str(), 0755);
  const std::vector<std::string> args = {"--nodes", "2", "--gpus-per-node", "8", "--image", "i", "--ecs-spec", "e"};
  auto out = run("submit", args, {{"PATH", dir + ":/usr/bin:/bin"}});
  EXPECT_EQ(out.rc, 0) << joinLogs(out);
  const std::string body = run("render", args).out;
  EXPECT_EQ(readFile(dir + "/args"),
            "pai-dlc\nPOST\n/api/v1/jobs\n--header\nContent-Type=application/json\n--body\n" + body + "\n");
  fs::remove_all(dir);
}

TEST(PaiSubmit, MissingAliyunIsAClearError) {
  const std::string dir = testing::makeTempDir();
  auto out =
      run("submit", {"--nodes", "2", "--gpus-per-node", "8", "--image", "i", "--ecs-spec", "e"}, {{"PATH", dir}});
  EXPECT_EQ(out.rc, 1);
  EXPECT_NE(joinLogs(out).find("`aliyun` is not on PATH"), std::string::npos) << joinLogs(out);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace taehv::pai
