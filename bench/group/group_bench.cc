// The node group at scale on loopback (not a test): node 0's TcpNodeGroup in this process, N lightweight members
// (the real protocol: Session, HMAC, heartbeats, but no launcher, one Asio thread for all) in a forked child.
// Prints: time to form, detection latency of a member whose process dies (its socket closes) and of a member that
// goes silent (a cut link: found by --node-timeout), node 0's CPU time while idle-watching, and node 0's peak RSS.
// The `form` mode times formation alone, the TCP group's beside the etcd group's (N EtcdNodeGroup objects in this
// process, each with its own thread and lease, against a real etcd the caller started: bench/group/etcd_form.sh).
//
//   group_bench N [NODE_TIMEOUT_S]               e.g. group_bench 1024 5
//   group_bench form ETCD_ENDPOINT REPS NODES...  e.g. group_bench form 127.0.0.1:23790 3 64 256 1024
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "taehv/group/etcd_node_group.h"
#include "taehv/group/session.h"
#include "taehv/group/tcp_node_group.h"
#include "taehv/group/wire.h"

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using namespace taehv::group;

const std::string kKey = jobKey("bench-token-0123456789abcdef", "bench");

/// One simulated member: connect, handshake, heartbeat every kHeartbeatPeriod; `silent` stops the heartbeats.
struct Member : std::enable_shared_from_this<Member> {
  Member(asio::io_context& io, int rank) : socket(io), session(kKey, Direction::kToLeader), rank(rank) {}
  tcp::socket socket;
  Session session;
  FrameReader reader;
  std::array<char, 4096> buf{};
  std::deque<std::string> out;
  bool writing = false;
  bool silent = false;
  int rank;

  void send(const Message& m) {
    out.push_back(session.seal(m));
    if (!writing) pump();
  }
  void pump() {
    writing = true;
    auto self = shared_from_this();
    asio::async_write(socket, asio::buffer(out.front()), [self](boost::system::error_code ec, std::size_t) {
      self->writing = false;
      if (ec) return;
      self->out.pop_front();
      if (!self->out.empty()) self->pump();
    });
  }
  void read() {
    auto self = shared_from_this();
    socket.async_read_some(asio::buffer(buf), [self](boost::system::error_code ec, std::size_t n) {
      if (ec) return;
      self->reader.feed(self->buf.data(), n);
      for (auto frame = self->reader.next(); frame.ok() && frame.value; frame = self->reader.next()) {
        Opened in = self->session.open(*frame.value);
        if (in.verdict != Verdict::kOk) return;
        if (in.message.type == MessageType::kChallenge) {
          self->session.setServerNonce(in.message.nonce);
          Message join{MessageType::kJoin, static_cast<std::uint32_t>(self->rank), 0,
                       self->session.makeClientNonce(), "sim"};
          join.procs = 1;  // one process on each simulated node (the leader refuses a JOIN of 0)
          self->send(join);
        } else if (in.message.type == MessageType::kWelcome) {
          self->session.establish();
        }
      }
      self->read();
    });
  }
};

void runMembers(int n, int port, int control_fd) {
  asio::io_context io;
  std::vector<std::shared_ptr<Member>> members;
  const tcp::endpoint leader(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port));
  for (int r = 1; r <= n; ++r) {
    auto m = std::make_shared<Member>(io, r);
    members.push_back(m);
    m->socket.async_connect(leader, [m](boost::system::error_code ec) {
      if (!ec) m->read();
    });
  }
  asio::steady_timer beat(io);
  std::function<void()> tick = [&] {
    beat.expires_after(kHeartbeatPeriod);
    beat.async_wait([&](boost::system::error_code ec) {
      if (ec) return;
      for (auto& m : members) {
        if (m->socket.is_open() && m->session.established() && !m->silent) {
          m->send(Message{MessageType::kHeartbeat, static_cast<std::uint32_t>(m->rank), 0, {}, {}});
        }
      }
      tick();
    });
  };
  tick();
  // Control: "k" closes member 1's socket (its process died), "s" silences member 2 (its link was cut).
  asio::posix::stream_descriptor control(io, control_fd);
  char cmd = 0;
  std::function<void()> listen = [&] {
    asio::async_read(control, asio::buffer(&cmd, 1), [&](boost::system::error_code ec, std::size_t) {
      if (ec) {
        io.stop();
        return;
      }
      if (cmd == 'k') members[0]->socket.close();
      if (cmd == 's') members[1]->silent = true;
      listen();
    });
  };
  listen();
  io.run();
}

double cpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

struct Run {
  double form_s = -1;
  double detect_s = -1;
};

/// One group of n members + node 0; `how` decides how member 1 ('k') or 2 ('s') is lost, 0: none (formation only).
Run runOnce(int n, std::chrono::milliseconds timeout, char how, double* idle_cpu_pct) {
  GroupOptions o;
  o.node_rank = 0;
  o.nnodes = n + 1;
  o.bind_addr = "127.0.0.1";
  o.port = 0;
  o.host = "bench";
  o.job_key = kKey;
  o.node_timeout = timeout;
  TcpNodeGroup leader(o);
  Run run;
  if (!leader.start().ok()) return run;
  int control[2];
  if (::pipe(control) != 0) return run;
  const auto t0 = Clock::now();
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(control[1]);
    runMembers(n, leader.boundPort(), control[0]);
    ::_exit(0);
  }
  ::close(control[0]);
  if (leader.form(t0 + std::chrono::seconds(120)).ok()) {
    run.form_s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (idle_cpu_pct != nullptr) {  // node 0 watching n members, nothing else happening
      const double c0 = cpuSeconds();
      const auto w0 = Clock::now();
      std::this_thread::sleep_for(std::chrono::seconds(10));
      *idle_cpu_pct = 100.0 * (cpuSeconds() - c0) / std::chrono::duration<double>(Clock::now() - w0).count();
    }
    const auto t1 = Clock::now();
    if (how != 0 && ::write(control[1], &how, 1) == 1) {
      pollfd p{leader.stopFd(), POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(timeout.count()) + 30000) == 1) {
        run.detect_s = std::chrono::duration<double>(Clock::now() - t1).count();
      }
    }
  }
  ::close(control[1]);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  return run;
}

