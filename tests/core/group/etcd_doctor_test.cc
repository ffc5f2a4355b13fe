// `taehv-run doctor` and `describe` with --rdzv-backend etcd, through the real taehv-run: the endpoint rows against
// a real etcd (healthy, one dead endpoint of two, a cluster without quorum), a web server that is not etcd, a closed
// port and a malformed list; describe's backend, endpoints and master.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "etcd_server.h"
#include "run_process.h"

namespace taehv::test {
namespace {

using Clock = std::chrono::steady_clock;

/// doctor for node 1 of 2 with the etcd group at `endpoints` (node 1: no group port of its own to check).
ProcessResult doctor(const std::string& endpoints) {
  auto env = cleanEnv();
  env["TAEHV_JOB_TOKEN"] = "etcd-doctor-test-token-0123456789";
  return runProcess({taehvRun(), "doctor", "--backend", "local", "--nnodes", "2", "--node-rank", "1", "--master-addr",
                     "127.0.0.1", "--output-dir", "/tmp", "--rdzv-backend", "etcd", "--rdzv-endpoint", endpoints},
                    env, std::chrono::seconds(60));
}

/// The row named `name` in doctor's table: "STATUS DETAIL", then " | fix: FIX" when it has one; "" when absent.
std::string row(const std::string& table, const std::string& name) {
  std::istringstream in(table);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    if (!out.empty()) {
      const std::size_t fix = line.find("fix:");
      if (fix != std::string::npos && line.find_first_not_of(' ') == fix) {
        out += " | fix: " + line.substr(line.find_first_not_of(' ', fix + 4));
      }
      return out;
    }
    if (line.rfind(name + " ", 0) != 0) continue;
    const std::size_t at = line.find_first_not_of(' ', name.size());
    out = at == std::string::npos ? "?" : line.substr(at);
  }
  return out;
}

bool startsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

/// A web server that is not etcd: every connection gets "200 OK" and an HTML page, as a site on the wrong port would.
class WebServer {
 public:
  WebServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    ::listen(fd_, 8);
    thread_ = std::thread([this] {
      while (true) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0 || stop_) {
          if (c >= 0) ::close(c);
          return;
        }
        char buf[4096];
        (void)::recv(c, buf, sizeof buf, 0);
        const std::string page = "<html><body>hello</body></html>";
        const std::string answer = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: " +
                                   std::to_string(page.size()) + "\r\nConnection: close\r\n\r\n" + page;
        (void)::send(c, answer.data(), answer.size(), MSG_NOSIGNAL);
        ::close(c);
      }
    });
  }
  ~WebServer() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(EtcdDoctor, AHealthyEndpointPassesAndADeadOneOfTwoIsAWarningWithItsFix) {
  EtcdServer etcd;
  ASSERT_TRUE(etcd.ok()) << etcd.error();
  const std::string good = etcd.endpoint().text(), dead = "127.0.0.1:" + std::to_string(freeLoopbackPort());
  const auto t0 = Clock::now();
  const ProcessResult r = doctor(good + "," + dead);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
  const std::string g = row(r.out, "etcd " + good), d = row(r.out, "etcd " + dead);
  EXPECT_TRUE(startsWith(g, "pass    etcd 3.")) << r.out;
  EXPECT_NE(g.find(", leader "), std::string::npos) << g;
  EXPECT_NE(g.find("(this one), healthy"), std::string::npos) << g;
  EXPECT_TRUE(startsWith(d, "warn    etcd endpoint " + dead + ": connect: Connection refused")) << r.out;
  EXPECT_NE(d.find("| fix: start etcd there (or correct --rdzv-endpoint)"), std::string::npos) << d;
  EXPECT_NE(d.find("uses the other endpoints"), std::string::npos) << d;
  EXPECT_EQ(row(r.out, "node group port"), "") << "no group port with etcd: " << r.out;

  // The healthy one alone: no etcd row fails or warns.
  const ProcessResult alone = doctor(good);
  EXPECT_TRUE(startsWith(row(alone.out, "etcd " + good), "pass ")) << alone.out;
}

