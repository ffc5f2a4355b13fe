#include "spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <initializer_list>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "taehv/env.h"

namespace taehv::process {
namespace {

constexpr const char* kDefaultPath = "/usr/local/bin:/usr/bin:/bin";

/// What failed in the child before execve; sent to the parent over a close-on-exec pipe.
enum class ChildStage : int { kStdio = 1, kChdir = 2, kExec = 3 };
struct ChildError {
  int stage;
  int err;
};

void closeFd(int& fd) {
  if (fd >= 0) {
    ::close(fd);
    fd = -1;
  }
}

bool isExecutableFile(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// Everything below runs in the forked child before execve: async-signal-safe calls only.
[[noreturn]] void childFail(int report_fd, ChildStage stage) {
  ChildError e{static_cast<int>(stage), errno};
  ssize_t ignored = ::write(report_fd, &e, sizeof e);
  (void)ignored;
  ::_exit(127);
}

[[noreturn]] void runChild(pid_t parent, const char* exe, char* const* argv, char* const* envp, const char* cwd,
                           int stdin_fd, int stdout_fd, int stderr_fd, int report_fd) {
  // Signals the supervisor catches or ignores go back to their defaults: an ignored disposition (SIGPIPE)
  // would survive execve, and a handler must not run in the child before execve.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGCHLD, SIGPIPE}) ::sigaction(sig, &dfl, nullptr);

  ::setpgid(0, 0);
  // Die with the supervisor. If it already died between fork() and here, the signal will never come.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);
  // Under Yama's ptrace_scope 1 only ancestors may attach: let the supervisor's children (the stack tools of the
  // hang diagnosis, progress.h) attach to this worker. Fails harmlessly where Yama is not built in.
  ::prctl(PR_SET_PTRACER, static_cast<unsigned long>(parent), 0, 0, 0);

  // stdout_fd/stderr_fd -1: keep ours.
  if (::dup2(stdin_fd, STDIN_FILENO) < 0 || (stdout_fd >= 0 && ::dup2(stdout_fd, STDOUT_FILENO) < 0) ||
      (stderr_fd >= 0 && ::dup2(stderr_fd, STDERR_FILENO) < 0)) {
    childFail(report_fd, ChildStage::kStdio);
  }
  // No descriptor of ours (or of whoever embeds us) leaks into the worker: a leaked pipe end would keep
  // another child's stdin or output open. The report pipe is close-on-exec already.
  ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  if (cwd != nullptr && ::chdir(cwd) != 0) childFail(report_fd, ChildStage::kChdir);

  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(exe, argv, envp);
  childFail(report_fd, ChildStage::kExec);
}

}  // namespace

std::string findExecutable(const std::string& argv0, const std::string& path) {
  if (argv0.find('/') != std::string::npos) return argv0;
  std::size_t begin = 0;
  while (begin <= path.size()) {
    std::size_t end = path.find(':', begin);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(begin, end - begin);
    std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + argv0;
    if (isExecutableFile(candidate)) return candidate;
    begin = end + 1;
  }
  return "";
}

namespace {

std::string searchPath(const std::map<std::string, std::string>& env) {
  if (const std::string* path = findEnv(env, "PATH")) return *path;
  if (const char* ours = std::getenv("PATH")) return ours;  // this process's own, for a caller without a snapshot
  return kDefaultPath;
}

/// Makes sure descriptors 0-2 are open, so that no pipe we create lands on them (dup2 onto itself would
/// keep close-on-exec set in the child).
void ensureStdFds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
      const int opened = ::open("/dev/null", O_RDWR);
      if (opened >= 0 && opened != fd) ::close(opened);
    }
  }
}

}  // namespace

std::string findProgram(const std::string& name, const std::map<std::string, std::string>& env) {
  return findExecutable(name, searchPath(env));
}

Checked<SpawnedChild> spawnChild(const ChildSpec& spec, bool capture_output) {
  ensureStdFds();
  Checked<SpawnedChild> out;
  if (spec.argv.empty() || spec.argv[0].empty()) {
    out.error = "empty command for '" + spec.label + "': nothing to run";
    return out;
  }
  const std::string& name = spec.argv[0];
  const std::string search_path = searchPath(spec.env);
  const std::string exe = findExecutable(name, search_path);
  if (exe.empty()) {
    out.error = "command not found: '" + name + "' (searched PATH=" + search_path +
                "); give a full path or fix PATH";
    return out;
  }

  // Everything the child needs is built before fork(): after it only async-signal-safe calls are allowed.
  std::vector<char*> argv;
  argv.reserve(spec.argv.size() + 1);
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_storage;
  env_storage.reserve(spec.env.size());
  for (const auto& [k, v] : spec.env) env_storage.push_back(k + "=" + v);
  std::vector<char*> envp;
  envp.reserve(env_storage.size() + 1);
  for (std::string& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);
  const char* cwd = spec.cwd.empty() ? nullptr : spec.cwd.c_str();

  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1}, in_pipe[2] = {-1, -1}, report[2] = {-1, -1};
  auto closeAll = [&] {
    for (int* p : {out_pipe, err_pipe, in_pipe, report}) {
      closeFd(p[0]);
      closeFd(p[1]);
    }
  };
  bool ok = ::pipe2(report, O_CLOEXEC) == 0;
  if (ok && capture_output) ok = ::pipe2(out_pipe, O_CLOEXEC) == 0 && ::pipe2(err_pipe, O_CLOEXEC) == 0;
  if (ok && spec.stdin_pipe) {
    ok = ::pipe2(in_pipe, O_CLOEXEC) == 0;
  } else if (ok) {
    in_pipe[0] = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    ok = in_pipe[0] >= 0;
  }
  if (!ok) {
    out.error = std::string("cannot create pipes for '") + name + "': " + std::strerror(errno);
    closeAll();
    return out;
  }

  // Block every signal across fork() so that none of our handlers can run in the child before it has reset
  // its dispositions; the child unblocks everything just before execve.
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    runChild(parent, exe.c_str(), argv.data(), envp.data(), cwd, in_pipe[0], out_pipe[1], err_pipe[1], report[1]);
  }
  const int fork_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) {
    out.error = std::string("cannot start '") + name + "': fork failed: " + std::strerror(fork_errno);
    closeAll();
    return out;
  }
  ::setpgid(pid, pid);  // also here, so the group exists before we ever signal it (no race with the child)
  closeFd(in_pipe[0]);
  closeFd(out_pipe[1]);
  closeFd(err_pipe[1]);
  closeFd(report[1]);

  ChildError child_error{};
  ssize_t n;
  do {
    n = ::read(report[0], &child_error, sizeof child_error);
  } while (n < 0 && errno == EINTR);
  closeFd(report[0]);
  if (n == static_cast<ssize_t>(sizeof child_error)) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    const char* what = child_error.stage == static_cast<int>(ChildStage::kChdir) ? "cannot change directory to '"
                       : child_error.stage == static_cast<int>(ChildStage::kStdio) ? "cannot set up stdio for '"
                                                                                   : "cannot execute '";
    const std::string object = child_error.stage == static_cast<int>(ChildStage::kChdir) ? spec.cwd : exe;
    out.error = std::string(what) + object + "'" + (object != name ? " for '" + name + "'" : std::string()) + ": " +
                std::strerror(child_error.err);
    closeAll();
    return out;
  }

  for (int fd : {out_pipe[0], err_pipe[0]}) {
    if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  out.value.pid = pid;
  out.value.stdout_fd = out_pipe[0];
  out.value.stderr_fd = err_pipe[0];
  out.value.stdin_fd = in_pipe[1];
  return out;
}

}  // namespace taehv::process