/// Seconds until `n` etcd nodes (ranks 0..n-1, --nnodes n) started at once have all formed, or -1 (one failed: its
/// reason on stderr). Each node is what taehv-run runs: an EtcdNodeGroup with its own thread, lease and client.
double etcdFormOnce(const std::vector<EtcdEndpoint>& endpoints, int n, const std::string& run_id,
                    std::chrono::milliseconds timeout) {
  std::vector<std::unique_ptr<EtcdNodeGroup>> nodes;
  for (int r = 0; r < n; ++r) {
    EtcdGroupOptions o;
    o.group.node_rank = r;
    o.group.nnodes = n;
    o.group.host = "bench";
    o.group.job_key = kKey;
    o.group.node_timeout = timeout;
    o.endpoints = endpoints;
    o.run_id = run_id;
    o.address = "127.0.0.1";
    nodes.push_back(std::make_unique<EtcdNodeGroup>(o));
  }
  std::atomic<int> failed{0};
  std::atomic<int> registered{0};
  std::atomic<int> formed{0};
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::seconds(300);
  std::vector<std::thread> starters;  // every node starts at once, as N launchers would
  for (int r = 0; r < n; ++r) {
    starters.emplace_back([&nodes, &failed, &registered, &formed, t0, deadline, n, r] {
      taehv::Status s = nodes[static_cast<std::size_t>(r)]->start();
      if (s.ok()) {
        ++registered;
        s = nodes[static_cast<std::size_t>(r)]->form(deadline);
      }
      if (s.ok()) ++formed;
      if (s.ok() || failed++ > 0) return;
      // The first failure: what taehv-run would print on that node before it exits. The others could never form
      // (a fixed --nnodes), so they are stopped rather than left to wait out the deadline.
      std::fprintf(stderr, "etcd node %d did not form after %.1f s (%d of %d registered, %d formed): %s\n", r,
                   std::chrono::duration<double>(Clock::now() - t0).count(), registered.load(), n, formed.load(),
                   s.error.c_str());
      for (auto& other : nodes) other->requestStop("bench: node " + std::to_string(r) + " failed");
    });
  }
  for (auto& t : starters) t.join();
  const double form_s = std::chrono::duration<double>(Clock::now() - t0).count();
  // Every node's thread is told to quit at once (one at a time, each would wait out a busy tick while the rest
  // keep loading etcd); their leases then expire within the TTL, under this run's own prefix.
  std::vector<std::thread> enders;
  for (auto& node : nodes) enders.emplace_back([&node] { node.reset(); });
  for (auto& t : enders) t.join();
  return failed > 0 ? -1 : form_s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? -1 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

/// `form` mode: for each node count, REPS formations of each group, interleaved (TCP, etcd, TCP, etcd...), then
/// one line per count with both medians and their ratio. Exit 1 when any formation failed.
int formCompare(const std::string& endpoint_list, int reps, const std::vector<int>& counts) {
  const taehv::Checked<std::vector<EtcdEndpoint>> endpoints = parseEtcdEndpoints(endpoint_list);
  if (!endpoints.ok()) {
    std::fprintf(stderr, "group_bench form: %s\n", endpoints.error.c_str());
    return 2;
  }
  const auto timeout = std::chrono::milliseconds(15000);  // --node-timeout's default: the etcd lease TTL
  int failures = 0;
  std::printf("%6s %5s %10s %10s %8s   (each: median of %d; every run's seconds follow)\n", "nodes", "reps",
              "tcp_s", "etcd_s", "etcd/tcp", reps);
  for (const int n : counts) {
    std::vector<double> tcp, etcd;
    for (int rep = 0; rep < reps; ++rep) {
      const double t = runOnce(n - 1, timeout, 0, nullptr).form_s;
      const double e = etcdFormOnce(endpoints.value, n, "bench-" + std::to_string(::getpid()) + "-" +
                                                             std::to_string(n) + "-" + std::to_string(rep), timeout);
      if (t < 0 || e < 0) ++failures;
      if (t >= 0) tcp.push_back(t);
      if (e >= 0) etcd.push_back(e);
      std::fprintf(stderr, "nodes=%d rep=%d tcp_form_s=%.3f etcd_form_s=%.3f\n", n, rep, t, e);
    }
    const double mt = median(tcp), me = median(etcd);
    std::printf("%6d %5d %10.3f %10.3f %8.1f  tcp:", n, reps, mt, me, mt > 0 && me > 0 ? me / mt : -1.0);
    for (double x : tcp) std::printf(" %.3f", x);
    std::printf("  etcd:");
    for (double x : etcd) std::printf(" %.3f", x);
    std::printf("\n");
    std::fflush(stdout);
  }
  return failures > 0 ? 1 : 0;
}

/// Open files: every simulated connection is one (1,024 etcd nodes mid-call at once, plus the TCP members); the
/// soft limit (often 1,024) is raised to the hard one.
void raiseFileLimit() {
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &lim);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || (std::string(argv[1]) == "form" && argc < 5)) {
    std::fprintf(stderr, "usage: group_bench N [NODE_TIMEOUT_S]\n       group_bench form ETCD_ENDPOINT REPS NODES...\n");
    return 2;
  }
  raiseFileLimit();
  if (std::string(argv[1]) == "form") {
    std::vector<int> counts;
    for (int i = 4; i < argc; ++i) {
      counts.push_back(std::atoi(argv[i]));
      if (counts.back() < 2) {
        std::fprintf(stderr, "group_bench form: node count '%s' is not a number of 2 or more\n", argv[i]);
        return 2;
      }
    }
    return formCompare(argv[2], std::max(1, std::atoi(argv[3])), counts);
  }
  const int n = std::atoi(argv[1]);
  const auto timeout = std::chrono::milliseconds(argc > 2 ? std::atoi(argv[2]) * 1000 : 5000);
  double idle = -1;
  const double cpu0 = cpuSeconds();
  const Run killed = runOnce(n, timeout, 'k', &idle);
  const Run silent = runOnce(n, timeout, 's', nullptr);
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  std::printf("nodes=%d form_s=%.3f detect_killed_s=%.3f detect_silent_s=%.3f node_timeout_s=%.1f "
              "node0_idle_cpu_pct=%.2f node0_cpu_s_total=%.2f node0_peak_rss_mb=%.1f\n",
              n + 1, killed.form_s, killed.detect_s, silent.detect_s,
              std::chrono::duration<double>(timeout).count(), idle, cpuSeconds() - cpu0, u.ru_maxrss / 1024.0);
  return killed.form_s < 0 || killed.detect_s < 0 || silent.detect_s < 0 ? 1 : 0;
}
