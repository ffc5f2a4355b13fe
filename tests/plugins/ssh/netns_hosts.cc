#include "netns_hosts.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace taehv::ssh::testing {

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

NetnsHosts::NetnsHosts(int n, const std::string& hide) {
  if (::geteuid() != 0) {
    skip_ = "needs root (network namespaces)";
    return;
  }
  if (::access("/usr/sbin/sshd", X_OK) != 0 || ::access("/usr/bin/ssh", X_OK) != 0) {
    skip_ = "needs openssh-server and openssh-client";
    return;
  }
  const char* src = std::getenv("TAEHV_SOURCE_DIR");
  const std::string script = std::string(src ? src : ".") + "/tests/infra/ssh/sshd_hosts.sh";
  char tmpl[] = "/tmp/taehv-ssh-hosts-XXXXXX";
  if (!::mkdtemp(tmpl)) {
    error_ = "mkdtemp failed";
    return;
  }
  base_ = tmpl;
  const std::string log = base_ + "/harness.log";
  std::vector<std::pair<std::string, std::string>> env;
  if (!hide.empty()) env.emplace_back("HIDE", hide);
  script_ = std::make_unique<taehv::testing::ServedScript>(script, std::vector<std::string>{base_, std::to_string(n)},
                                           std::chrono::seconds(30), log, env);
  ready_ = script_->ready();
  if (!ready_) error_ = "sshd hosts did not come up: " + readFile(log);
}

NetnsHosts::~NetnsHosts() {
  script_.reset();  // the script tears everything down on EOF of its stdin
  if (!base_.empty()) std::system(("rm -rf '" + base_ + "'").c_str());
}

std::string NetnsHosts::runOn(const std::string& host, const std::string& command, int* exit_code) const {
  char tmpl[] = "/tmp/taehv-ssh-run-XXXXXX";
  const int fd = ::mkstemp(tmpl);
  if (fd < 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fd, 1);
    const int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, 0);
    ::execl("/usr/bin/ssh", "ssh", "-F", sshConfig().c_str(), "--", host.c_str(), command.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fd);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (exit_code) *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::string out = readFile(tmpl);
  ::unlink(tmpl);
  return out;
}

int Launched::wait() {
  int status = 0;
  ::waitpid(pid, &status, 0);
  pid = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool Launched::waitFor(int seconds, int* code) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    if (got == pid) {
      pid = -1;
      *code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::string Launched::out() const { return readFile(out_path); }
std::string Launched::err() const { return readFile(err_path); }

Launched launch(const std::vector<std::string>& argv, const std::string& cwd,
                const std::map<std::string, std::string>& extra_env, const std::string& dir) {
  static int counter = 0;
  Launched l;
  const std::string tag = dir + "/launch" + std::to_string(++counter);
  l.out_path = tag + ".out";
  l.err_path = tag + ".err";
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    if (extra_env.count(entry.substr(0, entry.find('=')))) continue;
    env_strings.push_back(entry);
  }
  for (const auto& [k, v] : extra_env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  l.pid = ::fork();
  if (l.pid == 0) {
    ::setpgid(0, 0);
    const int out = ::open(l.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(l.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int null = ::open("/dev/null", O_RDONLY);
    ::dup2(null, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    if (::chdir(cwd.c_str()) != 0) ::_exit(126);
    ::execve(cargv[0], cargv.data(), envp.data());
    ::_exit(127);
  }
  return l;
}

}  // namespace taehv::ssh::testing
