// TLS to etcd (core/group/src/etcd_tls.cc, etcd_client.cc): the settings reader and the loader as unit tests, and a
// real etcd serving https with --client-cert-auth, reached by the client and by two real taehv-runs. The CA and the
// certificates are made by the openssl command line in a temporary folder when the test runs (never committed).
#include "taehv/group/etcd_tls.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>

#include "etcd_server.h"
#include "run_process.h"

namespace taehv::test {
namespace {

using Clock = std::chrono::steady_clock;
using group::EtcdTls;
using group::EtcdTlsSettings;

/// A CA, a second CA nobody trusts, etcd's server certificate (subjectAltName IP:127.0.0.1), this node's client
/// certificate and key, a client certificate from the second CA, and the client key encrypted.
class TestPki {
 public:
  TestPki() : dir_(tempDir()) {
    const std::string script =
        "set -e; cd '" + dir_ + "'\n"
        "ec='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'\n"
        "openssl req -x509 $ec -keyout ca.key -out ca.pem -days 2 -subj /CN=taehv-test-ca\n"
        "openssl req -x509 $ec -keyout other-ca.key -out other-ca.pem -days 2 -subj /CN=taehv-other-ca\n"
        "openssl req $ec -keyout server.key -out server.csr -subj /CN=taehv-test-etcd\n"
        // etcd's own gateway dials its gRPC server with this certificate: it needs clientAuth too.
        "printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n' > server.ext\n"
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 "
        "-extfile server.ext\n"
        "openssl req $ec -keyout client.key -out client.csr -subj /CN=taehv-node\n"
        "printf 'extendedKeyUsage=clientAuth\\n' > client.ext\n"
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 2 "
        "-extfile client.ext\n"
        "openssl x509 -req -in client.csr -CA other-ca.pem -CAkey other-ca.key -CAcreateserial -out stranger.pem "
        "-days 2 -extfile client.ext\n"
        "openssl pkey -in client.key -aes256 -passout pass:not-typed -out client-encrypted.key\n"
        "chmod 600 *.key\n";
    const ProcessResult r = runProcess({"/bin/sh", "-c", script}, cleanEnv(), std::chrono::seconds(30));
    error_ = r.exit_code == 0 ? "" : "openssl failed (install the openssl package): " + r.err;
  }
  ~TestPki() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  const std::string& error() const { return error_; }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  /// What a node of the job sets: the CA, and the client certificate with its key.
  EtcdTlsSettings node() const { return {path("ca.pem"), path("client.pem"), path("client.key")}; }
  std::map<std::string, std::string> nodeEnv() const {
    return {{group::kEtcdCaCertEnv, path("ca.pem")}, {group::kEtcdCertEnv, path("client.pem")},
            {group::kEtcdKeyEnv, path("client.key")}};
  }
  EtcdServerTls server() const { return {path("server.pem"), path("server.key"), path("ca.pem"), true, node()}; }

