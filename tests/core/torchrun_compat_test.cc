// readTorchrunLine: torchrun's command line read as taehv-run's (the end-to-end comparison with the real torchrun
// is tests/core/torchrun/torchrun_compat_test.py).
#include "taehv/torchrun_compat.h"

#include <gtest/gtest.h>

#include <map>

namespace taehv {
namespace {

/// A context with taehv-run's options that matter here: flags and options with values.
TorchrunContext context(Env env = {}, bool has_separator = false) {
  TorchrunContext c;
  c.env = std::move(env);
  c.env["PYTHON_EXEC"] = c.env.count("PYTHON_EXEC") ? c.env["PYTHON_EXEC"] : "/opt/py/bin/python3";
  static const std::map<std::string, OptionArity> kOptions = {
      {"nnodes", OptionArity::kValue},      {"nproc-per-node", OptionArity::kValue},
      {"node-rank", OptionArity::kValue},   {"master-addr", OptionArity::kValue},
      {"master-port", OptionArity::kValue}, {"run-id", OptionArity::kValue},
      {"log-dir", OptionArity::kValue},     {"shutdown-grace", OptionArity::kValue},
      {"standalone", OptionArity::kFlag},   {"verbose", OptionArity::kFlag}};
  c.arity = [](const std::string& name) {
    auto it = kOptions.find(name);
    return it == kOptions.end() ? OptionArity::kUnknown : it->second;
  };
  c.sub_commands = {"describe", "doctor", "plugins"};
  c.has_separator = has_separator;
  c.free_port = [] { return 40123; };
  return c;
}

using Args = std::vector<std::string>;

TorchrunLine read(const Args& args, Env env = {}) {
  Checked<TorchrunLine> line = readTorchrunLine(args, context(std::move(env)));
  EXPECT_TRUE(line.ok()) << line.error;
  return line.value;
}

TEST(TorchrunCompat, TheScriptsArgumentsAreTheScriptsEvenWhenTheyLookLikeOptions) {
  const TorchrunLine line = read({"--nproc_per_node=2", "train.py", "--nproc_per_node", "3", "--verbose", "-m", "x"});
  EXPECT_EQ(line.launcher_args, (Args{"--nproc_per_node=2"}));
  ASSERT_TRUE(line.command);
  EXPECT_EQ(*line.command,
            (Args{"/opt/py/bin/python3", "-u", "train.py", "--nproc_per_node", "3", "--verbose", "-m", "x"}));
}

TEST(TorchrunCompat, ModuleNoPythonAndRunPathBuildTorchrunsCommand) {
  EXPECT_EQ(*read({"-m", "torchtitan.train", "--a"}).command,
            (Args{"/opt/py/bin/python3", "-u", "-m", "torchtitan.train", "--a"}));
  EXPECT_EQ(*read({"--module", "pkg"}).module, "pkg");
  EXPECT_EQ(*read({"--no_python", "./run.sh", "1"}).command, (Args{"./run.sh", "1"}));
  EXPECT_EQ(*read({"--run-path", "/abs/t.py"}).command, (Args{"/opt/py/bin/python3", "-u", "/abs/t.py"}));
  // PET_* stand for torchrun's flags as they do for torchrun (check_env: an integer, 1 = on).
  EXPECT_EQ(*read({"pkg"}, {{"PET_MODULE", "1"}}).command, (Args{"/opt/py/bin/python3", "-u", "-m", "pkg"}));
  EXPECT_EQ(*read({"t.py"}, {{"PYTHON_EXEC", "/x/python"}}).command, (Args{"/x/python", "-u", "t.py"}));
  EXPECT_EQ(*read({"--python", "/y/python", "t.py"}).command, (Args{"/y/python", "-u", "t.py"}));
}

TEST(TorchrunCompat, RendezvousMapsOntoMasterAndRunId) {
  EXPECT_EQ(read({"--rdzv-endpoint", "n0:1234", "--rdzv_id=j", "t.py"}).launcher_args,
            (Args{"--run-id", "j", "--master-addr", "n0", "--master-port", "1234"}));
  // c10d: port 29400 when none is given (torchrun's DEFAULT_PORT); port 0 on one node: a free port.
  EXPECT_EQ(read({"--rdzv-backend=c10d", "--rdzv-endpoint=n0", "t.py"}).launcher_args,
            (Args{"--master-addr", "n0", "--master-port", "29400"}));
  EXPECT_EQ(read({"--rdzv-backend=c10d", "--rdzv-endpoint=[::1]:0", "t.py"}).launcher_args,
            (Args{"--master-addr", "::1", "--master-port", "40123"}));
  // c10d over several nodes without a node rank (flag or PET_NODE_RANK): taehv-run's --rdzv-backend c10d, whose node
  // group numbers the nodes as they arrive (issue 35); with one, the node rank orders them as before.
  EXPECT_EQ(read({"--nnodes", "1:3", "--rdzv-backend", "c10d", "--rdzv-endpoint", "n0", "t.py"}).launcher_args,
            (Args{"--nnodes", "1:3", "--rdzv-backend", "c10d", "--master-addr", "n0", "--master-port", "29400"}));
  EXPECT_EQ(read({"--nnodes=2", "--rdzv-backend=c10d", "--rdzv-endpoint=n0:5", "t.py"}, {{"PET_NODE_RANK", "1"}})
                .launcher_args,
            (Args{"--nnodes=2", "--master-addr", "n0", "--master-port", "5"}));
  // The endpoint replaces --master-addr/--master-port, as torchrun uses it when given.
  EXPECT_EQ(read({"--master-addr", "x", "--rdzv-endpoint", "n0:5", "t.py"}).launcher_args,
            (Args{"--master-addr", "n0", "--master-port", "5"}));
  // etcd and etcd-v2: the etcd node group (its v3 API) at those endpoints. No --master-addr is made up: the master is
  // chosen at formation, which resolveNode records for master_addr (descriptor_test.cc).
  EXPECT_EQ(read({"--nnodes=2", "--rdzv-backend=etcd-v2", "--rdzv-endpoint", "e1:2379,e2:2379", "t.py"}).launcher_args,
            (Args{"--nnodes=2", "--rdzv-backend", "etcd", "--rdzv-endpoint", "e1:2379,e2:2379"}));
  // --standalone: torchrun ignores the rendezvous flags.
  EXPECT_EQ(read({"--standalone", "--rdzv-endpoint", "n0:5", "t.py"}).launcher_args, (Args{"--standalone"}));
  // PET_RDZV_ENDPOINT stands for the flag.
  EXPECT_EQ(read({"t.py"}, {{"PET_RDZV_ENDPOINT", "n1:7"}}).launcher_args,
            (Args{"--master-addr", "n1", "--master-port", "7"}));
  // ... in torchrun's form only: with a sub-command (or `--`) a backend plans, PET_RDZV_* do not outrank it.
  EXPECT_EQ(read({"describe"}, {{"PET_RDZV_ENDPOINT", "n1:7"}, {"PET_RDZV_BACKEND", "c10d"}}).launcher_args,
            (Args{"describe"}));
}

TEST(TorchrunCompat, RefusedAndBadInputIsOneLineNamingTheOption) {
  const std::vector<std::pair<Args, std::string>> cases = {
      {{"--rdzv-endpoint", ":29400", "t.py"}, "--rdzv-endpoint ':29400': no host name"},
      {{"--rdzv-endpoint", "n0:http", "t.py"}, "the port 'http' is not a number 0..65535"},
      {{"--rdzv-endpoint", "n0:65536", "t.py"}, "port 65536 is not 0..65535"},
      {{"--rdzv-endpoint", "n0:", "t.py"}, "empty port after ':'"},
      {{"--rdzv-endpoint", "fd00::1:29400", "t.py"}, "an IPv6 address needs brackets"},
      {{"--rdzv-endpoint", "[fd00::1", "t.py"}, "no ']' after the IPv6 address"},
      {{"--rdzv-endpoint", "http://n0:29400", "t.py"}, "a URL; give no scheme"},
      {{"--rdzv-conf", "a=1,,b", "t.py"}, "is not key=value"},
      {{"--rdzv-conf", "is_host=maybe", "t.py"}, "true or false"},
      {{"--rdzv-backend", "etcd-v2", "t.py"}, "needs --rdzv-endpoint HOST:PORT"},
      {{"--rdzv-backend", "zk", "t.py"}, "static, c10d, etcd and etcd-v2"},
      {{"--nnodes=2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "n0:0", "--node-rank", "1", "t.py"},
       "one node only"},
      {{"--virtual-local-rank", "t.py"}, "--virtual-local-rank"},
      {{"--duplicate-stdout-filters", "a,b", "t.py"}, "not supported"},
      {{"--redirects", "0:4", "t.py"}, "--redirects '0:4'"},
      {{"-t", "x", "t.py"}, "--tee 'x'"},
      {{"--monitor-interval", "often", "t.py"}, "give seconds"},
      {{"--shutdown-timeout", "-1", "t.py"}, "whole seconds"},
      {{"-m"}, "needs torchrun's positional training script"},
      {{"--rdzv-id"}, "needs a value"},
      {{"--no-python=1", "t.py"}, "takes no value"},
  };
  for (const auto& [args, want] : cases) {
    Checked<TorchrunLine> line = readTorchrunLine(args, context());
    EXPECT_FALSE(line.ok()) << args.front();
    EXPECT_NE(line.error.find(want), std::string::npos) << line.error;
    EXPECT_EQ(line.error.find('\n'), std::string::npos) << line.error;
  }
  Checked<TorchrunLine> pet = readTorchrunLine({"t.py"}, context({{"PET_NO_PYTHON", "yes"}}));
  EXPECT_NE(pet.error.find("env PET_NO_PYTHON='yes'"), std::string::npos) << pet.error;
}

TEST(TorchrunCompat, OptionsWithoutMeaningForExecdWorkersAreAcceptedWithANote) {
  const TorchrunLine line = read({"--start_method=fork", "--monitor-interval", "5", "--local-addr", "n0",
                                  "--numa-binding", "node", "--event-log-handler", "console",
                                  "--signals-to-handle", "SIGUSR1", "--rdzv-conf", "join_timeout=600", "t.py"});
  std::string notes;
  for (const auto& n : line.notes) notes += n + "\n";
  for (const char* word : {"--start-method=fork", "--monitor-interval=5", "--local-addr=n0", "--numa-binding=node",
                           "--event-log-handler=console", "--signals-to-handle=SIGUSR1", "join_timeout=600",
                           "runs under /opt/py/bin/python3"}) {
    EXPECT_NE(notes.find(word), std::string::npos) << word << " in:\n" << notes;
  }
  EXPECT_TRUE(line.launcher_args.empty());
}

TEST(TorchrunCompat, SubCommandsAndTheSeparatorKeepTaehvRunsOwnForm) {
  // A sub-command and what follows it are untouched; a near miss of one is left for "did you mean".
  EXPECT_EQ(read({"--standalone", "describe", "--json"}).launcher_args, (Args{"--standalone", "describe", "--json"}));
  EXPECT_FALSE(read({"descibe"}).command);
  // With `--` the worker command is given: a positional is a sub-command (or the host's error).
  Checked<TorchrunLine> line = readTorchrunLine({"--rdzv-id", "j", "stray"}, context({}, true));
  ASSERT_TRUE(line.ok()) << line.error;
  EXPECT_FALSE(line.value.command);
  EXPECT_EQ(line.value.launcher_args, (Args{"--run-id", "j", "stray"}));
}

TEST(TorchrunCompat, NprocWordsAndShutdownTimeoutMapOntoTaehvRunsOptions) {
  EXPECT_EQ(read({"--nproc-per-node=gpu", "t.py"}).launcher_args, (Args{"--nproc-per-node", "auto"}));
  const Args cpu = read({"--nproc_per_node", "cpu", "t.py"}).launcher_args;
  ASSERT_EQ(cpu.size(), 2u);
  EXPECT_GE(std::stoi(cpu[1]), 1);
  EXPECT_EQ(read({"--shutdown-timeout=7", "t.py"}).launcher_args, (Args{"--shutdown-grace", "7"}));
  EXPECT_EQ(read({"--role", "trainer", "t.py"}).role, "trainer");
}

TEST(TorchrunCompat, RedirectsAndTeeChooseEachLocalRanksStreams) {
  const TorchrunLine line = read({"-r", "0:3,1:1", "-t2", "t.py"});
  EXPECT_EQ(workerLogStreams(line, 0).files, LogStreams::kBoth);
  EXPECT_EQ(workerLogStreams(line, 0).console_too, LogStreams::kErr);
  EXPECT_EQ(workerLogStreams(line, 1).files, LogStreams::kBoth);  // stdout redirected, stderr teed
  EXPECT_EQ(workerLogStreams(line, 2).files, LogStreams::kErr);   // not in -r's list: the tee only
  EXPECT_EQ(workerLogFolder("/l", "job", 2, 1), "/l/job/attempt_2/1");
}

}  // namespace
}  // namespace taehv
