// etcd's own authentication passed through (TAEHV_ETCD_USER with TAEHV_ETCD_PASSWORD or TAEHV_ETCD_PASSWORD_FILE):
// a real etcd with a root user and `etcdctl auth enable`; the client with the right, a wrong and no password, and two
// real taehv-runs forming the etcd group with the right password, or ending with one line and exit 2 with a wrong one.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include "etcd_server.h"
#include "taehv/group/etcd_watch.h"
#include "run_process.h"

namespace taehv::test {
namespace {

using Clock = std::chrono::steady_clock;
const std::string kPassword = "etcd-auth-test-secret";

/// A one-member etcd with user root (password kPassword) and authentication on, through the real etcdctl.
class EtcdAuth : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(etcd_.ok()) << etcd_.error();
    const std::string at = etcd_.endpoint().text();
    const auto env = cleanEnv();
    const std::string etcdctl = "etcdctl --endpoints " + at + " ";  // found on PATH by the shell, as etcd is
    const auto add = runProcess({"/bin/sh", "-c", etcdctl + "user add root --new-user-password=" + kPassword}, env,
                                std::chrono::seconds(20));
    ASSERT_EQ(add.exit_code, 0) << add.out << add.err;
    const auto on = runProcess({"/bin/sh", "-c", etcdctl + "auth enable"}, env, std::chrono::seconds(20));
    ASSERT_EQ(on.exit_code, 0) << on.out << on.err;
  }
  group::EtcdEndpoint endpointAs(const std::string& user, const std::string& password) const {
    group::EtcdEndpoint e = etcd_.endpoint();
    e.credentials = {user, password};
    return e;
  }
  EtcdServer etcd_;
};

TEST_F(EtcdAuth, TheClientWritesWithTheRightPasswordAndSaysWhyWithAWrongOrNone) {
  group::EtcdClient right({endpointAs("root", kPassword)});
  ASSERT_TRUE(right.put("/taehv/auth-test/k", "v").ok());
  auto got = right.get("/taehv/auth-test/k");
  ASSERT_TRUE(got.ok()) << got.error;
  ASSERT_TRUE(got.value.has_value());
  EXPECT_EQ(got.value->value, "v");

  group::EtcdClient wrong({endpointAs("root", "not-the-password")});
  const Status w = wrong.put("/taehv/auth-test/k", "x");
  EXPECT_NE(w.error.find("authentication failed, invalid user ID or password"), std::string::npos) << w.error;
  EXPECT_NE(w.error.find("as user 'root'"), std::string::npos) << w.error;
  EXPECT_EQ(w.error.find("not-the-password"), std::string::npos) << "the password is never printed: " << w.error;

  group::EtcdClient none({etcd_.endpoint()});
  const Status n = none.put("/taehv/auth-test/k", "x");
  EXPECT_NE(n.error.find("has authentication enabled: set TAEHV_ETCD_USER and TAEHV_ETCD_PASSWORD"),
            std::string::npos)
      << n.error;
  EXPECT_EQ(right.get("/taehv/auth-test/k").value->value, "v") << "neither stranger wrote";
}

// A watch takes its token as a call does (the same client code): it sees a change; without credentials it says why.
TEST_F(EtcdAuth, AWatchWithTheRightPasswordSeesChangesAndWithoutOneSaysWhy) {
  std::mutex mu;
  std::vector<std::string> seen;
  bool snapshot = false;
  group::EtcdWatch watch({endpointAs("root", kPassword)}, "/taehv/auth-watch/", group::etcdPrefixEnd("/taehv/auth-watch/"),
                         [&](group::EtcdWatchUpdate u) {
                           std::lock_guard<std::mutex> lock(mu);
                           snapshot = snapshot || u.snapshot;
                           for (const auto& e : u.events) seen.push_back(e.kv.key + "=" + e.kv.value);
                         });
  const auto wait = [&](auto done) {
    for (int i = 0; i < 200; ++i) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (done()) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  };
  wait([&] { return snapshot; });
  group::EtcdClient right({endpointAs("root", kPassword)});
  ASSERT_TRUE(right.put("/taehv/auth-watch/a", "1").ok());
  wait([&] { return !seen.empty(); });
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(seen, std::vector<std::string>{"/taehv/auth-watch/a=1"}) << watch.error();
  }
  group::EtcdWatch none({etcd_.endpoint()}, "/taehv/auth-watch/", group::etcdPrefixEnd("/taehv/auth-watch/"),
                        [](group::EtcdWatchUpdate) {});
  for (int i = 0; i < 100 && none.error().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_NE(none.error().find("has authentication enabled"), std::string::npos) << none.error();
}