 private:
  std::string dir_;
  std::string error_;
};

// ---- the settings reader and the loader (no etcd)

TEST(EtcdTlsSettings, ReadsTheThreeVariablesAndRefusesHalfAPair) {
  auto none = group::etcdTlsSettingsFromEnv({});
  ASSERT_TRUE(none.ok()) << none.error;
  EXPECT_FALSE(none.value.any());
  auto all = group::etcdTlsSettingsFromEnv(
      {{"TAEHV_ETCD_CACERT", "/c/ca.pem"}, {"TAEHV_ETCD_CERT", "/c/n.pem"}, {"TAEHV_ETCD_KEY", "/c/n.key"}});
  ASSERT_TRUE(all.ok()) << all.error;
  EXPECT_EQ(all.value.ca_file, "/c/ca.pem");
  EXPECT_EQ(all.value.cert_file, "/c/n.pem");
  EXPECT_EQ(all.value.key_file, "/c/n.key");
  const std::vector<std::pair<Env, std::string>> bad = {
      {{{"TAEHV_ETCD_CERT", "/c/n.pem"}}, "TAEHV_ETCD_CERT is set but TAEHV_ETCD_KEY is not; set both"},
      {{{"TAEHV_ETCD_KEY", "/c/n.key"}}, "TAEHV_ETCD_KEY is set but TAEHV_ETCD_CERT is not; set both"},
      {{{"TAEHV_ETCD_CACERT", ""}}, "TAEHV_ETCD_CACERT is set but empty"},
  };
  for (const auto& [env, says] : bad) {
    auto r = group::etcdTlsSettingsFromEnv(env);
    EXPECT_FALSE(r.ok());
    EXPECT_NE(r.error.find(says), std::string::npos) << r.error;
    EXPECT_EQ(r.error.find('\n'), std::string::npos) << r.error;
  }
}

TEST(EtcdTlsSettings, HttpEndpointsWithATlsVariableAreRefusedAndWithoutAreUntouched) {
  auto endpoints = group::parseEtcdEndpoints("127.0.0.1:2379,http://etcd-b:2379").value;
  ASSERT_TRUE(group::useEtcdTls({}, endpoints).ok());
  EXPECT_FALSE(endpoints[0].https);
  EXPECT_EQ(endpoints[0].tls, nullptr);
  const Status s = group::useEtcdTls({{"TAEHV_ETCD_CACERT", "/c/ca.pem"}}, endpoints);
  EXPECT_NE(s.error.find("TAEHV_ETCD_CACERT is set but the etcd endpoints are http:// (no TLS): write https://"),
            std::string::npos)
      << s.error;
}

TEST(EtcdTlsSettings, EndpointListsShareOneScheme) {
  auto https = group::parseEtcdEndpoints("https://10.0.0.1:2379,https://[fd00::1]:23");
  ASSERT_TRUE(https.ok()) << https.error;
  EXPECT_TRUE(https.value[0].https);
  EXPECT_EQ(https.value[0].text(), "https://10.0.0.1:2379");
  EXPECT_EQ(https.value[1].host, "fd00::1");
  for (const std::string list : {"https://a:1,http://b:2", "https://a:1,b:2", "a:1,https://b:2"}) {
    auto r = group::parseEtcdEndpoints(list);
    EXPECT_FALSE(r.ok()) << list;
    EXPECT_NE(r.error.find("mixes https:// with http:// or bare entries"), std::string::npos) << r.error;
  }
}

TEST(EtcdTlsSettings, LoadChecksEveryFileBeforeAnyConnection) {
  TestPki pki;
  ASSERT_EQ(pki.error(), "");
  auto good = EtcdTls::load(pki.node());
  ASSERT_TRUE(good.ok()) << good.error;
  EXPECT_EQ(good.value->clientSubject(), "CN = taehv-node");
  EXPECT_NE(good.value->caText().find("ca.pem (TAEHV_ETCD_CACERT)"), std::string::npos);
  EXPECT_TRUE(EtcdTls::load({}).ok()) << "the system trust store, no client certificate";

  auto with = [&](std::string ca, std::string cert, std::string key) {
    return EtcdTls::load({std::move(ca), std::move(cert), std::move(key)}).error;
  };
  const std::string ca = pki.path("ca.pem"), cert = pki.path("client.pem"), key = pki.path("client.key");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {with(pki.path("missing.pem"), "", ""), "TAEHV_ETCD_CACERT " + pki.path("missing.pem") + ": cannot read it"},
      {with(pki.path("client.ext"), "", ""), "TAEHV_ETCD_CACERT " + pki.path("client.ext") + ": no PEM certificate"},
      {with(ca, cert, pki.path("missing.key")), "TAEHV_ETCD_KEY " + pki.path("missing.key") + ": cannot read it"},
      {with(ca, cert, pki.path("")), "not a regular file"},
      {with(ca, pki.path("client.key"), key), "TAEHV_ETCD_CERT " + key + ": not a PEM certificate"},
      {with(ca, cert, pki.path("server.key")), "is not the key of TAEHV_ETCD_CERT " + cert + " (CN = taehv-node)"},
      {with(ca, cert, pki.path("client-encrypted.key")), "the key is encrypted"},
      {with(ca, cert, pki.path("ca.pem")), "not a PEM private key"},
  };
  for (const auto& [error, says] : bad) {
    EXPECT_NE(error.find(says), std::string::npos) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

// ---- a real etcd serving https with --client-cert-auth

/// Ports below the kernel's ephemeral range (32768-60999), 24200-26599, which no other test uses.
int testPort(int slot) { return 24200 + static_cast<int>(::getpid() % 300) * 8 + slot * 2; }

class EtcdTlsCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(pki_.error(), "");
    etcd_ = std::make_unique<EtcdServer>(1, pki_.server(), testPort(0));
    ASSERT_TRUE(etcd_->ok()) << etcd_->error();
  }
  /// "127.0.0.1:PORT" of the TLS member.
  std::string hostPort() const { return "127.0.0.1:" + std::to_string(etcd_->endpoint().port); }

