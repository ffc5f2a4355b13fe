// The node group at scale on loopback (not a test): node 0's TcpNodeGroup in this process, N lightweight members
// (the real protocol: Session, HMAC, heartbeats, but no launcher, one Asio thread for all) in a forked child.
// Prints: time to form, detection latency of a member whose process dies (its socket closes) and of a member that
// goes silent (a cut link: found by --node-timeout), node 0's CPU time while idle-watching, and node 0's peak RSS.
//
//   group_bench N [NODE_TIMEOUT_S]      e.g. group_bench 1024 5
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <boost/asio.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

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
          self->send(Message{MessageType::kJoin, static_cast<std::uint32_t>(self->rank), 0,
                             self->session.makeClientNonce(), "sim"});
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

/// One group of n members + node 0; `kill` decides how member 1 or 2 is lost.
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
    if (::write(control[1], &how, 1) == 1) {
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

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: group_bench N [NODE_TIMEOUT_S]\n");
    return 2;
  }
  const int n = std::atoi(argv[1]);
  const auto timeout = std::chrono::milliseconds(argc > 2 ? std::atoi(argv[2]) * 1000 : 5000);
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &lim);
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