/// Two nodes of one job on the etcd group with `env_extra` for etcd's credentials; each worker appends a line.
std::vector<ProcessResult> twoNodes(const std::string& endpoints, const std::map<std::string, std::string>& extra,
                                    const std::string& log) {
  auto env = cleanEnv();
  env["TAEHV_JOB_TOKEN"] = "etcd-auth-test-token-0123456789abc";
  for (const auto& [k, v] : extra) env[k] = v;
  const std::string run_id = "etcd-auth-" + std::to_string(::getpid());
  std::vector<std::future<ProcessResult>> nodes;
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<std::string> argv = {taehvRun(), "--backend", "local", "--nnodes", "2", "--node-rank",
                                     std::to_string(rank), "--master-addr", "127.0.0.1", "--nproc-per-node", "1",
                                     "--node-timeout", "3", "--run-id", run_id, "--rdzv-backend", "etcd",
                                     "--rdzv-endpoint", endpoints, "--", "/bin/sh", "-c",
                                     "echo \"$RANK $WORLD_SIZE\" >> " + log};
    nodes.push_back(std::async(std::launch::async, [argv, env] {
      return runProcess(argv, env, std::chrono::seconds(60));
    }));
  }
  std::vector<ProcessResult> out;
  for (auto& n : nodes) out.push_back(n.get());
  return out;
}

std::vector<std::string> lines(const std::string& file) {
  std::ifstream in(file);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  std::sort(out.begin(), out.end());
  return out;
}

TEST_F(EtcdAuth, TwoNodesFormWithTheRightPasswordAndAWrongOneIsOneLineAndExit2) {
  const std::string dir = tempDir();
  const std::string password_file = dir + "/etcd-password";
  {
    std::ofstream f(password_file);
    f << kPassword << "\n";
  }
  std::filesystem::permissions(password_file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  const auto right = twoNodes(etcd_.endpointText(), {{"TAEHV_ETCD_USER", "root"}, {"TAEHV_ETCD_PASSWORD", kPassword}},
                              dir + "/env");
  for (const auto& r : right) EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(lines(dir + "/env"), (std::vector<std::string>{"0 2", "1 2"}));

  const auto from_file = twoNodes(etcd_.endpointText(),
                                  {{"TAEHV_ETCD_USER", "root"}, {"TAEHV_ETCD_PASSWORD_FILE", password_file}},
                                  dir + "/file");
  for (const auto& r : from_file) EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(lines(dir + "/file"), (std::vector<std::string>{"0 2", "1 2"}));

  const auto t0 = Clock::now();
  const auto wrong = twoNodes(etcd_.endpointText(), {{"TAEHV_ETCD_USER", "root"}, {"TAEHV_ETCD_PASSWORD", "nope"}},
                              dir + "/wrong");
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
  for (const auto& r : wrong) {
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("authentication failed, invalid user ID or password"), std::string::npos) << r.err;
    std::printf("wrong password: %s", r.err.c_str());
  }
  EXPECT_TRUE(lines(dir + "/wrong").empty()) << "no worker started";

  const auto no_password = twoNodes(etcd_.endpointText(), {{"TAEHV_ETCD_USER", "root"}}, dir + "/none");
  for (const auto& r : no_password) {
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("TAEHV_ETCD_USER 'root' has no password: set TAEHV_ETCD_PASSWORD or "
                         "TAEHV_ETCD_PASSWORD_FILE"),
              std::string::npos)
        << r.err;
  }
  if (!HasFailure()) std::filesystem::remove_all(dir);
}

// doctor reads under the group's prefix as the launch would: the right password passes, a wrong one or none fails
// with etcd's reason and the variables to set.
TEST_F(EtcdAuth, DoctorSaysWhetherEtcdTakesThisNodesCredentials) {
  const std::string at = etcd_.endpoint().text();
  auto doctor = [&](const std::map<std::string, std::string>& extra) {
    auto env = cleanEnv();
    env["TAEHV_JOB_TOKEN"] = "etcd-auth-test-token-0123456789abc";
    for (const auto& [k, v] : extra) env[k] = v;
    const auto r = runProcess({taehvRun(), "doctor", "--backend", "local", "--nnodes", "2", "--node-rank", "1",
                               "--master-addr", "127.0.0.1", "--output-dir", "/tmp", "--rdzv-backend", "etcd",
                               "--rdzv-endpoint", at}, env, std::chrono::seconds(30));
    const std::size_t row = r.out.find("etcd " + at + " ");
    return row == std::string::npos ? r.out : r.out.substr(row, r.out.find("\nnode group token", row) - row);
  };
  const std::string right = doctor({{"TAEHV_ETCD_USER", "root"}, {"TAEHV_ETCD_PASSWORD", kPassword}});
  EXPECT_NE(right.find(" pass "), std::string::npos) << right;
  EXPECT_NE(right.find("user 'root' accepted"), std::string::npos) << right;
  const std::string wrong = doctor({{"TAEHV_ETCD_USER", "root"}, {"TAEHV_ETCD_PASSWORD", "nope"}});
  EXPECT_NE(wrong.find(" fail "), std::string::npos) << wrong;
  EXPECT_NE(wrong.find("authentication failed, invalid user ID or password"), std::string::npos) << wrong;
  EXPECT_NE(wrong.find("fix:    give etcd's user and password on every node"), std::string::npos) << wrong;
  const std::string none = doctor({});
  EXPECT_NE(none.find(" fail "), std::string::npos) << none;
  EXPECT_NE(none.find("has authentication enabled: set TAEHV_ETCD_USER"), std::string::npos) << none;
}

}  // namespace
}  // namespace taehv::test
