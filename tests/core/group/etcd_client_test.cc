// The etcd v3 client (core/group/src/etcd_client.cc) against a real etcd: keys and values byte for byte, one
// winner per compare-and-swap, leases that expire and are renewed, and every failure (refused, silent)
// a bounded call with one line. The endpoint parser as a unit test.
#include "taehv/group/etcd_client.h"
#include "taehv/group/etcd_watch.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include "etcd_server.h"

namespace taehv::group {
namespace {

using Clock = std::chrono::steady_clock;
using test::EtcdServer;

/// A loopback socket that listens (the kernel accepts connections) and never answers; port 0 when it could not.
struct SilentListener {
  SilentListener() {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 4) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return;
    }
    port = ntohs(a.sin_port);
  }
  ~SilentListener() {
    if (fd >= 0) ::close(fd);
  }
  SilentListener(const SilentListener&) = delete;
  SilentListener& operator=(const SilentListener&) = delete;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  int port = 0;
};

TEST(EtcdEndpoints, ParsesListsAndSaysWhatIsWrong) {
  auto ok = parseEtcdEndpoints("10.0.0.1:2379,http://etcd-b:2380,[fd00::1]:23,etcd-c,[::1]");
  ASSERT_TRUE(ok.ok()) << ok.error;
  ASSERT_EQ(ok.value.size(), 5u);
  EXPECT_EQ(ok.value[4].host, "::1");
  EXPECT_EQ(ok.value[4].port, kDefaultEtcdPort);
  EXPECT_EQ(ok.value[0].text(), "10.0.0.1:2379");
  EXPECT_EQ(ok.value[1].text(), "etcd-b:2380");
  EXPECT_EQ(ok.value[2].host, "fd00::1");
  EXPECT_EQ(ok.value[2].port, 23);
  EXPECT_EQ(ok.value[3].port, kDefaultEtcdPort);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "is empty"},
      {"a:1,,b:2", "'a:1,,b:2': entry 2 is empty (a stray comma?)"},
      {"a:1,", "entry 2 is empty"},
      {",a:1", "entry 1 is empty"},
      {"a:1,[::1]:0", "'[::1]:0': port 0 is not 1..65535"},
      {"a:65536", "port 65536 is not 1..65535"},
      {"a:1,http://[::1", "no ']' after the IPv6 address"},
      {"a:0", "port 0 is not 1..65535"},
      {"a:70000", "port 70000"},
      {"a:x1", "'x1' is not a number"},
      {":2379", "no host name"},
      {"a:", "empty port"},
      {"fd00::1:2379", "an IPv6 address needs brackets"},
      {"https://a:2379,b:2379", "mixes https:// with http:// or bare entries"},
  };
  for (const auto& [list, says] : bad) {
    auto r = parseEtcdEndpoints(list);
    EXPECT_FALSE(r.ok()) << list;
    EXPECT_NE(r.error.find(says), std::string::npos) << list << ": " << r.error;
    EXPECT_EQ(r.error.find('\n'), std::string::npos) << r.error;
  }
}

TEST(EtcdBase64, RoundTripsEveryByte) {
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  for (std::size_t n : {0u, 1u, 2u, 3u, 4u, 255u, 256u}) {
    const std::string s = all.substr(0, n);
    EXPECT_EQ(base64Decode(base64Encode(s)), s) << n;
  }
  EXPECT_EQ(base64Encode("/a/b"), "L2EvYg==");
  EXPECT_FALSE(base64Decode("abc").has_value());
}

class EtcdClientTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(etcd_.ok()) << etcd_.error(); }
  EtcdServer etcd_;
};

