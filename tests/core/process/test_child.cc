// A child program for the supervisor tests: each mode is one behaviour a worker can have.
//   exit CODE [DELAY_MS]             print a line on stdout and stderr, exit with CODE after DELAY_MS
//   crash SIGNAL [DELAY_MS]          die by SIGNAL after DELAY_MS
//   sleep SECONDS [TOKEN...]         sleep (killed by any signal); extra args are markers for /proc scans
//   record FILE SECONDS              append the name of each INT/TERM/HUP/USR1/USR2 received to FILE;
//                                    INT/TERM/HUP end it with 128+sig; writes FILE.ready once handlers are set
//   ignore-term SECONDS              ignore SIGTERM, sleep (only SIGKILL ends it early)
//   spew LINES LENGTH                write LINES lines of LENGTH bytes to stdout and stderr, split across writes
//   tree TOKEN SECONDS               start a grandchild ("sleep SECONDS TOKEN") in our group, then sleep
//   escape TOKEN SECONDS [EXIT_MS]   start a daemon that leaves our group and session (setsid) and sleeps SECONDS
//                                    with a child of its own in a group of its own, both marked TOKEN; print
//                                    "escaped", then exit 0 after EXIT_MS (default: sleep SECONDS)
//   restart-check FILE UNTIL         append "rank=R restart=N" to FILE; exit 1 while N < UNTIL, else 0
//   env FILE NAME...                 write NAME=value lines of our environment to FILE, exit 0
//   partial TEXT                     write TEXT without a trailing newline, exit 0
//   long BYTES                       write one line of BYTES 'x' characters to stdout, exit 0
//   sigstate FILE                    write our signal mask, ignored set, pgid and parent-death signal to FILE
//   elastic-fail CODE                write a torchelastic error file to $TORCHELASTIC_ERROR_FILE, exit CODE
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <thread>