  /// One taehv-run node of a 2-node job on `endpoints` with `extra` in its environment; `log`: each worker appends
  /// its "RANK WORLD_SIZE".
  std::future<ProcessResult> node(int rank, const std::string& endpoints,
                                  const std::map<std::string, std::string>& extra, const std::string& log,
                                  const std::string& run_id) const {
    auto env = cleanEnv();
    env["TAEHV_JOB_TOKEN"] = "etcd-tls-test-token-0123456789abc";
    for (const auto& [k, v] : extra) env[k] = v;
    std::vector<std::string> argv = {taehvRun(), "--backend", "local", "--nnodes", "2", "--node-rank",
                                     std::to_string(rank), "--master-addr", "127.0.0.1", "--nproc-per-node", "1",
                                     "--node-timeout", "3", "--run-id", run_id, "--rdzv-backend", "etcd",
                                     "--rdzv-endpoint", endpoints, "--", "/bin/sh", "-c",
                                     "echo \"$RANK $WORLD_SIZE\" >> " + log};
    return std::async(std::launch::async, [argv, env] { return runProcess(argv, env, std::chrono::seconds(60)); });
  }

  TestPki pki_;
  std::unique_ptr<EtcdServer> etcd_;
};

std::vector<std::string> sortedLines(const std::string& file) {
  std::ifstream in(file);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  std::sort(out.begin(), out.end());
  return out;
}

TEST_F(EtcdTlsCli, TheClientWritesAndReadsOverTlsWithItsClientCertificate) {
  group::EtcdClient client({etcd_->endpoint()});
  ASSERT_TRUE(client.put("/taehv/tls-test/k", "v").ok());
  auto got = client.get("/taehv/tls-test/k");
  ASSERT_TRUE(got.ok()) << got.error;
  ASSERT_TRUE(got.value.has_value());
  EXPECT_EQ(got.value->value, "v");
  EXPECT_TRUE(client.clientCertificateAsked()) << "etcd runs --client-cert-auth";
}

// A member that takes the connection and never answers the handshake: the call ends at its timeout, no hang.
TEST(EtcdTlsSilent, AHandshakeThatNeverAnswersEndsAtTheCallTimeout) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(testPort(2)));
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << "port " << testPort(2);
  ASSERT_EQ(::listen(fd, 4), 0);  // the kernel completes the TCP connect; nobody reads the ClientHello
  auto endpoints = group::parseEtcdEndpoints("https://127.0.0.1:" + std::to_string(testPort(2))).value;
  ASSERT_TRUE(group::useEtcdTls({}, endpoints).ok());
  group::EtcdClient client(endpoints, std::chrono::milliseconds(500));
  const auto t0 = Clock::now();
  auto v = client.version();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  ::close(fd);
  EXPECT_NE(v.error.find("TLS handshake timed out after 500 ms"), std::string::npos) << v.error;
  EXPECT_LT(seconds, 1.5);
}

