// Test helper: runs a real program with a chosen environment and collects its exit status and output.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace taehv::test {

struct ProcessResult {
  int exit_code = -1;  ///< exit status, or 128 + signal
  std::string out;
  std::string err;
  bool timed_out = false;
  pid_t pid = -1;
};

/// This test's environment without the variables that steer taehv-run (PET_*, TAEHV_PLUGIN_PATH, platform
/// markers of the test backends), so that each test states exactly what the launcher sees.
inline std::map<std::string, std::string> cleanEnv() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    auto eq = entry.find('=');
    if (eq == std::string::npos) continue;
    std::string name = entry.substr(0, eq);
    if (name.rfind("PET_", 0) == 0 || name.rfind("TEST_", 0) == 0 || name == "TAEHV_PLUGIN_PATH" ||
        name == "OMP_NUM_THREADS" || name.rfind("SLURM_", 0) == 0 || name.rfind("OMPI_", 0) == 0 ||
        name == "KUBERNETES_SERVICE_HOST" || name == "TORCHELASTIC_ERROR_FILE") {
      continue;
    }
    env[name] = entry.substr(eq + 1);
  }
  return env;
}

inline std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// A fresh temporary folder (mkdtemp under TMPDIR or /tmp).
inline std::string tempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base ? base : "/tmp") + "/taehv-core-test-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) return "";
  return buf.data();
}

/// Runs argv with env; kills it (SIGKILL to its process group) after `timeout`.
inline ProcessResult runProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                                std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  ProcessResult r;
  std::string dir = tempDir();
  std::string out_path = dir + "/out", err_path = dir + "/err";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int in = ::open("/dev/null", O_RDONLY);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    std::vector<std::string> env_strings;
    for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    std::vector<char*> c_env, c_argv;
    for (auto& s : env_strings) c_env.push_back(s.data());
    c_env.push_back(nullptr);
    std::vector<std::string> args = argv;
    for (auto& s : args) c_argv.push_back(s.data());
    c_argv.push_back(nullptr);
    ::execve(c_argv[0], c_argv.data(), c_env.data());
    _exit(126);
  }
  r.pid = pid;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (true) {
    pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      r.timed_out = true;
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = readFile(out_path);
  r.err = readFile(err_path);
  ::unlink(out_path.c_str());
  ::unlink(err_path.c_str());
  ::rmdir(dir.c_str());
  return r;
}

/// Path of the built taehv-run (TAEHV_BIN_DIR is set for every ctest test).
inline std::string taehvRun() {
  const char* bin = std::getenv("TAEHV_BIN_DIR");
  return std::string(bin ? bin : ".") + "/taehv-run";
}

}  // namespace taehv::test
