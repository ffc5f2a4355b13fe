// Runs supervise() from the command line, so tests can drive real supervision and `kill -9` it.
//   process_supervise_driver [--nproc N] [--grace-ms MS] [--max-restarts N] [--no-prefix] [--error-file F]
//       [--log-dir D] [--echo-ranks R,R,...] [--stdin-pipe] [--cwd D] [--tail N] [--subreaper]
//       [--external-stop-ms MS [--external-grace-ms G]] -- CMD ARGS...
// --external-stop-ms: an outside stop (as the node group's) fires MS after the start, its reason "stopped from the
// test"; --external-grace-ms: the grace that stop asks for (a node lost), else none.
// "{rank}" in CMD ARGS becomes the child's rank. Each child gets our environment plus RANK, LOCAL_RANK,
// WORLD_SIZE, TORCHELASTIC_RESTART_COUNT (the restart_count given to make_children) and
// TORCHELASTIC_MAX_RESTARTS; label "0:<rank>", host "testhost". Exits with the result's exit code after
// printing one line "driver: exit_code=... restarts=... interrupt=... first_failure_rank=..." on stderr.
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "taehv/process/supervisor.h"

extern char** environ;

namespace {

std::string replaceAll(std::string s, const std::string& from, const std::string& to) {
  for (std::size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) s.replace(pos, from.size(), to);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace taehv::process;
  SupervisorOptions options;
  options.shutdown_grace = std::chrono::milliseconds(2000);
  int nproc = 1;
  std::string log_dir;
  bool stdin_pipe = false;
  std::string cwd;
  bool filter = false;
  std::set<int> echo_ranks;
  long external_stop_ms = -1, external_grace_ms = -1;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "driver: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--") {
      ++i;
      break;
    } else if (a == "--nproc") {
      nproc = std::atoi(next().c_str());
    } else if (a == "--grace-ms") {
      options.shutdown_grace = std::chrono::milliseconds(std::atol(next().c_str()));
    } else if (a == "--max-restarts") {
      options.max_restarts = std::atoi(next().c_str());
    } else if (a == "--no-prefix") {
      options.prefix_output = false;
    } else if (a == "--error-file") {
      options.error_file = next();
    } else if (a == "--log-dir") {
      log_dir = next();
    } else if (a == "--cwd") {
      cwd = next();
    } else if (a == "--subreaper") {
      ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // like PID 1 of a container: orphans of the workers come to us
    } else if (a == "--stdin-pipe") {
      stdin_pipe = true;
    } else if (a == "--tail") {
      options.stderr_tail_lines = static_cast<std::size_t>(std::atol(next().c_str()));
    } else if (a == "--external-stop-ms") {
      external_stop_ms = std::atol(next().c_str());
    } else if (a == "--external-grace-ms") {
      external_grace_ms = std::atol(next().c_str());
    } else if (a == "--echo-ranks") {
      filter = true;
      std::stringstream ss(next());
      for (std::string r; std::getline(ss, r, ',');) echo_ranks.insert(std::atoi(r.c_str()));
    } else {
      std::fprintf(stderr, "driver: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  const std::vector<std::string> command(argv + i, argv + argc);
  std::map<std::string, std::string> base_env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const std::size_t eq = kv.find('=');
    if (eq != std::string::npos) base_env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }

  auto make = [&](int restart) {
    std::vector<ChildSpec> specs;
    for (int rank = 0; rank < nproc; ++rank) {
      ChildSpec s;
      for (const std::string& arg : command) s.argv.push_back(replaceAll(arg, "{rank}", std::to_string(rank)));
      s.env = base_env;
      s.env["RANK"] = s.env["LOCAL_RANK"] = std::to_string(rank);
      s.env["WORLD_SIZE"] = std::to_string(nproc);
      s.env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(restart);
      s.env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(options.max_restarts);
      s.label = "0:" + std::to_string(rank);
      s.rank = rank;
      s.host = "testhost";
      if (!log_dir.empty()) s.log_file = log_dir + "/rank" + std::to_string(rank) + ".log";
      s.echo = !filter || echo_ranks.count(rank) > 0;
      s.stdin_pipe = stdin_pipe;
      s.cwd = cwd;
      specs.push_back(std::move(s));
    }
    return specs;
  };
  int stop_pipe[2] = {-1, -1};
  std::thread stopper;
  if (external_stop_ms >= 0) {
    if (::pipe(stop_pipe) != 0) return 2;
    options.external_stop.fd = stop_pipe[0];
    options.external_stop.reason = [] { return std::string("stopped from the test"); };
    if (external_grace_ms >= 0) {
      options.external_stop.grace = [external_grace_ms] { return std::chrono::milliseconds(external_grace_ms); };
    }
    stopper = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(external_stop_ms));
      if (::write(stop_pipe[1], "x", 1) != 1) std::perror("driver: stop pipe");
    });
  }
  const SupervisorResult r = supervise(make, options);
  if (stopper.joinable()) stopper.join();
  std::fprintf(stderr, "driver: exit_code=%d restarts=%d interrupt=%d first_failure_rank=%d\n", r.exit_code, r.restarts,
               r.interrupt_signal, r.first_failure ? r.first_failure->rank : -1);
  return r.exit_code;
}