TEST_F(EtcdClientTest, PutsAndReadsAPrefixByteForByteInArrivalOrder) {
  EtcdClient c({etcd_.endpoint()});
  auto v = c.version();
  ASSERT_TRUE(v.ok()) << v.error;
  EXPECT_EQ(v.value.rfind("3.", 0), 0u) << v.value;
  const std::string binary("a\0b\xff\x01", 5);
  ASSERT_TRUE(c.put("/p/x/2", binary).ok());
  ASSERT_TRUE(c.put("/p/x/1", "one").ok());
  ASSERT_TRUE(c.put("/p/y", "outside").ok());
  ASSERT_TRUE(c.put("/p/x\xff", "outside too").ok());
  auto r = c.rangePrefix("/p/x/");
  ASSERT_TRUE(r.ok()) << r.error;
  ASSERT_EQ(r.value.size(), 2u);
  EXPECT_EQ(r.value[0].key, "/p/x/1");
  EXPECT_EQ(r.value[1].key, "/p/x/2");
  EXPECT_EQ(r.value[1].value, binary);
  EXPECT_LT(r.value[1].create_revision, r.value[0].create_revision) << "2 was written first";
  auto missing = c.get("/p/none");
  ASSERT_TRUE(missing.ok()) << missing.error;
  EXPECT_FALSE(missing.value.has_value());
  EXPECT_EQ(c.localAddress(), "127.0.0.1");
}

TEST_F(EtcdClientTest, CompareAndSwapHasOneWinner) {
  EtcdClient a({etcd_.endpoint()}), b({etcd_.endpoint()});
  auto first = a.putIfModRevision("/cas", "a", 0);
  ASSERT_TRUE(first.ok()) << first.error;
  EXPECT_TRUE(first.value);
  auto second = b.putIfModRevision("/cas", "b", 0);
  ASSERT_TRUE(second.ok()) << second.error;
  EXPECT_FALSE(second.value) << "the key exists: b came second";
  auto now = b.get("/cas");
  ASSERT_TRUE(now.ok() && now.value);
  EXPECT_EQ(now.value->value, "a");
  auto stale = a.putIfModRevision("/cas", "a2", now.value->mod_revision - 1);
  ASSERT_TRUE(stale.ok());
  EXPECT_FALSE(stale.value);
  auto fresh = b.putIfModRevision("/cas", "b2", now.value->mod_revision);
  ASSERT_TRUE(fresh.ok());
  EXPECT_TRUE(fresh.value);
}

TEST_F(EtcdClientTest, ALeaseKeepsItsKeysWhileRenewedAndDropsThemWhenNot) {
  EtcdClient c({etcd_.endpoint()});
  auto lease = c.leaseGrant(std::chrono::seconds(2));
  ASSERT_TRUE(lease.ok()) << lease.error;
  ASSERT_TRUE(c.put("/lease/k", "v", lease.value).ok());
  for (int i = 0; i < 4; ++i) {  // 3 s of renewals: longer than the TTL
    std::this_thread::sleep_for(std::chrono::milliseconds(750));
    auto ttl = c.leaseKeepAlive(lease.value);
    ASSERT_TRUE(ttl.ok()) << ttl.error;
    EXPECT_GT(ttl.value, 0);
  }
  auto kept = c.get("/lease/k");
  ASSERT_TRUE(kept.ok() && kept.value.has_value());
  EXPECT_EQ(kept.value->lease, lease.value);
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));  // unrenewed past its TTL
  auto gone = c.get("/lease/k");
  ASSERT_TRUE(gone.ok());
  EXPECT_FALSE(gone.value.has_value());
  auto late = c.leaseKeepAlive(lease.value);
  ASSERT_TRUE(late.ok()) << late.error;
  EXPECT_LE(late.value, 0) << "an expired lease is not renewed";

  auto other = c.leaseGrant(std::chrono::seconds(30));
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(c.put("/lease/k2", "v", other.value).ok());
  ASSERT_TRUE(c.leaseRevoke(other.value).ok());
  auto revoked = c.get("/lease/k2");
  ASSERT_TRUE(revoked.ok());
  EXPECT_FALSE(revoked.value.has_value());
}

TEST_F(EtcdClientTest, ADeadEndpointIsSkippedForALiveOne) {
  const group::EtcdEndpoint dead{"127.0.0.1", test::freeLoopbackPort()};
  EtcdClient c({dead, etcd_.endpoint()});
  auto v = c.version();
  EXPECT_TRUE(v.ok()) << v.error;
}

TEST_F(EtcdClientTest, StatusesSayWhichMembersAnswerAndKnowALeader) {
  const group::EtcdEndpoint dead{"127.0.0.1", test::freeLoopbackPort()};
  const auto statuses = EtcdClient({etcd_.endpoint(), dead}).statuses();
  ASSERT_EQ(statuses.size(), 2u);
  EXPECT_EQ(statuses[0].error, "");
  EXPECT_TRUE(statuses[0].hasLeader()) << "a one-member cluster leads itself";
  EXPECT_EQ(statuses[0].note, "");
  EXPECT_FALSE(statuses[1].hasLeader());
  EXPECT_NE(statuses[1].error.find(dead.text()), std::string::npos) << statuses[1].error;
  // A member without a leader (the minority side of a partition) is in EtcdNetns (tests/core/group/netns).
}

