// Launching real workers under taehv-run: single-worker exec, the default trainer path, waiting for the
// master, and (through the process supervisor) a standalone node whose workers print their environment.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "run_process.h"

namespace taehv::test {
namespace {

namespace fs = std::filesystem;

std::string pluginDir(const std::string& name) { return std::string(TEST_PLUGINS_DIR) + "/" + name; }

ProcessResult taehv(std::vector<std::string> args, std::map<std::string, std::string> extra = {},
                    const std::string& binary = taehvRun()) {
  auto env = cleanEnv();
  for (auto& [k, v] : extra) env[k] = v;
  args.insert(args.begin(), binary);
  return runProcess(args, env);
}

/// A listening TCP socket on 127.0.0.1 (port chosen by the kernel); closed on destruction.
struct Listener {
  int fd = -1;
  int port = 0;
  Listener() {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd, 8);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~Listener() { ::close(fd); }
};

std::map<std::string, std::string> singleWorker(int rank, int local_rank, int nproc) {
  return {{"TEST_ALPHA_RANK", std::to_string(rank)},
          {"TEST_ALPHA_LOCAL_RANK", std::to_string(local_rank)},
          {"TEST_ALPHA_NPROC", std::to_string(nproc)}};
}

TEST(Launch, SingleWorkerReplacesTaehvRunWithTheCommand) {
  auto r = taehv({"--backend", "alpha", "--plugin-dir", pluginDir("alpha"), "--", "/bin/sh", "-c",
                  "echo pid=$$; echo RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE; exit 3"},
                 singleWorker(1, 1, 2));
  EXPECT_EQ(r.exit_code, 3) << r.err;  // the worker's own exit code: nothing stood between
  EXPECT_NE(r.out.find("pid=" + std::to_string(r.pid) + "\n"), std::string::npos)
      << "the worker must be taehv-run's own process (exec, no fork): " << r.out;
  EXPECT_NE(r.out.find("RANK=1 LOCAL_RANK=1 WORLD_SIZE=2"), std::string::npos) << r.out;
}

TEST(Launch, SingleWorkerCommandThatCannotRunIsReported) {
  auto r = taehv({"--backend", "alpha", "--plugin-dir", pluginDir("alpha"), "--", "/nonexistent/worker"},
                 singleWorker(0, 0, 1));
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.err.find("cannot execute '/nonexistent/worker'"), std::string::npos) << r.err;
}

TEST(Launch, DefaultWorkerIsTaehvTrainBesideTaehvRun) {
  // A private install tree: bin/taehv-run (a copy) and a stand-in bin/taehv-train script.
  std::string root = tempDir();
  fs::create_directories(root + "/bin");
  fs::copy_file(taehvRun(), root + "/bin/taehv-run");
  std::ofstream(root + "/bin/taehv-train") << "#!/bin/sh\necho \"trainer rank=$RANK args=$#\"\n";
  fs::permissions(root + "/bin/taehv-train", fs::perms::owner_all);
  auto r = taehv({"--backend", "alpha", "--plugin-dir", pluginDir("alpha")}, singleWorker(0, 0, 1),
                 root + "/bin/taehv-run");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "trainer rank=0 args=0\n");
  fs::remove(root + "/bin/taehv-train");
  r = taehv({"--backend", "alpha", "--plugin-dir", pluginDir("alpha")}, singleWorker(0, 0, 1), root + "/bin/taehv-run");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(root + "/bin/taehv-train does not exist"), std::string::npos) << r.err;
  fs::remove_all(root);
}

