// taehv-run's command line and plugin loading, through the real binary (real processes, real dlopen).
// Test backends live in TEST_PLUGINS_DIR/<case>/ (built by tests/core/CMakeLists.txt), one folder per case
// because a broken plugin on the path makes auto-detection refuse to run.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "run_process.h"

namespace taehv::test {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

std::string pluginDir(const std::string& name) { return std::string(TEST_PLUGINS_DIR) + "/" + name; }

ProcessResult taehv(std::vector<std::string> args, std::map<std::string, std::string> extra = {}) {
  auto env = cleanEnv();
  for (auto& [k, v] : extra) env[k] = v;
  args.insert(args.begin(), taehvRun());
  return runProcess(args, env);
}

Json describeJson(std::vector<std::string> args, std::map<std::string, std::string> extra = {}) {
  args.insert(args.begin(), {"describe", "--json"});
  auto r = taehv(args, extra);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  try {
    return Json::parse(r.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not JSON: " << e.what() << "\n" << r.out;
    return Json::array();
  }
}

/// Expects exit code 2 and exactly one error line on stderr containing every piece of `want`.
void expectUsageError(const ProcessResult& r, const std::vector<std::string>& want) {
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  for (const auto& w : want) EXPECT_NE(r.err.find(w), std::string::npos) << "missing '" << w << "' in: " << r.err;
}

TEST(Cli, VersionNamesThePluginApi) {
  auto r = taehv({"--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "taehv-run 0.1.0 (plugin API 3)\n");
}

TEST(Cli, PluginsListsThePlatformBackendsAndExtraFolders) {
  auto r = taehv({"--plugin-dir", pluginDir("alpha"), "plugins", "--json"}, {{"TAEHV_PLUGIN_PATH", pluginDir("beta")}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, Json> by_name;
  for (const auto& p : Json::parse(r.out)) by_name[p["name"]] = p;
  for (const char* name : {"slurm", "k8s", "pai", "ssh", "alpha", "beta"}) EXPECT_TRUE(by_name.count(name)) << name;
  EXPECT_EQ(by_name["alpha"]["plugin_version"], "9.8.7");
  EXPECT_EQ(by_name["alpha"]["api_version"], 3);
  EXPECT_EQ(by_name["alpha"]["path"], pluginDir("alpha") + "/taehv_plugin_alpha.so");
  EXPECT_EQ(by_name["slurm"]["path"],
            fs::path(std::getenv("TAEHV_PLUGIN_DIR")).lexically_normal().string() + "/taehv_plugin_slurm.so");
}

TEST(Cli, WrongApiVersionIsRefusedBeforeTheFactoryRuns) {
  // The plugin's factory calls abort(): exit code 2 (not 134) proves the loader never called it.
  auto r = taehv({"--plugin-dir", pluginDir("wrong_api"), "--backend", "future", "describe"});
  expectUsageError(r, {pluginDir("wrong_api") + "/taehv_plugin_future.so", "found 99, supported 3", "rebuild"});
  r = taehv({"--plugin-dir", pluginDir("wrong_api"), "describe"});  // auto-detection loads every plugin
  expectUsageError(r, {"found 99, supported 3"});
}

// A plugin built against the previous ABI (version 2: sub-commands parsed their own argv) is refused by its info
// before its factory (taehv_plugin_create_v2, which aborts) is looked at.
TEST(Cli, APluginOfTheLastApiVersionIsRefusedAndNamed) {
  auto r = taehv({"--plugin-dir", pluginDir("api_v2"), "--backend", "oldapi", "describe"});
  expectUsageError(r, {pluginDir("api_v2") + "/taehv_plugin_oldapi.so", "found 2, supported 3",
                       "rebuild the plugin against this taehv-run's taehv/plugin_api.h"});
}

TEST(Cli, MissingSymbolsNameTheSymbolAndTheFile) {
  auto r = taehv({"--plugin-dir", pluginDir("no_factory"), "--backend", "nofactory", "describe"});
  expectUsageError(r, {"taehv_plugin_nofactory.so", "missing symbol 'taehv_plugin_create_v3'"});
  r = taehv({"--plugin-dir", pluginDir("no_info"), "--backend", "noinfo", "describe"});
  expectUsageError(r, {"taehv_plugin_noinfo.so", "missing symbol 'taehv_plugin_info'"});
  r = taehv({"--plugin-dir", pluginDir("null_factory"), "--backend", "nullfactory", "describe"});
  expectUsageError(r, {"taehv_plugin_nullfactory.so", "factory returned no backend"});
}

// Each call into a plugin that throws (built without TAEHV_DEFINE_PLUGIN's guard) is one error naming the plugin
// and the method, exit code 2; never std::terminate (exit 134).
TEST(Cli, APluginThatThrowsIsOneErrorNamingIt) {
  const std::string file = pluginDir("throwing") + "/taehv_plugin_throwing.so";
  struct Case {
    std::vector<std::string> args;
    std::string spare;   // methods that answer, so that the call under test is reached
    std::string method;  // the method whose exception is reported
    std::string what;
  };
  const std::vector<Case> cases = {
      {{"describe"}, "", "options", "options broke"},
      {{"describe"}, "options", "detect", "detect broke"},
      {{"describe"}, "options,detect", "takesOverLaunch", "takesOverLaunch broke"},
      {{"describe"}, "options,detect,takesOverLaunch", "plan", "plan broke"},
      {{"--", "/bin/true"}, "options,detect,takesOverLaunch", "launch", "launch broke"},
      {{"--backend", "throwing", "--help"}, "options", "commands", "not a std::exception"},
      {{"--backend", "throwing", "hello"}, "options,commands", "runCommand", "runCommand broke"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"--plugin-dir", pluginDir("throwing")};
    args.insert(args.end(), c.args.begin(), c.args.end());
    SCOPED_TRACE(c.method);
    expectUsageError(taehv(args, {{"TEST_THROWING_SPARE", c.spare}}),
                     {file, "backend 'throwing'", c.method + "()", c.what, "fix the plugin"});
  }
  auto r = taehv({"--plugin-dir", pluginDir("throwing_factory"), "--backend", "throwingfactory", "describe"});
  expectUsageError(r, {"taehv_plugin_throwingfactory.so", "factory threw (factory broke)"});
}

TEST(Cli, AFileThatIsNotASharedLibraryIsRefused) {
  std::string dir = tempDir();
  std::ofstream(dir + "/taehv_plugin_junk.so") << "this is text, not ELF\n";
  auto r = taehv({"--plugin-dir", dir, "--backend", "junk", "describe"});
  expectUsageError(r, {dir + "/taehv_plugin_junk.so", "not a shared library"});
  r = taehv({"--plugin-dir", dir, "plugins"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("not a shared library"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("slurm"), std::string::npos) << "good plugins are still listed: " << r.out;
  fs::remove_all(dir);
}

// Issue 17, kind 2: the first 100,000 bytes of a real plugin used to kill every command that loads plugins
// with SIGBUS (dlopen mapped segments past the end of the file). Now one line names the file, the other
// plugins still load, and nothing dies of a signal.
TEST(HostilePlugins, APluginCutShortIsOneLineAndTheOthersStillLoad) {
  const std::string real = std::string(std::getenv("TAEHV_PLUGIN_DIR")) + "/taehv_plugin_k8s.so";
  ASSERT_GT(fs::file_size(real), 100000u);
  const std::string dir = tempDir();
  const std::string cut = dir + "/taehv_plugin_cut.so";
  fs::copy_file(real, cut);
  fs::resize_file(cut, 100000);
  auto r = taehv({"--plugin-dir", dir, "plugins"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(cut + ": not a shared library taehv-run can load (cut short"), std::string::npos) << r.err;
  for (const char* name : {"slurm", "k8s", "pai", "ssh"}) EXPECT_NE(r.out.find(name), std::string::npos) << r.out;
  expectUsageError(taehv({"--plugin-dir", dir, "describe"}), {cut, "cut short"});
  expectUsageError(taehv({"--plugin-dir", dir, "--backend", "cut", "describe"}), {cut, "cut short"});
  expectUsageError(taehv({"--plugin-dir", dir, "--", "/bin/true"}), {cut, "cut short"});
  // Cut anywhere: inside the ELF header, at a page, one byte short.
  for (std::uintmax_t size : {std::uintmax_t{10}, std::uintmax_t{4096}, fs::file_size(real) - 1}) {
    fs::remove(cut);
    fs::copy_file(real, cut);
    fs::resize_file(cut, size);
    SCOPED_TRACE(size);
    expectUsageError(taehv({"--plugin-dir", dir, "plugins", "--json"}), {cut, "not a shared library"});
  }
  fs::remove_all(dir);
}

// Issue 38, defect 11: a FIFO named like a plugin hung `plugins`, `describe` and every launch with --backend auto (the
// ELF check opened it before looking at its type). Now one line names it and the other plugins still load.
TEST(HostilePlugins, AFifoNamedLikeAPluginIsRefusedWithoutWaiting) {
  const std::string dir = tempDir();
  const std::string fifo = dir + "/taehv_plugin_fifo.so";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto limit = std::chrono::seconds(20);
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--plugin-dir", dir, "plugins"}, {"--plugin-dir", dir, "describe"}, {"--plugin-dir", dir, "--", "/bin/true"}}) {
    std::vector<std::string> argv = {taehvRun()};
    argv.insert(argv.end(), args.begin(), args.end());
    const ProcessResult r = runProcess(argv, cleanEnv(), limit);
    ASSERT_FALSE(r.timed_out) << args.back() << " waited on the FIFO";
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(fifo + ": plugin file is a FIFO (named pipe), not a regular file; refusing to open it"), std::string::npos)
        << r.err;
  }
  fs::remove_all(dir);
}

// Issue 38, defect 10: plugin folders and files writable by their group, or owned by another user, were loaded by root
// without a word (only world-writable ones were refused). Each is refused with a line naming it, its owner and mode
// and the command that fixes it; the same plugin loads once it is safe.
TEST(HostilePlugins, AFolderOrPluginOthersCanChangeIsRefused) {
  ASSERT_EQ(::geteuid(), 0u) << "the owner cases need root (the suites run as root)";
  const std::string dir = tempDir();
  const std::string file = dir + "/taehv_plugin_alpha.so";
  fs::copy_file(pluginDir("alpha") + "/taehv_plugin_alpha.so", file);
  ::chmod(file.c_str(), 0644);
  const std::vector<std::string> args = {"--plugin-dir", dir, "--backend", "alpha", "describe"};
  ASSERT_EQ(taehv(args).exit_code, 0) << "safe: loads";

  ::chmod(dir.c_str(), 0770);
  expectUsageError(taehv(args), {dir + ": plugin folder (from --plugin-dir) is writable by its group root (owner root, "
                                       "mode 0770); refusing to load code from it: run chmod g-w " + dir});
  ::chmod(dir.c_str(), 0700);
  ::chmod(file.c_str(), 0664);
  expectUsageError(taehv(args), {file + ": plugin file is writable by its group root (owner root, mode 0664)",
                                 "run chmod g-w " + file});
  ::chmod(file.c_str(), 0644);
  ASSERT_EQ(::chown(file.c_str(), 65534, 65534), 0);
  expectUsageError(taehv(args), {file + ": plugin file is owned by nobody, neither root nor root who runs taehv-run "
                                        "(mode 0644); refusing to load code from it"});
  ASSERT_EQ(::chown(file.c_str(), 0, 0), 0);
  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  expectUsageError(taehv(args), {dir + ": plugin folder (from --plugin-dir) is owned by nobody"});
  expectUsageError(taehv({"--plugin-dir", dir, "plugins"}), {"is owned by nobody"});
  ASSERT_EQ(::chown(dir.c_str(), 0, 0), 0);
  EXPECT_EQ(taehv(args).exit_code, 0) << "safe again: loads";
  fs::remove_all(dir);
}

// Issue 38, defect 20: a plugin built for another CPU said dlopen's "No such file or directory".
TEST(HostilePlugins, APluginForAnotherMachineNamesTheMachine) {
  const std::string dir = tempDir();
  const std::string file = dir + "/taehv_plugin_alpha.so";
  fs::copy_file(pluginDir("alpha") + "/taehv_plugin_alpha.so", file);
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(18);  // e_machine, the same offset in 32- and 64-bit ELF headers; 183 = EM_AARCH64, little-endian
    const char aarch64[2] = {static_cast<char>(183), 0};
    f.write(aarch64, 2);
  }
  auto r = taehv({"--plugin-dir", dir, "--backend", "alpha", "describe"});
  expectUsageError(r, {file + ": not a shared library taehv-run can load (built for AArch64 (ARM 64-bit), but this "
                              "taehv-run runs on "});
  EXPECT_EQ(r.err.find("No such file"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

// Issue 17, kind 3, through the real binary: no negative world size, no fork storm.
TEST(HostileCli, HugeCountsAndTooManyCpuWorkersExitTwoBeforeAnythingStarts) {
  expectUsageError(taehv({"describe", "--nnodes", "2147483647", "--node-rank", "2147483646", "--nproc-per-node", "2",
                          "--master-addr", "10.0.0.5"}),
                   {"node count must be at most 65536, got 2147483647 (from flag --nnodes)"});
  expectUsageError(taehv({"--standalone", "--nproc-per-node", "100000", "--", "/bin/true"}),
                   {"processes per node must be at most 1024"});
  // The CPU-worker check (no GPU on the test machines): 4 per usable core, more with --oversubscribe.
  const int cores = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  const std::string too_many = std::to_string(std::min(4 * cores + 1, 1024));
  if (4 * cores + 1 > 1024) GTEST_SKIP() << "more than 255 cores: the per-node limit comes first";
  auto r = taehv({"--standalone", "--nproc-per-node", too_many, "--", "/bin/true"});
  expectUsageError(r, {"asks for " + too_many + " CPU workers", "add --oversubscribe if you mean it"});
  r = taehv({"describe", "--standalone", "--json", "--oversubscribe", "--nproc-per-node", too_many});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(taehv({"--help"}).out.find("--oversubscribe"), std::string::npos);
}

// Issue 17, kind 10: every sub-command answers --help (built-in ones used to run instead); -v, listed in --help,
// was rejected.
TEST(HostileCli, EverySubCommandHasHelpAndVerboseWorks) {
  for (const char* sub : {"describe", "plugins", "doctor"}) {
    for (const char* help : {"--help", "-h"}) {
      auto r = taehv({sub, help});
      EXPECT_EQ(r.exit_code, 0) << sub << " " << help << ": " << r.err;
      EXPECT_EQ(r.out.rfind(std::string("usage: taehv-run [options] ") + sub, 0), 0u) << r.out;
    }
  }
  EXPECT_NE(taehv({"describe", "--help"}).out.find("--json"), std::string::npos);
  EXPECT_NE(taehv({"doctor", "--help"}).out.find("--connect-timeout"), std::string::npos);
  // Every backend command listed by --help.
  const std::string listing = taehv({"--help"}).out;
  int commands = 0;
  for (const char* backend : {"slurm", "k8s", "pai", "ssh"}) {
    const std::string mark = std::string("--backend ") + backend + " ";
    for (std::size_t at = listing.find(mark); at != std::string::npos; at = listing.find(mark, at + 1)) {
      const std::size_t start = at + mark.size();
      const std::string command = listing.substr(start, listing.find(':', start) - start);
      auto r = taehv({"--backend", backend, command, "--help"});
      EXPECT_EQ(r.exit_code, 0) << backend << " " << command << ": " << r.err;
      EXPECT_EQ(r.out.rfind("usage: taehv-run --backend " + std::string(backend), 0), 0u)
          << backend << " " << command << ": " << r.out;
      ++commands;
    }
  }
  EXPECT_GE(commands, 7);
  auto r = taehv({"-v", "describe", "--standalone"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = taehv({"-v", "describe"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("debug: plugin search path"), std::string::npos) << r.err;
  EXPECT_EQ(taehv({"-h"}).exit_code, 0);
  expectUsageError(taehv({"-x", "describe"}), {"unknown option '-x'"});
}

// Issue 17, kind 10: inside another launcher's worker (RANK, WORLD_SIZE, MASTER_* set), the k8s backend claimed
// the environment and the explicit flags lost. --nnodes/--node-rank now mean manual mode.
TEST(HostileCli, ExplicitNodeFlagsWinOverAnOuterLaunchersVariables) {
  // In a pod (KUBERNETES_SERVICE_HOST): outside one, no backend claims bare torch variables (issue 12, item 3).
  const std::map<std::string, std::string> outer = {{"RANK", "3"},          {"WORLD_SIZE", "8"},
                                                    {"LOCAL_RANK", "1"},    {"MASTER_ADDR", "10.1.2.3"},
                                                    {"MASTER_PORT", "1234"}, {"KUBERNETES_SERVICE_HOST", "10.96.0.1"}};
  Json j = describeJson({"--nnodes", "1", "--nproc-per-node", "2"}, outer);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[1]["rank"], 1);
  EXPECT_EQ(j[1]["world_size"], 2);
  EXPECT_EQ(j[1]["master_addr"], "127.0.0.1");
  EXPECT_EQ(j[1]["env"]["RANK"], "1");
  const std::string notes = j[0]["notes"].dump();
  EXPECT_NE(notes.find("backend k8s recognises this environment"), std::string::npos) << notes;
  EXPECT_NE(notes.find("add --backend k8s to use it"), std::string::npos) << notes;
  j = describeJson({"--nnodes", "2", "--node-rank", "1", "--master-addr", "m", "--nproc-per-node", "1"}, outer);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["rank"], 1);
  EXPECT_EQ(j[0]["world_size"], 2);
  EXPECT_EQ(j[0]["provenance"]["node_rank"], "flag --node-rank");
  // Without node flags the platform's variables still drive the launch (a KubeBrain-style pod).
  j = describeJson({"--nproc-per-node", "1"}, outer);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["nnodes"], 8);
  // Outside a pod the outer launcher's variables are nobody's platform: manual mode, nothing to override.
  auto bare = outer;
  bare.erase("KUBERNETES_SERVICE_HOST");
  j = describeJson({"--nproc-per-node", "1"}, bare);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["nnodes"], 1);
  EXPECT_EQ(j[0]["notes"].dump().find("recognises this environment"), std::string::npos) << j[0]["notes"].dump();
}

// Issue 17, kind 10: describe with the ssh backend told the user to pass the --hostfile they had passed.
TEST(HostileCli, DescribeWithTheSshBackendShowsTheHostfilesPlan) {
  const std::string dir = tempDir();
  std::ofstream(dir + "/hosts") << "gpu-a slots=2\ngpu-b slots=2\ngpu-c slots=2\n";
  auto r = taehv({"describe", "--backend", "ssh", "--hostfile", dir + "/hosts", "--", "/bin/true"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("pass --hostfile"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("nnodes = 3    <- hostfile " + dir + "/hosts (3 hosts)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("master_addr = gpu-a"), std::string::npos) << r.out;
  Json j = describeJson({"--backend", "ssh", "--hostfile", dir + "/hosts", "--", "/bin/true"});
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[1]["world_size"], 6);
  expectUsageError(taehv({"describe", "--backend", "ssh", "--hostfile", dir + "/missing"}),
                   {"--hostfile " + dir + "/missing: cannot read it"});
  expectUsageError(taehv({"describe", "--backend", "ssh"}), {"pass --hostfile FILE"});
  fs::remove_all(dir);
}

// Issue 17, kind 10: every usage error exits 2 with one line, whichever part of the launcher finds it.
TEST(HostileCli, UsageErrorsExitTwoWithOneLine) {
  const std::vector<std::vector<std::string>> cases = {
      {"--nproc-per-node"},
      {"--master-port", "0", "describe"},
      {"--shutdown-grace", "-1", "--standalone", "--", "/bin/true"},
      {"--local-ranks-filter", "x", "--standalone", "--", "/bin/true"},
      {"--max-restarts", "-1", "describe"},
      {"--gpu-binding", "x", "describe"},
      {"--backend", "ssh", "--hostfile", "/nonexistent/hosts", "--", "/bin/true"},
      {"--backend", "ssh", "--ssh-parallel", "0", "--hostfile", "/nonexistent/hosts", "--", "/bin/true"},
      {"describe", "--json", "--json"},
      {"describe", "--nnodes", "-3"},
      {"plugins", "extra"},
  };
  for (const auto& args : cases) {
    auto r = taehv(args);
    std::string line;
    for (const auto& a : args) line += a + " ";
    EXPECT_EQ(r.exit_code, 2) << line << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << line << r.err;
  }
}

// Issue 38, defect 17: describe and doctor passed a --shutdown-grace of nan or -1 and a --log-dir that is a device or
// a file, which the launch then refused. The three read these options through one function: the launch's line is
// describe's line (exit 2) and doctor's failed row (exit 1).
TEST(HostileCli, DescribeAndDoctorRefuseWhatTheLaunchRefuses) {
  const std::string dir = tempDir();
  const std::string file = dir + "/a-file";
  std::ofstream(file) << "not a folder\n";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--shutdown-grace", "nan"}, "--shutdown-grace must be 0..86400 seconds, got nan"},
      {{"--shutdown-grace", "-1"}, "--shutdown-grace must be 0..86400 seconds, got -1"},
      {{"--log-dir", "/dev/null"}, "--log-dir /dev/null: it is a character device, not a folder"},
      {{"--log-dir", file}, "--log-dir " + file + ": it is a regular file, not a folder"},
      {{"--log-dir", file + "/logs"}, "--log-dir " + file + "/logs: " + file + " is a regular file, not a folder"},
      {{"--local-ranks-filter", "3"}, "--local-ranks-filter names local rank 3 but this node runs 2 worker(s)"},
  };
  const std::vector<std::string> node = {"--backend", "local", "--standalone", "--nproc-per-node", "2"};
  for (const auto& [options, says] : cases) {
    SCOPED_TRACE(says);
    std::vector<std::string> args = node;
    args.insert(args.end(), options.begin(), options.end());
    std::vector<std::string> launch = args;
    launch.insert(launch.end(), {"--", "/bin/true"});
    const ProcessResult launched = taehv(launch);
    expectUsageError(launched, {says});
    std::vector<std::string> describe = {"describe"};
    describe.insert(describe.end(), args.begin(), args.end());
    const ProcessResult described = taehv(describe);
    expectUsageError(described, {says});
    EXPECT_EQ(described.err, launched.err) << "the same line";
    std::vector<std::string> doctor = {"doctor", "--output-dir", dir};
    doctor.insert(doctor.end(), args.begin(), args.end());
    const ProcessResult doctored = taehv(doctor);
    EXPECT_EQ(doctored.exit_code, 1) << doctored.out << doctored.err;
    EXPECT_NE(doctored.out.find("launch options"), std::string::npos) << doctored.out;
    EXPECT_NE(doctored.out.find(says), std::string::npos) << doctored.out;
  }
  // A --log-dir that does not exist yet in a folder that can be written passes all three; the launch creates it.
  const std::string logs = dir + "/new/logs";
  EXPECT_EQ(taehv({"describe", "--standalone", "--log-dir", logs}).exit_code, 0);
  const ProcessResult doctored = taehv({"doctor", "--backend", "local", "--standalone", "--output-dir", dir,
                                        "--log-dir", logs});
  EXPECT_EQ(doctored.out.find("launch options"), std::string::npos) << doctored.out;
  EXPECT_EQ(taehv({"--standalone", "--log-dir", logs, "--", "/bin/true"}).exit_code, 0);
  EXPECT_TRUE(fs::is_regular_file(logs + "/rank_0.log"));
  fs::remove_all(dir);
}

TEST(Cli, AWorldWritableFolderIsRefused) {
  std::string dir = tempDir();
  fs::copy_file(pluginDir("alpha") + "/taehv_plugin_alpha.so", dir + "/taehv_plugin_alpha.so");
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  auto r = taehv({"--plugin-dir", dir, "--backend", "alpha", "describe"});
  expectUsageError(r, {dir, "writable by everyone", "chmod o-w"});
  ::chmod(dir.c_str(), 0700);
  r = taehv({"--plugin-dir", dir, "--backend", "alpha", "describe"});
  EXPECT_EQ(r.exit_code, 0) << r.err;  // the same plugin loads once the folder is safe
  fs::remove_all(dir);
}

TEST(Cli, UnknownBackendSuggestsTheClosestName) {
  auto r = taehv({"--plugin-dir", pluginDir("alpha"), "--backend", "alpah", "describe"});
  expectUsageError(r, {"unknown backend 'alpah'", "did you mean 'alpha'", "taehv-run plugins"});
  r = taehv({"--backend", "slurn", "describe"});
  expectUsageError(r, {"did you mean 'slurm'"});
  r = taehv({"--plugin-dir", "/nonexistent/taehv", "describe"});
  expectUsageError(r, {"/nonexistent/taehv", "does not exist"});
}

TEST(Cli, UnknownSubCommandsAndOptionsSuggestTheClosestName) {
  expectUsageError(taehv({"descibe"}), {"unknown sub-command 'descibe'", "did you mean 'describe'", "after --"});
  expectUsageError(taehv({"--nnode", "2", "describe"}), {"unknown option '--nnode'", "did you mean '--nnodes'"});
  expectUsageError(taehv({"describe", "--nproc-per-nod", "2"}), {"did you mean '--nproc-per-node'"});
  expectUsageError(taehv({"describe", "--nproc-per-node", "two"}), {"--nproc-per-node 'two'"});
  expectUsageError(taehv({"describe", "--nnodes", "2"}), {"--master-addr"});
  expectUsageError(taehv({"describe", "train.py"}), {"unexpected argument 'train.py'", "after --"});
  expectUsageError(taehv({"describe", "--nnodes", "abc"}), {"'abc'", "--nnodes"});
}

TEST(Cli, AutoDetectionPicksTheMostConfidentBackend) {
  std::map<std::string, std::string> env = {{"TAEHV_PLUGIN_PATH", pluginDir("alpha") + ":" + pluginDir("beta")},
                                            {"TEST_ALPHA_CONFIDENCE", "40"},
                                            {"TEST_BETA_CONFIDENCE", "60"}};
  Json j = describeJson({}, env);
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["env"]["TEST_BACKEND"], "beta");
  auto text = taehv({"describe"}, env);
  EXPECT_NE(text.out.find("detected: beta (confidence 60: TEST_BETA_CONFIDENCE=60)"), std::string::npos) << text.out;
}

TEST(Cli, StandaloneMeansThisMachineEvenWhenABackendWouldClaimIt) {
  auto r = taehv({"describe", "--standalone"}, {{"TAEHV_PLUGIN_PATH", pluginDir("alpha")},
                                                 {"TEST_ALPHA_CONFIDENCE", "90"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("backend: local"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("master_port = "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("<- flag --standalone (free port)"), std::string::npos) << r.out;
}

TEST(Cli, HelpListsSubCommandsAndBackendOptions) {
  auto r = taehv({"--backend", "alpha", "--plugin-dir", pluginDir("alpha"), "--help"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* want : {"describe", "plugins", "--backend alpha hello", "--nproc-per-node", "--standalone",
                           "--flavor", "--local-ranks-filter", "--no-prefix"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << " not in:\n" << r.out;
  }
}

TEST(Cli, AutoDetectionTieIsAnErrorNamingBoth) {
  auto r = taehv({"describe"}, {{"TAEHV_PLUGIN_PATH", pluginDir("alpha") + ":" + pluginDir("beta")},
                                {"TEST_ALPHA_CONFIDENCE", "50"},
                                {"TEST_BETA_CONFIDENCE", "50"}});
  expectUsageError(r, {"'alpha'", "'beta'", "both recognise", "--backend"});
}

TEST(Cli, NothingDetectedMeansLocalMode) {
  Json j = describeJson({"--nproc-per-node", "2"}, {{"TAEHV_PLUGIN_PATH", pluginDir("alpha")}});
  ASSERT_EQ(j.size(), 2u);
  EXPECT_FALSE(j[0]["env"].contains("TEST_BACKEND"));
  EXPECT_EQ(j[1]["rank"], 1);
  auto text = taehv({"describe"}, {{"TAEHV_PLUGIN_PATH", pluginDir("alpha")}});
  EXPECT_NE(text.out.find("backend: local"), std::string::npos) << text.out;
}

TEST(Cli, DescribeJsonHasTheDocumentedSchema) {
  Json j = describeJson({"--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "3", "--master-addr", "10.0.0.5",
                         "--master-port", "1234"});
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 3u);
  const std::set<std::string> keys = {"rank",   "local_rank",  "world_size",  "local_world_size", "node_rank",
                                      "nnodes", "master_addr", "master_port", "env",              "provenance",
                                      "notes",  "rank_offset", "node_nprocs", "min_nnodes", "node_group"};
  for (std::size_t i = 0; i < j.size(); ++i) {
    const Json& w = j[i];
    std::set<std::string> got;
    for (auto it = w.begin(); it != w.end(); ++it) got.insert(it.key());
    EXPECT_EQ(got, keys);
    EXPECT_EQ(w["rank"], 3 + static_cast<int>(i));
    EXPECT_EQ(w["local_rank"], static_cast<int>(i));
    EXPECT_EQ(w["world_size"], 6);
    EXPECT_EQ(w["local_world_size"], 3);
    EXPECT_EQ(w["node_rank"], 1);
    EXPECT_EQ(w["nnodes"], 2);
    EXPECT_EQ(w["min_nnodes"], 2);
    EXPECT_EQ(w["master_addr"], "10.0.0.5");
    EXPECT_EQ(w["master_port"], 1234);
    EXPECT_EQ(w["env"]["RANK"], std::to_string(3 + i));
    EXPECT_EQ(w["env"]["GROUP_RANK"], "1");
    for (auto it = w["env"].begin(); it != w["env"].end(); ++it) {
      EXPECT_TRUE(it.value().is_string()) << it.key();
      EXPECT_TRUE(w["provenance"].contains(it.key())) << "no provenance for " << it.key();
    }
    for (const auto& k : keys) {
      if (k != "env" && k != "provenance" && k != "notes" && k != "node_group") {
        EXPECT_TRUE(w["provenance"][k].is_string()) << k;
      }
    }
    EXPECT_EQ(w["provenance"]["node_rank"], "flag --node-rank");
    EXPECT_EQ(w["provenance"]["MASTER_PORT"], "master_port: flag --master-port");
    EXPECT_TRUE(w["notes"].is_array());
  }
}

// torchrun's --nnodes forms: N, N:N (fixed) and MIN:MAX (elastic); describe shows MIN:MAX; bad forms and elastic
// where it cannot work are one line naming the flag, exit 2.
TEST(Cli, NnodesTakesTorchrunsMinMaxForm) {
  const std::vector<std::string> node1 = {"--node-rank", "1", "--master-addr", "m", "--nproc-per-node", "1"};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.end(), node1.begin(), node1.end());
    return args;
  };
  Json j = describeJson(with({"--nnodes", "1:3"}));
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["nnodes"], 3);
  EXPECT_EQ(j[0]["min_nnodes"], 1);
  j = describeJson(with({"--nnodes", "2:2"}));
  EXPECT_EQ(j[0]["nnodes"], 2);
  EXPECT_EQ(j[0]["min_nnodes"], 2);
  auto text = taehv(with({"describe", "--nnodes", "1:3"}));
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("nnodes = 1:3    <- flag --nnodes"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("node 1 of 1:3"), std::string::npos) << text.out;
  text = taehv(with({"describe", "--nnodes", "2:2"}));
  EXPECT_NE(text.out.find("nnodes = 2    <- flag --nnodes"), std::string::npos) << text.out;
  const auto doctor = taehv(with({"doctor", "--nnodes", "1:3"}));
  EXPECT_NE(doctor.out.find("node 1 of 1:3 (elastic"), std::string::npos) << doctor.out << doctor.err;

  expectUsageError(taehv(with({"describe", "--nnodes", "3:2"})), {"--nnodes '3:2': MIN 3 is more than MAX 2", "MIN:MAX"});
  expectUsageError(taehv(with({"describe", "--nnodes", "0:2"})), {"--nnodes '0:2'", "at least 1 node"});
  expectUsageError(taehv(with({"describe", "--nnodes", "two"})), {"--nnodes 'two'", "e.g. 2 or 1:4"});
  expectUsageError(taehv(with({"describe", "--nnodes", "1:2", "--no-node-group"})),
                   {"--nnodes 1:2 (elastic) needs the node group", "--no-node-group"});
  expectUsageError(taehv({"describe", "--standalone", "--nnodes", "1:2"}), {"--standalone runs one node", "1:2"});
  expectUsageError(taehv(with({"describe", "--nnodes", "1:2", "--restart-count", "1"})),
                   {"--nnodes 1:2 (elastic", "--restart-count"});
}

TEST(Cli, TorchrunSpellingAndPetVariablesAreAccepted) {
  // --backend local: PET_* variables are also what Kubeflow's PyTorchJob sets, which the k8s backend claims.
  Json j = describeJson({"--backend", "local", "--nproc_per_node=2"}, {{"PET_NNODES", "2"}, {"PET_NODE_RANK", "1"},
                                                 {"PET_MASTER_ADDR", "m0"}});
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[1]["rank"], 3);
  EXPECT_EQ(j[1]["provenance"]["nnodes"], "env PET_NNODES");
  EXPECT_EQ(j[1]["provenance"]["local_world_size"], "flag --nproc-per-node");
}

TEST(Cli, BackendPlanFillsGapsAndFlagsWin) {
  std::map<std::string, std::string> env = {{"TEST_ALPHA_NNODES", "2"},        {"TEST_ALPHA_NODE_RANK", "1"},
                                            {"TEST_ALPHA_MASTER_ADDR", "m9"},  {"TEST_ALPHA_NPROC", "4"},
                                            {"PET_NNODES", "5"},               {"PET_MASTER_PORT", "4444"}};
  Json j = describeJson({"--backend", "alpha", "--plugin-dir", pluginDir("alpha"), "--nproc-per-node", "2"}, env);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["nnodes"], 2);
  EXPECT_EQ(j[0]["provenance"]["nnodes"], "env TEST_ALPHA_NNODES");
  EXPECT_EQ(j[0]["local_world_size"], 2);  // the flag beats the plan's 4
  EXPECT_EQ(j[0]["master_port"], 4444);    // the plan has none: PET_MASTER_PORT
  EXPECT_EQ(j[1]["rank"], 3);
  EXPECT_EQ(j[1]["env"]["RANK"], "3");  // the backend's RANK=999 never replaces the contract
  EXPECT_EQ(j[1]["env"]["TEST_BACKEND"], "alpha");
  EXPECT_EQ(j[1]["env"]["TEST_REQUEST_NPROC"], "2");
  EXPECT_EQ(j[1]["provenance"]["TEST_BACKEND"], "rule: test backend name");
  auto failing = taehv({"--backend", "alpha", "--plugin-dir", pluginDir("alpha"), "describe"},
                       {{"TEST_ALPHA_FAIL", "no nodes"}});
  expectUsageError(failing, {"backend alpha: test failure: no nodes"});
}

TEST(Cli, BackendOptionsReachTheBackend) {
  Json j = describeJson({"--backend", "alpha", "--plugin-dir", pluginDir("alpha"), "--flavor", "mint", "--tag", "a",
                         "--tag=b"});
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["env"]["TEST_OPT_flavor"], "mint");
  EXPECT_EQ(j[0]["env"]["TEST_OPT_tag"], "a,b");
  auto r = taehv({"--plugin-dir", pluginDir("alpha"), "--flavor", "x", "describe"});
  expectUsageError(r, {"--flavor is an option of backend alpha", "--backend alpha"});
}

// A backend declares its sub-commands' options (CommandSpec); the host parses them by its own rules and hands the
// backend the values.
TEST(Cli, BackendSubCommandsGetTheirDeclaredOptionsParsed) {
  const std::vector<std::string> alpha = {"--backend", "alpha", "--plugin-dir", pluginDir("alpha")};
  const auto hello = [&](std::vector<std::string> args) {
    args.insert(args.begin(), alpha.begin(), alpha.end());
    return taehv(args);
  };
  auto r = hello({"hello", "--greeting=hi", "--loud", "--tag", "a", "--tag=b", "-n", "3", "--", "python", "t.py"});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_EQ(r.out, "hello from alpha: --count [3] --greeting [hi] --loud [true] --tag [a] [b] -- [python] [t.py]\n");
  EXPECT_NE(r.err.find("hello ran"), std::string::npos) << "plugin logs go through the host: " << r.err;
  r = hello({"hello", "--count=4", "--greeting", "--hi"});  // a value may start with dashes
  EXPECT_EQ(r.out, "hello from alpha: --count [4] --greeting [--hi]\n") << r.err;
  r = hello({"words", "a", "b,c"});
  EXPECT_EQ(r.out, "words from alpha: word [a] word [b,c]\n") << r.err;
  // Parse errors are one line naming the command, and the backend never runs.
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"hello", "--greeting", "hi", "--greeting", "ho"}, "alpha hello: option '--greeting' cannot be specified more "
                                                          "than once; see taehv-run --backend alpha hello --help"},
      {{"hello", "--loud", "--loud"}, "option '--loud' cannot be specified more than once"},
      {{"hello", "--greting", "hi"}, "unknown option '--greting' (did you mean '--greeting'?)"},
      {{"hello", "--gree", "hi"}, "unknown option '--gree' (did you mean '--greeting'?)"},  // no abbreviations
      {{"hello", "--greeting"}, "the required argument for option '--greeting' is missing"},
      {{"hello", "--loud=yes"}, "option '--loud' does not take any arguments"},
      {{"hello", "stray"}, "unexpected argument 'stray'; put the worker command after --"},
      {{"hello", "--"}, "nothing after `--`: give the worker command or drop the `--`"},
      {{"words", "a", "-x"}, "alpha words: unknown option '-x'"},
      {{"words", "a", "--", "cmd"}, "alpha words: takes no command after --"},
  };
  for (const auto& [args, want] : refused) {
    r = hello(args);
    expectUsageError(r, {want});
    EXPECT_EQ(r.out, "") << r.out;
  }
  r = taehv({"--plugin-dir", pluginDir("alpha"), "hello"});
  expectUsageError(r, {"sub-command of backend alpha", "--backend alpha hello"});
}

TEST(Cli, BackendSubCommandHelpComesFromItsDeclaration) {
  for (const char* help : {"--help", "-h"}) {
    auto r = taehv({"--backend", "alpha", "--plugin-dir", pluginDir("alpha"), "hello", "--loud", help, "--bad"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("usage: taehv-run --backend alpha hello [options] [-- COMMAND...]\n\n"
                          "print its options and command.\n",
                          0),
              0u)
        << r.out;
    for (const char* want : {"--greeting TEXT", "what to say", "--loud", "-n [ --count ] N", "--tag TAG",
                             "-h [ --help ]", "Prints what the host parsed.\n"}) {
      EXPECT_NE(r.out.find(want), std::string::npos) << want << " not in:\n" << r.out;
    }
    EXPECT_EQ(r.out.find("hello from"), std::string::npos) << "help does not run the command: " << r.out;
  }
  auto r = taehv({"--backend", "alpha", "--plugin-dir", pluginDir("alpha"), "words", "--help"});
  EXPECT_EQ(r.out.rfind("usage: taehv-run --backend alpha words [WORD...]\n", 0), 0u) << r.out;
}

// The launch flags reach a backend that takes over typed and checked (JobFlags); the options that place a node in
// the job are not among the arguments it forwards.
TEST(Cli, ABackendThatTakesOverGetsTheLaunchOptionsAndCommand) {
  // TEST_ALPHA_FAIL makes plan() fail: a backend that takes over is not asked for this node's plan.
  auto r = taehv({"--backend", "alpha", "--plugin-dir", pluginDir("alpha"), "--takeover", "--nproc-per-node", "2",
                  "--max-restarts=1", "--shutdown-grace", "7.5", "--flavor", "x", "--", "/bin/echo", "hi"},
                 {{"TEST_ALPHA_FAIL", "not on this machine"}});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_EQ(r.out,
            "launcher_args: [--max-restarts=1] [--shutdown-grace] [7.5]\n"
            "flags: max_restarts=1 shutdown_grace_ms=7500 nproc_per_node=2\n"
            "command: [/bin/echo] [hi]\n");
  // No command: the remote side runs its default trainer, so none is needed here either.
  r = taehv({"--backend", "alpha", "--plugin-dir", pluginDir("alpha"), "--takeover", "--nnodes", "2:3",
             "--master-addr", "h0", "--master-port", "1234", "--node-rank", "1", "--restart-count", "2",
             "--no-node-group", "--log-dir", "/x"});
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_EQ(r.out,
            "launcher_args: [--no-node-group] [--log-dir] [/x]\n"
            "flags: nnodes=3 min_nnodes=2 node_rank=1 master_addr=h0 master_port=1234 restart_count=2 "
            "no_node_group\n"
            "command:\n");
  // Checked as for a launch on this node, before the backend is called.
  for (const auto& [flag, value, want] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"--shutdown-grace", "-1", "--shutdown-grace must be 0..86400 seconds, got -1"},
           {"--max-restarts", "-1", "--max-restarts must be in 0..1000000, got -1"},
           {"--master-port", "70000", "--master-port must be in 1..65535, got 70000"},
           {"--nnodes", "0", "--nnodes '0': a job needs at least 1 node"}}) {
    r = taehv({"--backend", "alpha", "--plugin-dir", pluginDir("alpha"), "--takeover", flag, value});
    expectUsageError(r, {want});
    EXPECT_EQ(r.out, "") << "the backend must not run: " << r.out;
  }
}

// Issue 38, defect 4: text that is not UTF-8 aborted describe --json and plugins --json (nlohmann's type_error 316,
// SIGABRT). A value the job runs with (master address, run id) is refused with one line showing the byte; free text
// (a note, a path) is written with U+FFFD and a warning says so.
TEST(HostileText, DescribeRefusesAMasterAddressOrRunIdThatIsNotUtf8) {
  expectUsageError(taehv({"describe", "--json", "--nnodes", "2", "--node-rank", "1", "--master-addr", "h\xE9st"}),
                   {"master address (from flag --master-addr) 'h\\xE9st' is not valid UTF-8 (byte 0xE9 at offset 1)",
                    "give a host name or an IP address"});
  expectUsageError(taehv({"describe", "--json", "--standalone", "--run-id", "ab\xE9" "c"}),
                   {"run id (from flag --run-id) 'ab\\xE9c' is not valid UTF-8"});
  expectUsageError(taehv({"describe", "--json", "--nproc-per-node", "1"}, {{"PET_RDZV_ID", "x\xFF"}}),
                   {"run id (from env PET_RDZV_ID) 'x\\xFF' is not valid UTF-8"});
  // The launch takes the same values the same way.
  expectUsageError(taehv({"--standalone", "--run-id", "ab\xE9", "--", "/bin/true"}), {"run id", "not valid UTF-8"});
}

TEST(HostileText, JsonOutputsReplaceBytesThatAreNotUtf8AndSaySo) {
  auto r = taehv({"describe", "--json", "--standalone"}, {{"TAEHV_NVML_LIBRARY", "/nonexistent/libnvidia-ml-\xE9.so"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json doc = Json::parse(r.out);  // throws on text that is not UTF-8
  EXPECT_NE(doc.dump().find("libnvidia-ml-\xEF\xBF\xBD.so"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("warning: describe --json: 2 byte sequences that are not valid UTF-8 written as U+FFFD (the "
                       "first at /0/notes/0)"),
            std::string::npos)
      << "the note names the library twice: " << r.err;

  const std::string dir = tempDir() + "/plugins-\xE9";
  fs::create_directories(dir);
  fs::copy_file(pluginDir("alpha") + "/taehv_plugin_alpha.so", dir + "/taehv_plugin_alpha.so");
  r = taehv({"--plugin-dir", dir, "plugins", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  bool found = false;
  for (const auto& p : Json::parse(r.out)) found = found || p["name"] == "alpha";
  EXPECT_TRUE(found) << r.out;
  EXPECT_NE(r.out.find("plugins-\xEF\xBF\xBD/taehv_plugin_alpha.so"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("warning: plugins --json: 1 byte sequence that is not valid UTF-8 written as U+FFFD"),
            std::string::npos)
      << r.err;
  fs::remove_all(fs::path(dir).parent_path());
}

TEST(Cli, DescribeTextShowsWhereEachValueCameFrom) {
  auto r = taehv({"describe", "--nproc-per-node", "2", "--run-id", "r1", "--", "/bin/true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("nproc_per_node = 2    <- flag --nproc-per-node"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("TORCHELASTIC_RUN_ID=r1    <- run_id: flag --run-id"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("command: /bin/true"), std::string::npos) << r.out;
}

// Issue 33: --hang-timeout is 0 (off) or 1..604800 seconds; anything else is one line and exit 2, before a worker
// starts, from the launch and from describe alike.
TEST(HostileCli, BadHangTimeoutIsOneLineAndExitTwo) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"-1", "--hang-timeout must be 0 (off) or 1..604800 seconds, got -1"},
      {"abc", "the argument ('abc') for option '--hang-timeout' is invalid"},
      {"1e9", "--hang-timeout must be 0 (off) or 1..604800 seconds, got 1e+09"},
      {"nan", "--hang-timeout must be 0 (off) or 1..604800 seconds, got nan"},
      {"0.5", "--hang-timeout must be 0 (off) or 1..604800 seconds, got 0.5"},
  };
  for (const auto& [value, says] : cases) {
    SCOPED_TRACE(value);
    expectUsageError(taehv({"--standalone", "--hang-timeout", value, "--", "/bin/echo", "started"}), {says});
    expectUsageError(taehv({"describe", "--standalone", "--hang-timeout", value}), {says});
  }
  const ProcessResult described = taehv({"describe", "--standalone", "--log-dir", "/tmp/i33-logs", "--hang-timeout", "7"});
  EXPECT_NE(described.out.find("status file: /tmp/i33-logs/status.json"), std::string::npos) << described.out;
  EXPECT_NE(described.out.find("hang detection after max(7 s, learned bound)"), std::string::npos) << described.out;
  const ProcessResult off = taehv({"--standalone", "--hang-timeout", "0", "--", "/bin/echo", "started"});
  EXPECT_EQ(off.exit_code, 0) << off.err;
  EXPECT_NE(off.out.find("started"), std::string::npos) << off.out;
}

// Issue 33: `taehv-run status FILE` refuses what is not a status file with one line and exit 2.
TEST(HostileCli, StatusRefusesWhatIsNotAStatusFile) {
  const std::string dir = tempDir();
  std::ofstream(dir + "/garbage.json") << "{not json";
  std::ofstream(dir + "/other.json") << R"({"format": 99})";
  std::ofstream(dir + "/partial.json") << R"({"format": 1, "generation": 1})";
  expectUsageError(taehv({"status"}), {"status takes one argument, the status file"});
  expectUsageError(taehv({"status", dir + "/missing.json"}), {dir + "/missing.json"});
  expectUsageError(taehv({"status", dir + "/garbage.json"}), {"is not a taehv-run status file"});
  expectUsageError(taehv({"status", dir + "/other.json"}), {"format 99, this taehv-run reads format 1"});
  expectUsageError(taehv({"status", dir + "/partial.json"}), {"is not a taehv-run status file"});
  fs::remove_all(dir);
}

}  // namespace
}  // namespace taehv::test