namespace {

int g_record_fd = -1;

void writeFully(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

extern "C" void recordSignal(int sig) {
  const char* name = sig == SIGINT    ? "SIGINT\n"
                     : sig == SIGTERM ? "SIGTERM\n"
                     : sig == SIGHUP  ? "SIGHUP\n"
                     : sig == SIGUSR1 ? "SIGUSR1\n"
                                      : "SIGUSR2\n";
  writeFully(g_record_fd, name, std::strlen(name));
  if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) ::_exit(128 + sig);
}

void sleepSeconds(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

std::string envOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: process_test_child MODE ARGS...\n");
    return 2;
  }
  const std::string mode = argv[1];
  if (mode == "exit") {
    std::printf("out of rank %s\n", envOr("RANK", "?").c_str());
    std::fflush(stdout);
    std::fprintf(stderr, "err of rank %s\n", envOr("RANK", "?").c_str());
    if (argc > 3) sleepSeconds(std::atof(argv[3]) / 1000.0);
    return std::atoi(argv[2]);
  }
  if (mode == "crash") {
    std::fprintf(stderr, "about to die by signal %s\n", argv[2]);
    if (argc > 3) sleepSeconds(std::atof(argv[3]) / 1000.0);
    struct rlimit no_core {0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);  // no core dump: fast and clean
    ::raise(std::atoi(argv[2]));
    return 99;
  }
  if (mode == "sleep") {
    sleepSeconds(std::atof(argv[2]));
    return 0;
  }
  if (mode == "record") {
    g_record_fd = ::open(argv[2], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    struct sigaction act {};
    act.sa_handler = recordSignal;
    sigemptyset(&act.sa_mask);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) ::sigaction(sig, &act, nullptr);
    const std::string ready = std::string(argv[2]) + ".ready";
    std::FILE* f = std::fopen(ready.c_str(), "w");
    if (f) std::fclose(f);
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::atof(argv[3]));
    while (std::chrono::steady_clock::now() < end) ::usleep(10000);
    return 0;
  }
  if (mode == "ignore-term") {
    ::signal(SIGTERM, SIG_IGN);
    std::fprintf(stderr, "ignoring SIGTERM\n");
    sleepSeconds(std::atof(argv[2]));
    return 0;
  }
  if (mode == "spew") {
    const long lines = std::atol(argv[2]);
    const long length = std::atol(argv[3]);
    const std::string rank = envOr("RANK", "?");
    std::string line;
    for (long i = 0; i < lines; ++i) {
      // "<rank> <i> <filler> <i> <rank>": a reader can check the line is whole and its own.
      line = rank + " " + std::to_string(i) + " ";
      const std::string tail = " " + std::to_string(i) + " " + rank + "\n";
      const char fill = static_cast<char>('a' + (std::atoi(rank.c_str()) + i) % 26);
      if (static_cast<long>(line.size() + tail.size()) < length) line.append(length - line.size() - tail.size() + 1, fill);
      line += tail;
      const int fd = (i % 5 == 4) ? 2 : 1;
      // Split each line across two writes at a varying point, so reads see partial lines.
      const std::size_t cut = static_cast<std::size_t>(i * 7919) % line.size();
      writeFully(fd, line.data(), cut);
      writeFully(fd, line.data() + cut, line.size() - cut);
    }
    return 0;
  }
  if (mode == "tree") {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::execl("/proc/self/exe", "process_test_child", "sleep", argv[3], argv[2], static_cast<char*>(nullptr));
      ::_exit(127);
    }
    std::printf("started grandchild %d\n", static_cast<int>(pid));
    std::fflush(stdout);
    sleepSeconds(std::atof(argv[3]));
    return 0;
  }
  if (mode == "escape") {
    const pid_t daemon = ::fork();
    if (daemon == 0) {
      ::setsid();  // out of the worker's process group and session, as a daemon does
      const int null = ::open("/dev/null", O_RDWR);
      for (int fd = 0; fd <= 2; ++fd) ::dup2(null, fd);  // holds none of the worker's pipes
      if (::fork() == 0) {
        ::setpgid(0, 0);  // and one more level, in a group of its own
        ::execl("/proc/self/exe", "process_test_child", "sleep", argv[3], argv[2], "daemon-child",
                static_cast<char*>(nullptr));
        ::_exit(127);
      }
      ::execl("/proc/self/exe", "process_test_child", "sleep", argv[3], argv[2], "daemon",
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::waitpid(daemon, nullptr, WNOHANG);
    std::printf("escaped\n");
    std::fflush(stdout);
    sleepSeconds(argc > 4 ? std::atof(argv[4]) / 1000.0 : std::atof(argv[3]));
    return 0;
  }
  if (mode == "restart-check") {
    const std::string restart = envOr("TORCHELASTIC_RESTART_COUNT", "-1");
    const std::string line = "rank=" + envOr("RANK", "?") + " restart=" + restart + "\n";
    const int fd = ::open(argv[2], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    writeFully(fd, line.data(), line.size());
    ::close(fd);
    if (std::atoi(restart.c_str()) < std::atoi(argv[3])) {
      std::fprintf(stderr, "failing on purpose at restart %s\n", restart.c_str());
      return 1;
    }
    return 0;
  }
  if (mode == "env") {
    std::FILE* f = std::fopen(argv[2], "w");
    for (int i = 3; i < argc; ++i) std::fprintf(f, "%s=%s\n", argv[i], envOr(argv[i], "<unset>").c_str());
    std::fclose(f);
    return 0;
  }
  if (mode == "long") {
    std::string line(static_cast<std::size_t>(std::atol(argv[2])), 'x');
    line.push_back('\n');
    writeFully(1, line.data(), line.size());
    return 0;
  }
  if (mode == "partial") {
    writeFully(1, argv[2], std::strlen(argv[2]));
    return 0;
  }
  if (mode == "sigstate") {
    sigset_t mask;
    ::sigprocmask(SIG_BLOCK, nullptr, &mask);
    int blocked = 0;
    int ignored = 0;
    std::string ignored_names;
    for (int sig = 1; sig < 32; ++sig) {
      if (sig == SIGKILL || sig == SIGSTOP) continue;
      blocked += sigismember(&mask, sig);
      struct sigaction act {};
      ::sigaction(sig, nullptr, &act);
      if (act.sa_handler == SIG_IGN) {
        ++ignored;
        ignored_names += std::to_string(sig) + ",";
      }
    }
    int pdeathsig = 0;
    ::prctl(PR_GET_PDEATHSIG, &pdeathsig);
    std::FILE* f = std::fopen(argv[2], "w");
    std::fprintf(f, "blocked=%d\nignored=%s\npgid_is_pid=%d\npdeathsig=%d\n", blocked, ignored_names.c_str(),
                 ::getpgid(0) == ::getpid() ? 1 : 0, pdeathsig);
    std::fclose(f);
    (void)ignored;
    return 0;
  }
  if (mode == "elastic-fail") {
    const std::string path = envOr("TORCHELASTIC_ERROR_FILE", "");
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (f) {
      std::fprintf(f, "{\"message\": {\"message\": \"ValueError: boom from rank %s\", \"extraInfo\": "
                      "{\"py_callstack\": \"Traceback: here\", \"timestamp\": \"1700000000\"}}}",
                   envOr("RANK", "?").c_str());
      std::fclose(f);
    }
    return std::atoi(argv[2]);
  }
  std::fprintf(stderr, "process_test_child: unknown mode '%s'\n", mode.c_str());
  return 2;
}
