// Third-party plugin path, end to end: install this build into a temporary prefix, build
// examples/mpi_plugin against that installed package (find_package(taehv)), install the plugin, and have the
// installed taehv-run find, load and use it under Open MPI's environment (values set by hand: no mpirun needed,
// the backend only reads OMPI_COMM_WORLD_*).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "run_process.h"

namespace taehv::test {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

class MpiPluginTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = tempDir();
    prefix_ = root_ + "/prefix";
    auto env = cleanEnv();
    auto run = [&](std::vector<std::string> argv) {
      auto r = runProcess(argv, env, std::chrono::seconds(240));
      if (r.exit_code != 0) setup_error_ += "`" + argv[1] + " " + argv[2] + "` failed:\n" + r.out + r.err;
      return r.exit_code == 0;
    };
    const std::string build = std::getenv("TAEHV_BUILD_DIR");
    const std::string source = std::getenv("TAEHV_SOURCE_DIR");
    run({TEST_CMAKE, "--install", build, "--prefix", prefix_}) &&
        run({TEST_CMAKE, "-S", source + "/examples/mpi_plugin", "-B", root_ + "/mpi-build", "-G", TEST_GENERATOR,
             "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_PREFIX_PATH=" + prefix_}) &&
        run({TEST_CMAKE, "--build", root_ + "/mpi-build"}) && run({TEST_CMAKE, "--install", root_ + "/mpi-build"});
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  void SetUp() override { ASSERT_TRUE(setup_error_.empty()) << setup_error_; }

  static ProcessResult installed(std::vector<std::string> args, std::map<std::string, std::string> extra) {
    auto env = cleanEnv();
    for (auto& [k, v] : extra) env[k] = v;
    args.insert(args.begin(), prefix_ + "/bin/taehv-run");
    return runProcess(args, env);
  }

  static std::map<std::string, std::string> ompi(int rank, int size, int local_rank, int local_size) {
    return {{"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
            {"OMPI_COMM_WORLD_SIZE", std::to_string(size)},
            {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(local_rank)},
            {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(local_size)}};
  }

  static inline std::string root_, prefix_, setup_error_;
};

TEST_F(MpiPluginTest, TheInstallHasRunnerPluginsHeaderAndPackage) {
  EXPECT_TRUE(fs::exists(prefix_ + "/bin/taehv-run"));
  EXPECT_TRUE(fs::exists(prefix_ + "/include/taehv/plugin_api.h"));
  EXPECT_TRUE(fs::exists(prefix_ + "/" + TEST_PLUGIN_SUBDIR + "/taehv_plugin_slurm.so"));
  EXPECT_TRUE(fs::exists(prefix_ + "/" + TEST_PLUGIN_SUBDIR + "/taehv_plugin_mpi.so"));
}

TEST_F(MpiPluginTest, InstalledRunnerListsTheThirdPartyPlugin) {
  auto r = installed({"plugins", "--json"}, {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  bool found = false;
  for (const auto& p : Json::parse(r.out)) {
    if (p["name"] != "mpi") continue;
    found = true;
    EXPECT_EQ(p["plugin_version"], "1.0.0");
    EXPECT_EQ(p["api_version"], 2);
    EXPECT_EQ(p["path"], prefix_ + "/" + TEST_PLUGIN_SUBDIR + "/taehv_plugin_mpi.so");
  }
  EXPECT_TRUE(found) << r.out;
}

TEST_F(MpiPluginTest, AutoDetectsMpirunAndMapsOpenMpiRanks) {
  auto env = ompi(3, 4, 1, 2);
  env["MASTER_ADDR"] = "10.0.0.1";
  env["MASTER_PORT"] = "29400";
  auto r = installed({"describe", "--json"}, env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  ASSERT_EQ(j.size(), 1u);  // mpirun started this process: exactly one worker
  EXPECT_EQ(j[0]["rank"], 3);
  EXPECT_EQ(j[0]["local_rank"], 1);
  EXPECT_EQ(j[0]["world_size"], 4);
  EXPECT_EQ(j[0]["local_world_size"], 2);
  EXPECT_EQ(j[0]["node_rank"], 1);
  EXPECT_EQ(j[0]["nnodes"], 2);
  EXPECT_EQ(j[0]["master_addr"], "10.0.0.1");
  EXPECT_EQ(j[0]["master_port"], 29400);
  EXPECT_EQ(j[0]["provenance"]["rank"], "env OMPI_COMM_WORLD_RANK");
  EXPECT_EQ(j[0]["env"]["GROUP_RANK"], "1");

  auto flag = installed({"describe", "--json", "--master-addr", "10.9.9.9"}, env);  // the flag beats the env
  ASSERT_EQ(flag.exit_code, 0) << flag.err;
  EXPECT_EQ(Json::parse(flag.out)[0]["master_addr"], "10.9.9.9");
}

TEST_F(MpiPluginTest, TheWorkerRunsInPlaceWithItsMpiRank) {
  auto r = installed({"--", "/bin/sh", "-c", "echo $RANK/$WORLD_SIZE local $LOCAL_RANK pid $$"}, ompi(1, 2, 1, 2));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "1/2 local 1 pid " + std::to_string(r.pid) + "\n");
}

TEST_F(MpiPluginTest, BadLayoutsAreClearErrors) {
  auto r = installed({"describe"}, ompi(1, 3, 1, 2));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("backend mpi: ranks are not laid out in equal blocks per node"), std::string::npos) << r.err;
  r = installed({"describe"}, ompi(2, 4, 0, 2));  // two nodes, no master anywhere
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--master-addr"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace taehv::test