TEST(EtcdDoctor, ANonEtcdWebServerOrAClosedPortFailsWithWhatToDo) {
  WebServer web;
  const std::string site = "127.0.0.1:" + std::to_string(web.port());
  const std::string closed = "127.0.0.1:" + std::to_string(freeLoopbackPort());
  const ProcessResult r = doctor(site + "," + closed);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const std::string s = row(r.out, "etcd " + site), c = row(r.out, "etcd " + closed);
  EXPECT_TRUE(startsWith(s, "fail    etcd version: the answer is not JSON (not an etcd v3 gateway?)")) << r.out;
  EXPECT_NE(s.find("| fix: something else answers there: give etcd's client URL"), std::string::npos) << s;
  EXPECT_TRUE(startsWith(c, "fail    etcd endpoint " + closed + ": connect: Connection refused")) << r.out;
  EXPECT_EQ(c.find("uses the other endpoints"), std::string::npos) << "none passes: " << c;
}

// Two members, one killed: the survivor answers but follows no leader, which the job cannot use.
TEST(EtcdDoctor, AClusterWithoutQuorumFailsAndSaysToStartAMajority) {
  EtcdServer etcd(2);
  ASSERT_TRUE(etcd.ok()) << etcd.error();
  etcd.killMember(1);
  group::EtcdClient probe({etcd.endpoint(0)}, std::chrono::milliseconds(500));
  const auto end = Clock::now() + std::chrono::seconds(15);
  while (Clock::now() < end) {
    auto s = probe.memberStatus();
    if (s.ok() && s.value.leader == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  const ProcessResult r = doctor(etcd.endpointText());
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  const std::string s = row(r.out, "etcd " + etcd.endpoint(0).text());
  EXPECT_TRUE(startsWith(s, "fail    etcd 3.")) << r.out;
  EXPECT_NE(s.find(": no leader (the cluster has no quorum)"), std::string::npos) << s;
  EXPECT_NE(s.find("| fix: start a majority of the cluster's members"), std::string::npos) << s;
  EXPECT_TRUE(startsWith(row(r.out, "etcd " + etcd.endpoint(1).text()), "fail ")) << r.out;
}

TEST(EtcdDoctor, AMalformedEndpointListIsAFailedRowNamingTheEntry) {
  const ProcessResult r = doctor("127.0.0.1:2379,:5");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(startsWith(row(r.out, "node group"),
                         "fail    --rdzv-endpoint entry ':5': no host name; give HOST:PORT (an IPv6 address as [ADDR]:PORT), "
                         "e.g. 10.0.0.1:2379"))
      << r.out;
}

// describe before formation: with etcd the master is not known yet and says how it is chosen; with the TCP group it
// is master_addr. No etcd is contacted.
TEST(EtcdDescribe, TheBackendTheEndpointsAndTheMasterAsKnownBeforeFormation) {
  auto env = cleanEnv();
  env["TAEHV_JOB_TOKEN"] = "etcd-doctor-test-token-0123456789";
  const std::vector<std::string> base = {taehvRun(), "describe", "--backend", "local", "--nnodes", "2",
                                         "--master-addr", "10.1.2.3"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = base;
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), {"--", "true"});
    return runProcess(argv, env, std::chrono::seconds(30));
  };
  const std::vector<std::string> etcd = {"--rdzv-backend", "etcd", "--rdzv-endpoint", "10.0.0.1,http://10.0.0.2:2380"};
  std::vector<std::string> etcd_json = etcd;
  etcd_json.push_back("--json");
  const ProcessResult j = with(etcd_json);
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const auto g = nlohmann::json::parse(j.out).at(0).at("node_group");
  EXPECT_EQ(g.at("backend"), "etcd");
  EXPECT_EQ(g.at("etcd_endpoints"), nlohmann::json::array({"10.0.0.1:2379", "10.0.0.2:2380"}));
  EXPECT_EQ(g.at("master"), "chosen at formation");
  EXPECT_TRUE(g.at("etcd_user").is_null());
  EXPECT_EQ(g.at("etcd_tls"), false);
  EXPECT_NE(g.at("master_rule").get<std::string>().find("the first node of each formation in etcd"),
            std::string::npos);

  const ProcessResult t = with({"--json"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const auto tg = nlohmann::json::parse(t.out).at(0).at("node_group");
  EXPECT_EQ(tg.at("backend"), "tcp");
  EXPECT_EQ(tg.at("master"), "10.1.2.3");
  EXPECT_NE(tg.at("master_rule").get<std::string>().find("fixed: master_addr"), std::string::npos);

  const ProcessResult h = with(etcd);
  ASSERT_EQ(h.exit_code, 0) << h.err;
  EXPECT_NE(h.out.find("  backend = etcd at 10.0.0.1:2379,10.0.0.2:2380    <- flag --rdzv-endpoint\n"),
            std::string::npos)
      << h.out;
  EXPECT_NE(h.out.find("  master = chosen at formation    <- the first node of each formation in etcd"),
            std::string::npos)
      << h.out;
  const ProcessResult ht = with({});
  EXPECT_NE(ht.out.find("  backend = tcp"), std::string::npos) << ht.out;
  EXPECT_NE(ht.out.find("  master = 10.1.2.3    <- fixed: master_addr"), std::string::npos) << ht.out;
}

// The master chosen at formation needs no --master-addr, wherever the options stand: before `describe` (torchrun's
// option walk reads them) or after it (the sub-command's own parse). Each value says where it came from.
TEST(EtcdDescribe, NoMasterAddrIsNeededBeforeOrAfterTheSubCommandAndMasterAddrSaysWhy) {
  auto env = cleanEnv();
  env["TAEHV_JOB_TOKEN"] = "etcd-doctor-test-token-0123456789";
  const std::vector<std::string> options = {"--backend", "local", "--nnodes", "2", "--node-rank", "0",
                                            "--rdzv-backend", "etcd", "--rdzv-endpoint", "10.0.0.1:2379,10.0.0.2"};
  for (const bool after : {true, false}) {
    for (const bool json : {true, false}) {
      std::vector<std::string> argv = {taehvRun()};
      if (after) argv.push_back("describe");
      argv.insert(argv.end(), options.begin(), options.end());
      if (!after) argv.push_back("describe");
      if (json) argv.push_back("--json");
      argv.insert(argv.end(), {"--", "true"});
      const ProcessResult r = runProcess(argv, env, std::chrono::seconds(30));
      const std::string where = std::string(after ? "after" : "before") + (json ? " --json" : "");
      ASSERT_EQ(r.exit_code, 0) << where << ": " << r.err;
      const std::string source = "chosen at formation (--rdzv-backend etcd); until then the first etcd endpoint's host";
      if (json) {
        const auto w = nlohmann::json::parse(r.out).at(0);
        EXPECT_EQ(w.at("master_addr"), "10.0.0.1") << where;
        EXPECT_EQ(w.at("provenance").at("master_addr"), source) << where;
        EXPECT_EQ(w.at("node_group").at("master"), "chosen at formation") << where;
        EXPECT_NE(w.at("node_group").at("master_rule").get<std::string>().find("the first node of each formation"),
                  std::string::npos)
            << where;
      } else {
        EXPECT_NE(r.out.find("  master_addr = 10.0.0.1    <- " + source + "\n"), std::string::npos) << where << r.out;
        EXPECT_NE(r.out.find("  master = chosen at formation    <- "), std::string::npos) << where << r.out;
      }
    }
  }
  // PET_RDZV_BACKEND / PET_RDZV_ENDPOINT stand for the flags; the source names the variable.
  auto v2 = cleanEnv();
  v2["TAEHV_JOB_TOKEN"] = env["TAEHV_JOB_TOKEN"];
  v2["PET_RDZV_BACKEND"] = "etcd";
  v2["PET_RDZV_ENDPOINT"] = "10.0.0.3:2379";
  const ProcessResult e = runProcess({taehvRun(), "describe", "--backend", "local", "--nnodes", "2", "--json", "--",
                                      "true"},
                                     v2, std::chrono::seconds(30));
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_EQ(nlohmann::json::parse(e.out).at(0).at("provenance").at("master_addr"),
            "chosen at formation (env PET_RDZV_BACKEND=etcd); until then the first etcd endpoint's host");
}

// With etcd a loopback --master-addr is not the master (each formation chooses it): the descriptor row does not fail
// for it (a warning: it still picks the socket interfaces), the master is not probed, and the port must be free here
// (any node may be the next master). No etcd is needed for these rows.
TEST(EtcdDoctor, ALoopbackMasterAddrIsAWarningNotAFailureAndTheMasterIsNotProbed) {
  const ProcessResult r = doctor("127.0.0.1:" + std::to_string(freeLoopbackPort()));
  const std::string d = row(r.out, "descriptor");
  EXPECT_TRUE(startsWith(d, "warn    node 1 of 2, 1 workers on this node (world size 2), master chosen at formation "
                            "(--rdzv-backend etcd), port 29500; master_addr 127.0.0.1 (flag --master-addr) is not the "
                            "master"))
      << r.out;
  EXPECT_TRUE(startsWith(row(r.out, "master reachable"),
                         "skip    the master is chosen at formation (--rdzv-backend etcd): not known before"))
      << r.out;
  EXPECT_NE(row(r.out, "master port free"), "") << r.out;
}

}  // namespace
}  // namespace taehv::test