TEST(Launch, NodesWaitForTheMasterAndGiveUpClearly) {
  int closed_port;
  {
    Listener probe;
    closed_port = probe.port;
  }  // closed again: nobody listens there now
  auto env = singleWorker(2, 0, 2);
  env.insert({{"TEST_ALPHA_NNODES", "2"},
              {"TEST_ALPHA_NODE_RANK", "1"},
              {"TEST_ALPHA_MASTER_ADDR", "127.0.0.1"},
              {"TEST_ALPHA_MASTER_PORT", std::to_string(closed_port)},
              {"TEST_ALPHA_MASTER_WAIT", "1"}});
  auto start = std::chrono::steady_clock::now();
  auto r = taehv({"--backend", "alpha", "--plugin-dir", pluginDir("alpha"), "--", "/bin/echo", "started"}, env);
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "") << "the worker must not start";
  EXPECT_NE(r.err.find("master 127.0.0.1:" + std::to_string(closed_port)), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("did not accept a connection within 1 s"), std::string::npos) << r.err;
  EXPECT_LT(took, std::chrono::seconds(5));

  // A master name that does not resolve (.invalid never does, RFC 6761): the same clear failure, naming why.
  env["TEST_ALPHA_MASTER_ADDR"] = "taehv-no-such-master.invalid";
  start = std::chrono::steady_clock::now();
  r = taehv({"--backend", "alpha", "--plugin-dir", pluginDir("alpha"), "--", "/bin/echo", "started"}, env);
  took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "") << "the worker must not start";
  EXPECT_NE(r.err.find("master taehv-no-such-master.invalid:" + std::to_string(closed_port)), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("cannot resolve 'taehv-no-such-master.invalid'"), std::string::npos) << r.err;
  EXPECT_LT(took, std::chrono::seconds(30)) << "a resolver timeout may stretch one attempt, never the whole wait";
  env["TEST_ALPHA_MASTER_ADDR"] = "127.0.0.1";

  Listener master;
  env["TEST_ALPHA_MASTER_PORT"] = std::to_string(master.port);
  env["TEST_ALPHA_MASTER_WAIT"] = "10";
  r = taehv({"--backend", "alpha", "--plugin-dir", pluginDir("alpha"), "--", "/bin/echo", "started"}, env);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "started\n");

}

// Needs the process supervisor (core/process): each worker prints its contract, prefixed [node:rank].
TEST(Launch, StandaloneWorkersGetTheContract) {
  auto r = taehv({"--standalone", "--nproc-per-node", "3", "--", "/bin/sh", "-c",
                  "echo RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE "
                  "GROUP_RANK=$GROUP_RANK ROLE_RANK=$ROLE_RANK ROLE_NAME=$ROLE_NAME MASTER_ADDR=$MASTER_ADDR "
                  "MASTER_PORT=$MASTER_PORT OMP=$OMP_NUM_THREADS RUN=$TORCHELASTIC_RUN_ID "
                  "RESTART=$TORCHELASTIC_RESTART_COUNT NODE=$TAEHV_NODE_RANK/$TAEHV_NNODES"},
                 {{"OMP_NUM_THREADS", "3"}});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("MASTER_PORT=([0-9]+) OMP=3 RUN=([0-9a-f]+) ")));
  const std::string port = m[1], run = m[2];
  EXPECT_NE(port, "29500");  // --standalone picks a free port
  for (int rank = 0; rank < 3; ++rank) {
    std::string line = "[0:" + std::to_string(rank) + "] RANK=" + std::to_string(rank) +
                       " LOCAL_RANK=" + std::to_string(rank) +
                       " WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 GROUP_RANK=0 ROLE_RANK=" + std::to_string(rank) +
                       " ROLE_NAME=default MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port + " OMP=3 RUN=" + run +
                       " RESTART=0 NODE=0/1\n";
    EXPECT_NE(r.out.find(line), std::string::npos) << "missing: " << line << "in:\n" << r.out;
  }
}

