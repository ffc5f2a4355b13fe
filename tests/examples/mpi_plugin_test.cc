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
  for (const char* header : {"plugin_api.h", "checked.h", "parse.h", "shell_quote.h"}) {
    EXPECT_TRUE(fs::exists(prefix_ + "/include/taehv/" + header)) << header;
  }
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
    EXPECT_EQ(p["api_version"], 3);
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

// The example's sub-command declares its options; the installed taehv-run parses them and answers --help.
TEST_F(MpiPluginTest, ItsSubCommandIsDeclaredAndParsedByTheHost) {
  const std::string self = prefix_ + "/bin/taehv-run";
  auto r = installed({"--backend", "mpi", "mpirun", "--np", "8", "--master-addr=node0", "--host", "node0:4,node1:4",
                      "--export", "NCCL_DEBUG", "--export=HF_HOME", "--", "python", "my train.py"},
                     {});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "mpirun -np 8 --host node0:4,node1:4 -x 'MASTER_ADDR=node0' -x 'MASTER_PORT=29500' -x NCCL_DEBUG "
                   "-x HF_HOME " + self + " -- python 'my train.py'\n");
  r = installed({"--backend", "mpi", "mpirun", "--help"}, {});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("usage: taehv-run --backend mpi mpirun [options] [-- COMMAND...]\n", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("--np N"), std::string::npos) << r.out;
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"--np", "2", "--np", "3", "--master-addr", "a"}, "option '--np' cannot be specified more than once"},
      {{"--npp", "2", "--master-addr", "a"}, "unknown option '--npp' (did you mean '--np'?)"},
      {{"--np", "two", "--master-addr", "a"}, "mpi mpirun: --np N is required"},
      {{"--np", "2"}, "mpi mpirun: --master-addr HOST is required"},
  };
  for (const auto& [args, want] : refused) {
    std::vector<std::string> argv = {"--backend", "mpi", "mpirun"};
    argv.insert(argv.end(), args.begin(), args.end());
    r = installed(argv, {});
    EXPECT_EQ(r.exit_code, 2) << want;
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

}  // namespace
}  // namespace taehv::test