TEST_F(EtcdTlsCli, TwoNodesFormAndRunTheirWorkersOverTlsWithClientCertificates) {
  const std::string dir = tempDir(), run_id = "etcd-tls-" + std::to_string(::getpid());
  const std::string endpoints = "https://" + hostPort();
  auto n0 = node(0, endpoints, pki_.nodeEnv(), dir + "/starts", run_id);
  auto n1 = node(1, endpoints, pki_.nodeEnv(), dir + "/starts", run_id);
  for (ProcessResult r : {n0.get(), n1.get()}) {
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("at " + endpoints + ", over TLS verified against CA file " + pki_.path("ca.pem") +
                         " (TAEHV_ETCD_CACERT), client certificate CN = taehv-node"),
              std::string::npos)
        << r.err;
  }
  EXPECT_EQ(sortedLines(dir + "/starts"), (std::vector<std::string>{"0 2", "1 2"}));
  if (!HasFailure()) std::filesystem::remove_all(dir);
}

// Each wrong setting ends the node at start with one line naming the cause and the fix, exit 2, no worker started.
TEST_F(EtcdTlsCli, WrongSettingsAreOneLineAndExit2WithinSeconds) {
  EtcdServer plain(1, std::nullopt, testPort(1));
  ASSERT_TRUE(plain.ok()) << plain.error();
  const std::string tls = "https://" + hostPort();
  auto env = [&](std::map<std::string, std::string> changes) {
    auto e = pki_.nodeEnv();
    for (const auto& [k, v] : changes) {
      if (v.empty()) {
        e.erase(k);
      } else {
        e[k] = v;
      }
    }
    return e;
  };
  struct Case {
    std::string name, endpoints;
    std::map<std::string, std::string> env;
    std::string says;
  };
  const std::string other_ca = pki_.path("other-ca.pem"), no_key = pki_.path("gone.key");
  const std::vector<Case> cases = {
      {"wrong CA", tls, env({{"TAEHV_ETCD_CACERT", other_ca}}),
       "etcd endpoint " + tls + ": TLS: certificate verify failed (unable to get local issuer certificate) against "
       "CA file " + other_ca + " (TAEHV_ETCD_CACERT); set TAEHV_ETCD_CACERT on every node"},
      {"no client certificate", tls, env({{"TAEHV_ETCD_CERT", ""}, {"TAEHV_ETCD_KEY", ""}}),
       "etcd endpoint " + tls + " requires a client certificate (etcd's --client-cert-auth) and this node gives "
       "none"},
      {"a client certificate from another CA", tls, env({{"TAEHV_ETCD_CERT", pki_.path("stranger.pem")}}),
       "etcd endpoint " + tls + " refused this node's client certificate TAEHV_ETCD_CERT " +
           pki_.path("stranger.pem")},
      {"unreadable key", tls, env({{"TAEHV_ETCD_KEY", no_key}}),
       "TAEHV_ETCD_KEY " + no_key + ": cannot read it (No such file or directory); check the path"},
      {"mixed schemes", tls + "," + plain.endpoint().text(), pki_.nodeEnv(),
       "mixes https:// with http:// or bare entries"},
      {"http to the TLS member", "http://" + hostPort(), {},
       "read the answer: end of stream; the member closed the connection without an answer, as one that serves "
       "only https does: write https://" + hostPort()},
      {"https to a plain member", "https://" + plain.endpoint().text(), pki_.nodeEnv(),
       "closed the connection during the TLS handshake"},
      {"a name the certificate does not list", "https://localhost:" + std::to_string(etcd_->endpoint().port),
       pki_.nodeEnv(), "TLS: the member's certificate does not name localhost (hostname mismatch); give the endpoint "
       "as an address or name the certificate lists"},
  };
  const std::string dir = tempDir();
  for (const Case& c : cases) {
    const auto t0 = Clock::now();
    ProcessResult r = node(0, c.endpoints, c.env, dir + "/starts", "etcd-tls-bad-" + std::to_string(::getpid())).get();
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    EXPECT_LT(seconds, 5.0) << c.name;
    EXPECT_EQ(r.exit_code, 2) << c.name << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.name << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.name << ": " << r.err;
    EXPECT_EQ(r.err.find("BEGIN"), std::string::npos) << "no PEM text in a message: " << r.err;
    std::printf("%s (%.1f s): %s", c.name.c_str(), seconds, r.err.c_str());
  }
  EXPECT_TRUE(sortedLines(dir + "/starts").empty()) << "no worker started";
  std::filesystem::remove_all(dir);
}