TEST(Launch, LocalRanksFilterHidesOthersButLogFilesKeepEverything) {
  std::string dir = tempDir();
  auto r = taehv({"--standalone", "--nproc-per-node", "3", "--local-ranks-filter", "1", "--log-dir", dir, "--",
                  "/bin/sh", "-c", "echo hello from $RANK"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[0:1] hello from 1\n");
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(readFile(dir + "/rank_" + std::to_string(rank) + ".log"), "hello from " + std::to_string(rank) + "\n");
  }
  r = taehv({"--standalone", "--nproc-per-node", "2", "--local-ranks-filter", "2", "--", "/bin/true"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("names local rank 2 but this node runs 2 worker(s)"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST(Launch, EachWorkerGetsItsOwnTorchelasticErrorFile) {
  std::string dir = tempDir();
  const std::string parent_file = dir + "/error.json";
  auto r = taehv({"--standalone", "--nproc-per-node", "2", "--shutdown-grace", "2", "--no-prefix", "--", "/bin/sh",
                  "-c",
                  // Rank 1 fails only once rank 0 has printed its file (fail fast would stop rank 0 first).
                  "echo file=$TORCHELASTIC_ERROR_FILE; if [ $RANK = 0 ]; then touch " + dir + "/rank0-said; fi; "
                  "if [ $RANK = 1 ]; then while [ ! -e " + dir + "/rank0-said ]; do sleep 0.05; done; "
                  "echo '{\"message\": {\"message\": \"ValueError: boom\", \"extraInfo\": "
                  "{\"py_callstack\": \"tb\", \"timestamp\": \"1\"}}}' > $TORCHELASTIC_ERROR_FILE; exit 3; fi; "
                  "sleep 20"},
                 {{"TORCHELASTIC_ERROR_FILE", parent_file}});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  std::smatch m;
  std::string out = r.out;
  std::set<std::string> files;
  while (std::regex_search(out, m, std::regex("file=(\\S+)"))) {
    files.insert(m[1]);
    out = m.suffix();
  }
  EXPECT_EQ(files.size(), 2u) << r.out;
  EXPECT_EQ(files.count(parent_file), 0u) << "workers must not write the launcher's own error file";
  const std::string written = readFile(parent_file);
  EXPECT_NE(written.find("ValueError: boom"), std::string::npos) << written;
  for (const auto& f : files) EXPECT_FALSE(fs::exists(f)) << "temporary worker error files are cleaned up: " << f;
  fs::remove_all(dir);
}

// Needs the process supervisor: a failing worker's exit code becomes taehv-run's, restarts bump the count.
TEST(Launch, WorkerFailureAndRestartsReachTheExitCode) {
  std::string dir = tempDir();
  auto r = taehv({"--standalone", "--nproc-per-node", "2", "--max-restarts", "1", "--shutdown-grace", "2",
                  "--log-dir", dir, "--no-prefix", "--", "/bin/sh", "-c",
                  "echo attempt=$TORCHELASTIC_RESTART_COUNT max=$TORCHELASTIC_MAX_RESTARTS; "
                  "if [ $RANK = 1 ]; then exit 4; fi; sleep 30"});
  EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
  EXPECT_NE(r.out.find("attempt=0 max=1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("attempt=1 max=1\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("[0:"), std::string::npos) << "--no-prefix: " << r.out;
  EXPECT_NE(readFile(dir + "/rank_1.log").find("attempt=1"), std::string::npos);
  fs::remove_all(dir);
}

// --restart-count R (what the SSH fan-out passes): the workers see restart R of at most --max-restarts, and this
// taehv-run does not restart them itself: the outer launcher restarts the whole job.
TEST(Launch, RestartCountFromAnOuterLauncherIsReportedAndNotRestartedLocally) {
  auto r = taehv({"--standalone", "--nproc-per-node", "1", "--max-restarts", "2", "--restart-count", "1",
                  "--no-prefix", "--", "/bin/sh", "-c",
                  "echo attempt=$TORCHELASTIC_RESTART_COUNT max=$TORCHELASTIC_MAX_RESTARTS; exit 5"});
  EXPECT_EQ(r.exit_code, 5) << r.out << r.err;
  EXPECT_NE(r.out.find("attempt=1 max=2\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("attempt=2"), std::string::npos) << "restarted locally: " << r.out;
  r = taehv({"describe", "--standalone", "--restart-count", "3"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("flag --restart-count"), std::string::npos) << r.out;
}


// torchrun's form end to end (no `--`): --redirects / --tee with --log-dir write LOG_DIR/RUN_ID/attempt_N/LOCAL_RANK/
// stdout.log and stderr.log; a redirected stream leaves the console, a teed one stays; the worker's error file is
// error.json beside them.
TEST(Launch, TorchrunRedirectsAndTeeWriteTorchrunsLogLayout) {
  std::string dir = tempDir();
  auto r = taehv({"--nproc-per-node=2", "--rdzv-id=job35", "--log-dir", dir, "--redirects", "0:3,1:1", "--tee",
                  "1:2", "--no-prefix", "--no-python", "/bin/sh", "-c",
                  "echo out$LOCAL_RANK; echo err$LOCAL_RANK >&2; echo $TORCHELASTIC_ERROR_FILE"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string attempt = dir + "/job35/attempt_0/";
  EXPECT_EQ(readFile(attempt + "0/stdout.log"), "out0\n" + attempt + "0/error.json\n");
  EXPECT_EQ(readFile(attempt + "0/stderr.log"), "err0\n");
  EXPECT_EQ(readFile(attempt + "1/stdout.log"), "out1\n" + attempt + "1/error.json\n");
  EXPECT_EQ(readFile(attempt + "1/stderr.log"), "err1\n");  // teed: in the file and on the console
  EXPECT_EQ(r.out, "");  // rank 0's streams and rank 1's stdout are redirected
  EXPECT_NE(r.err.find("err1\n"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("err0"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir + "/rank_0.log"));  // torchrun's layout replaces rank_<RANK>.log
  fs::remove_all(dir);
}

}  // namespace
}  // namespace taehv::test
