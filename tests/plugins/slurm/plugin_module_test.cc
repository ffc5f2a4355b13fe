// The built plugin module (taehv_plugin_slurm.so) as the loader sees it: entry symbols, ABI version, and its
// sub-commands through the Backend interface.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>

#include "infra/fifo_guard.h"

#include "taehv/command_line.h"
#include "taehv/plugin_api.h"

namespace taehv {
namespace {

class SlurmModule : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string path = TAEHV_SLURM_PLUGIN_PATH;             // the built module, from CMake
    handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // never closed: plugins stay loaded
    ASSERT_NE(handle_, nullptr) << dlerror();
    auto info_fn = reinterpret_cast<const taehv_plugin_info_t* (*)()>(dlsym(handle_, kPluginInfoSymbol));
    ASSERT_NE(info_fn, nullptr);
    info_ = info_fn();
    auto create = reinterpret_cast<Backend* (*)()>(dlsym(handle_, kPluginFactorySymbol));
    ASSERT_NE(create, nullptr);
    backend_.reset(create());
    ASSERT_NE(backend_, nullptr);
    host_.log = [this](LogLevel, const std::string& m) { log_ += m + "\n"; };
    host_.self_path = "/opt/taehv/bin/taehv-run";
    host_.version = "0.1.0";
  }

  /// Runs sub-command `name` as taehv-run does (its arguments parsed by the command's declaration); a name the
  /// backend does not declare goes to runCommand as it is, as only a host with a bug would send it.
  int run(const std::string& name, const std::vector<std::string>& args, std::string* out) {
    testing::internal::CaptureStdout();
    int rc = -1;
    const std::vector<CommandSpec> commands = backend_->commands();
    const auto spec =
        std::find_if(commands.begin(), commands.end(), [&](const CommandSpec& c) { return c.name == name; });
    if (spec != commands.end()) {
      rc = runBackendCommand(*backend_, "slurm", *spec, host_, args);
    } else {
      rc = backend_->runCommand(host_, name, CommandArgs());
    }
    *out = testing::internal::GetCapturedStdout();
    return rc;
  }

  void* handle_ = nullptr;
  const taehv_plugin_info_t* info_ = nullptr;
  std::unique_ptr<Backend> backend_;
  HostContext host_;
  std::string log_;
};

TEST_F(SlurmModule, ExportsInfoForThisAbi) {
  EXPECT_EQ(info_->api_version, kPluginApiVersion);
  EXPECT_STREQ(info_->name, "slurm");
  // Only the two entry symbols are visible; the implementation is hidden.
  EXPECT_EQ(dlsym(handle_, "_ZN5taehv5slurm14expandHostlistESt17basic_string_viewIcSt11char_traitsIcEE"), nullptr);
}

TEST_F(SlurmModule, HostnamesPrintsOneHostPerLine) {
  std::string out;
  EXPECT_EQ(run("hostnames", {"n[1-3,7]"}, &out), 0);
  EXPECT_EQ(out, "n1\nn2\nn3\nn7\n");
  host_.env["SLURM_JOB_NODELIST"] = "a[0-1].b[2-3]";
  EXPECT_EQ(run("hostnames", {}, &out), 0);
  EXPECT_EQ(out, "a0.b2\na0.b3\na1.b2\na1.b3\n");
  EXPECT_EQ(run("hostlist", {"n1,n2,n3", "n5"}, &out), 0);
  EXPECT_EQ(out, "n[1-3,5]\n");
}

TEST_F(SlurmModule, BadHostlistIsAClearErrorNotACrash) {
  std::string out;
  EXPECT_EQ(run("hostnames", {"n[3-1]"}, &out), 2) << "bad input is a usage error: exit 2";
  EXPECT_EQ(out, "");
  EXPECT_NE(log_.find("range '3-1' goes backwards"), std::string::npos) << log_;
  EXPECT_EQ(run("hostlist", {"n1", "x;rm"}, &out), 2);
  EXPECT_EQ(out, "");
  EXPECT_NE(log_.find("host name 'x;rm' has the character ';'"), std::string::npos) << log_;
  EXPECT_EQ(run("frob", {}, &out), 2);
  EXPECT_NE(log_.find("unknown slurm command 'frob'"), std::string::npos) << log_;
}