// doctor's row says TLS, against which CA, and that etcd took the client certificate; describe --json says TLS.
TEST_F(EtcdTlsCli, DoctorAndDescribeSayTlsAndTheClientCertificate) {
  auto env = cleanEnv();
  env["TAEHV_JOB_TOKEN"] = "etcd-tls-test-token-0123456789abc";
  for (const auto& [k, v] : pki_.nodeEnv()) env[k] = v;
  const std::string tls = "https://" + hostPort();
  const std::vector<std::string> common = {"--backend", "local", "--nnodes", "2", "--node-rank", "1",
                                           "--master-addr", "127.0.0.1", "--rdzv-backend", "etcd",
                                           "--rdzv-endpoint", tls};
  std::vector<std::string> doctor = {taehvRun(), "doctor", "--output-dir", "/tmp"};
  doctor.insert(doctor.end(), common.begin(), common.end());
  const ProcessResult d = runProcess(doctor, env, std::chrono::seconds(30));
  const std::size_t row = d.out.find("etcd " + tls + " ");
  ASSERT_NE(row, std::string::npos) << d.out << d.err;
  const std::string line = d.out.substr(row, d.out.find('\n', row) - row);
  EXPECT_NE(line.find(" pass "), std::string::npos) << line;
  EXPECT_NE(line.find("TLS verified against CA file " + pki_.path("ca.pem")), std::string::npos) << line;
  EXPECT_NE(line.find("client certificate CN = taehv-node accepted"), std::string::npos) << line;

  auto wrong = env;
  wrong["TAEHV_ETCD_CACERT"] = pki_.path("other-ca.pem");
  const ProcessResult w = runProcess(doctor, wrong, std::chrono::seconds(30));
  const std::size_t wrow = w.out.find("etcd " + tls + " ");
  ASSERT_NE(wrow, std::string::npos) << w.out << w.err;
  const std::string wrong_row = w.out.substr(wrow, w.out.find("\nnode group token", wrow) - wrow);
  EXPECT_NE(wrong_row.find(" fail "), std::string::npos) << wrong_row;
  EXPECT_NE(wrong_row.find("certificate verify failed"), std::string::npos) << wrong_row;
  EXPECT_NE(wrong_row.find("set TAEHV_ETCD_CACERT on every node"), std::string::npos) << wrong_row;

  std::vector<std::string> describe = {taehvRun(), "describe", "--json"};
  describe.insert(describe.end(), common.begin(), common.end());
  describe.insert(describe.end(), {"--", "true"});
  const ProcessResult j = runProcess(describe, env, std::chrono::seconds(30));
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const auto g = nlohmann::json::parse(j.out).at(0).at("node_group");
  EXPECT_EQ(g.at("etcd_tls"), true);
  EXPECT_EQ(g.at("etcd_endpoints"), nlohmann::json::array({tls}));
  EXPECT_EQ(j.out.find("BEGIN"), std::string::npos) << "no key or certificate text: " << j.out;
  describe.erase(std::find(describe.begin(), describe.end(), "--json"));
  const ProcessResult text = runProcess(describe, env, std::chrono::seconds(30));
  EXPECT_NE(text.out.find("etcd_tls = verified against CA file " + pki_.path("ca.pem") + " (TAEHV_ETCD_CACERT); "
                          "client certificate " + pki_.path("client.pem") + " (CN = taehv-node)"),
            std::string::npos)
      << text.out;

  // A member with TLS but no client CA (no --trusted-ca-file) never asks for the certificate: doctor says so.
  EtcdServerTls no_client_auth = pki_.server();
  no_client_auth.trusted_ca.clear();
  no_client_auth.client_cert_auth = false;
  EtcdServer open(1, no_client_auth, testPort(3));
  ASSERT_TRUE(open.ok()) << open.error();
  std::vector<std::string> doctor_open = doctor;
  doctor_open.back() = open.endpoint().text();
  const ProcessResult o = runProcess(doctor_open, env, std::chrono::seconds(30));
  EXPECT_NE(o.out.find("client certificate CN = taehv-node not asked for (etcd runs without --trusted-ca-file)"),
            std::string::npos)
      << o.out;
}

}  // namespace
}  // namespace taehv::test