TEST(EtcdClientFailures, RefusedAndSilentEndpointsAreBoundedOneLineErrors) {
  // Refused: nothing listens.
  const group::EtcdEndpoint refused{"127.0.0.1", test::freeLoopbackPort()};
  auto t0 = Clock::now();
  auto r = EtcdClient({refused}, std::chrono::milliseconds(500)).version();
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error.find(refused.text()), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("refused"), std::string::npos) << r.error;
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(1));

  // Silent: a socket that listens (the kernel accepts) but never answers.
  const SilentListener listener;
  ASSERT_GT(listener.port, 0);
  const group::EtcdEndpoint silent{"127.0.0.1", listener.port};
  t0 = Clock::now();
  auto s = EtcdClient({silent}, std::chrono::milliseconds(500)).rangePrefix("/x/");
  const auto took = Clock::now() - t0;
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.error.find("timed out after 500 ms"), std::string::npos) << s.error;
  EXPECT_GE(took, std::chrono::milliseconds(450));
  EXPECT_LT(took, std::chrono::milliseconds(1500));
}


/// What a watch handed over, as its owner would keep it: the range's keys now, and every change in order.
class WatchLog {
 public:
  EtcdWatch::Handler handler() {
    return [this](EtcdWatchUpdate u) {
      std::lock_guard<std::mutex> lock(mu_);
      if (u.snapshot) {
        ++snapshots_;
        keys_.clear();
        for (const EtcdKeyValue& kv : u.kvs) keys_[kv.key] = kv.value;
      }
      for (const EtcdWatchEvent& e : u.events) {
        changes_.push_back((e.deleted ? "delete " : "put ") + e.kv.key + (e.deleted ? "" : "=" + e.kv.value));
        if (e.deleted) keys_.erase(e.kv.key);
        else keys_[e.kv.key] = e.kv.value;
      }
      cv_.notify_all();
    };
  }
  /// Waits (at most 10 s) until `n` changes arrived; the changes so far.
  std::vector<std::string> waitChanges(std::size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return changes_.size() >= n; });
    return changes_;
  }
  std::map<std::string, std::string> keys() {
    std::lock_guard<std::mutex> lock(mu_);
    return keys_;
  }
  int snapshots() {
    std::lock_guard<std::mutex> lock(mu_);
    return snapshots_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int snapshots_ = 0;
  std::map<std::string, std::string> keys_;
  std::vector<std::string> changes_;
};