// Issue 17, kind 10: `hostnames --help` printed "--help" as a host name.
TEST_F(SlurmModule, HostileHelpAndOptionsAreNeverHostNames) {
  std::string out;
  for (const char* command : {"hostnames", "hostlist"}) {
    EXPECT_EQ(run(command, {"--help"}, &out), 0) << command;
    EXPECT_EQ(out.rfind(std::string("usage: taehv-run --backend slurm ") + command, 0), 0u) << out;
    EXPECT_EQ(run(command, {"n1", "-h"}, &out), 0) << command;
    EXPECT_EQ(run(command, {"--frob"}, &out), 2) << command;
    EXPECT_EQ(out, "");
    EXPECT_NE(log_.find("unknown option '--frob'"), std::string::npos) << log_;
  }
}

TEST_F(SlurmModule, SubmitDryRunPrintsTheScript) {
  std::string out;
  EXPECT_EQ(run("submit", {"--nodes", "2", "--gpus-per-node", "4", "--job-name", "x", "--dry-run"}, &out), 0);
  EXPECT_EQ(out.rfind("#!/bin/bash\n", 0), 0u) << out;
  EXPECT_NE(out.find("TAEHV_RUN=/opt/taehv/bin/taehv-run"), std::string::npos) << out;
  EXPECT_EQ(run("submit", {"--gpus-per-node", "4"}, &out), 2);
  EXPECT_NE(log_.find("--nodes N is required"), std::string::npos) << log_;
}

TEST_F(SlurmModule, SubmitReportsAMissingSbatch) {
  host_.env["PATH"] = "/nonexistent";
  std::string out;
  EXPECT_EQ(run("submit", {"--nodes", "1"}, &out), 1);
  EXPECT_EQ(out, "");
  EXPECT_NE(log_.find("sbatch failed (exit code 127)"), std::string::npos) << log_;
}

// Issue 38: `submit --script FILE` wrote with std::ofstream: a FIFO there blocked the command (an open for writing
// waits for a reader) and a device or folder was written into or failed without its reason. The script now goes
// through the one output writer (taehv/files/output_file.h): each is one line, status 1, nothing opened.
TEST_F(SlurmModule, HostileScriptPathsAreOneLineNotAHang) {
  const std::string dir = ::testing::TempDir() + "/slurm-script-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir + "/folder");
  {
    test::FifoGuard fifo(dir + "/job.sbatch", std::chrono::seconds(5));
    for (const std::string& script : {fifo.path(), dir + "/folder", std::string("/dev/full")}) {
      std::string out;
      log_.clear();
      EXPECT_EQ(run("submit", {"--nodes", "1", "--dry-run", "--script", script}, &out), 1) << script;
      EXPECT_NE(log_.find("submit: --script: cannot write '" + script + "': it is a"), std::string::npos) << log_;
      EXPECT_EQ(out, "");
    }
    EXPECT_FALSE(fifo.fired()) << "the script was written into the FIFO";
  }
  std::string out;
  EXPECT_EQ(run("submit", {"--nodes", "1", "--dry-run", "--script", dir + "/job.sbatch"}, &out), 0) << log_;
  EXPECT_EQ(out.rfind("#!/bin/bash\n", 0), 0u) << out;
  std::filesystem::remove_all(dir);
}

TEST_F(SlurmModule, PlanThroughTheInterface) {
  host_.env = {{"SLURM_JOB_ID", "3"},
               {"SLURM_STEP_ID", "0"},
               {"SLURM_PROCID", "1"},
               {"SLURM_LOCALID", "0"},
               {"SLURM_NODEID", "1"},
               {"SLURM_STEP_NUM_NODES", "2"},
               {"SLURM_STEP_NUM_TASKS", "2"},
               {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"},
               {"SLURM_STEP_NODELIST", "n[1-2]"}};
  EXPECT_EQ(backend_->detect(host_).confidence, 95);
  PlanRequest req;
  PlanResult r = backend_->plan(host_, req);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.value.node_rank.value, 1);
  req.options["slurm-layout"] = {"task"};
  r = backend_->plan(host_, req);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.value.rank.value, 1);
  EXPECT_EQ(r.value.single_worker.value, true);
  req.options["slurm-layout"] = {"sideways"};
  EXPECT_NE(backend_->plan(host_, req).error.find("--slurm-layout 'sideways'"), std::string::npos);
}

}  // namespace
}  // namespace taehv