TEST_F(EtcdClientTest, AWatchSeesTheRangeThenPutsDeletesAndALeaseExpiringInOrder) {
  EtcdClient c({etcd_.endpoint()});
  ASSERT_TRUE(c.put("/w/a", "before").ok());
  ASSERT_TRUE(c.put("/w0", "outside").ok());
  WatchLog log;
  EtcdWatch watch({etcd_.endpoint()}, "/w/", etcdPrefixEnd("/w/"), log.handler());
  for (int i = 0; i < 100 && log.snapshots() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(log.keys(), (std::map<std::string, std::string>{{"/w/a", "before"}}));
  auto lease = c.leaseGrant(std::chrono::seconds(1));
  ASSERT_TRUE(lease.ok()) << lease.error;
  ASSERT_TRUE(c.put("/w/b", "1").ok());
  ASSERT_TRUE(c.put("/x", "outside").ok());
  ASSERT_TRUE(c.put("/w/b", "2").ok());
  ASSERT_TRUE(c.put("/w/l", "leased", lease.value).ok());
  auto a = c.get("/w/a");
  ASSERT_TRUE(a.ok() && a.value);
  ASSERT_TRUE(c.removeIfModRevision("/w/a", a.value->mod_revision).value);
  const auto changes = log.waitChanges(5);  // the lease's key goes within its TTL (1 s) and etcd's lease check
  EXPECT_EQ(changes, (std::vector<std::string>{"put /w/b=1", "put /w/b=2", "put /w/l=leased", "delete /w/a",
                                               "delete /w/l"}));
  EXPECT_EQ(log.keys(), (std::map<std::string, std::string>{{"/w/b", "2"}}));
  EXPECT_EQ(watch.error(), "");
  EXPECT_EQ(log.snapshots(), 1);
}

TEST_F(EtcdClientTest, AWatchResumesAfterItsMemberRestartsMissingNothingAndRepeatingNothing) {
  EtcdClient c({etcd_.endpoint()});
  WatchLog log;
  EtcdWatch watch({etcd_.endpoint()}, "/r/", etcdPrefixEnd("/r/"), log.handler());
  for (int i = 0; i < 100 && log.snapshots() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(c.put("/r/1", "a").ok());
  ASSERT_EQ(log.waitChanges(1).size(), 1u);
  ASSERT_TRUE(etcd_.restartMember(0)) << etcd_.error();
  ASSERT_TRUE(c.put("/r/2", "b").ok());
  ASSERT_TRUE(c.put("/r/1", "c").ok());
  EXPECT_EQ(log.waitChanges(3), (std::vector<std::string>{"put /r/1=a", "put /r/2=b", "put /r/1=c"}));
  EXPECT_EQ(log.snapshots(), 1) << "resumed from its revision, not read again";
}

// Member 0 of three, the only one the watch knows, is down while the keys change and etcd compacts their revisions
// away: when it is back the watch cannot resume, reads the range again (a second snapshot) and goes on.
TEST(EtcdWatchCompaction, AResumeFromACompactedRevisionReadsTheRangeAgain) {
  EtcdServer etcd(3);
  ASSERT_TRUE(etcd.ok()) << etcd.error();
  EtcdClient c({etcd.endpoint(1)});
  WatchLog log;
  EtcdWatch watch({etcd.endpoint(0)}, "/c/", etcdPrefixEnd("/c/"), log.handler(), std::chrono::milliseconds(3000));
  for (int i = 0; i < 100 && log.snapshots() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(c.put("/c/1", "a").ok());
  ASSERT_EQ(log.waitChanges(1).size(), 1u);
  etcd.killMember(0);
  // The first put waits out a new leader's election when member 0 led.
  Status put = c.put("/c/1", "b");
  for (int i = 0; i < 20 && !put.ok(); ++i) put = c.put("/c/1", "b");
  ASSERT_TRUE(put.ok()) << put.error;
  ASSERT_TRUE(c.put("/c/2", "c").ok());
  auto now = c.range("/c/", etcdPrefixEnd("/c/"));
  ASSERT_TRUE(now.ok()) << now.error;
  const std::string compact = "ETCDCTL_API=3 etcdctl --endpoints " + etcd.endpoint(1).text() + " compact " +
                              std::to_string(now.value.revision) + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(compact.c_str()), 0) << compact;
  ASSERT_TRUE(etcd.restartMember(0)) << etcd.error();
  for (int i = 0; i < 200 && log.snapshots() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(log.snapshots(), 2) << watch.error();
  EXPECT_EQ(log.keys(), (std::map<std::string, std::string>{{"/c/1", "b"}, {"/c/2", "c"}}));
  ASSERT_TRUE(c.put("/c/3", "d").ok());
  EXPECT_EQ(log.waitChanges(2).back(), "put /c/3=d");
}

TEST(EtcdWatchStop, StopIsPromptWhateverTheEndpointDoes) {
  EtcdServer etcd;
  ASSERT_TRUE(etcd.ok()) << etcd.error();
  // Quiet, refused, and silent (a socket that listens, the kernel accepts, and nothing answers).
  const SilentListener listener;
  ASSERT_GT(listener.port, 0);
  const std::vector<EtcdEndpoint> cases[] = {{etcd.endpoint()},
                                             {{"127.0.0.1", test::freeLoopbackPort()}},
                                             {{"127.0.0.1", listener.port}}};
  for (const auto& endpoints : cases) {
    WatchLog log;
    EtcdWatch watch(endpoints, "/s/", etcdPrefixEnd("/s/"), log.handler());
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    const auto t0 = Clock::now();
    watch.stop();
    EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(2500)) << endpoints.front().text();
  }
}

}  // namespace
}  // namespace taehv::group
