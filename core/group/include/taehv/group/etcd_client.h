// A small etcd v3 client over the JSON gateway (HTTP/1.1 through Boost.Beast): the calls the etcd node group needs
// (etcd_node_group.h) and nothing more. Works with etcd 3.4 and 3.5 (paths under /v3/, keys and values base64).
//
// Contract: every call opens one connection and finishes within the client's timeout (connect, write and read
// together) or fails; it never hangs. Endpoints are tried in order from the last one that answered, in this process:
// a new client of the same endpoint list starts where the last call of any client of it succeeded (so a fresh
// client does not wait out the timeout at a member that is gone first); a call fails only when none answers. Errors are one line naming the endpoint(s) and what went wrong. Not thread-safe: one
// client per thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "taehv/checked.h"

namespace taehv::group {

/// The JSON gateway's port when an endpoint names none (etcd's client port).
inline constexpr int kDefaultEtcdPort = 2379;
/// Each call to etcd finishes within this (connect, request and answer).
inline constexpr std::chrono::milliseconds kEtcdCallTimeout{2000};

/// etcd's own authentication (etcdctl auth enable): the client trades them for a token at each member
/// (POST /v3/auth/authenticate) and sends it with every call. Never printed.
struct EtcdCredentials {
  std::string user;  ///< "": no authentication
  std::string password;
};

class EtcdTls;  // etcd_tls.h

struct EtcdEndpoint {
  EtcdEndpoint() = default;
  EtcdEndpoint(std::string host_, int port_) : host(std::move(host_)), port(port_) {}
  std::string host;
  int port = kDefaultEtcdPort;
  EtcdCredentials credentials;  ///< the same for every endpoint of a cluster; text() leaves them out
  bool https = false;           ///< written https://: spoken to over TLS only, with `tls`
  std::shared_ptr<const EtcdTls> tls;  ///< https: the loaded settings (useEtcdTls); the same for every endpoint
  /// "HOST:PORT" for http, "https://HOST:PORT" for https.
  std::string text() const { return (https ? "https://" : "") + host + ":" + std::to_string(port); }
};

/// "HOST:PORT[,HOST:PORT...]" (`http://` or `https://` in front of each, IPv6 as [ADDR]:PORT; no scheme is http),
/// each entry split by parseHostPort (taehv/parse.h), kDefaultEtcdPort where it names no port. Fails with one line
/// naming the bad entry: empty, what parseHostPort says (no host, a port not 1..65535), or a list that mixes
/// https:// with http:// or bare entries.
Checked<std::vector<EtcdEndpoint>> parseEtcdEndpoints(const std::string& list);

/// One key-value pair as etcd stores it.
struct EtcdKeyValue {
  std::string key;
  std::string value;
  std::int64_t create_revision = 0;  ///< the revision that created it (order of arrival)
  std::int64_t mod_revision = 0;     ///< the revision that last wrote it (compare-and-swap)
  std::int64_t lease = 0;            ///< 0: none
};

/// A range as etcd read it: its keys, and the store's revision at the read (a watch from revision + 1 misses
/// nothing after it).
struct EtcdRange {
  std::vector<EtcdKeyValue> kvs;
  std::int64_t revision = 0;
};

/// One change a watch saw: a put (the key as it is now) or a delete (`kv.key` and `kv.mod_revision`, the delete's
/// revision, only; a lease's expiry deletes its keys).
struct EtcdWatchEvent {
  bool deleted = false;
  EtcdKeyValue kv;
};

/// Where a watch stream ended (EtcdClient::watch).
struct EtcdWatchEnd {
  std::int64_t next_revision = 0;  ///< resume from here: every change before it was handed over
  bool compacted = false;          ///< etcd compacted the revisions asked for: read the range again, then watch
};

/// What one member says of itself and of its cluster (POST /v3/maintenance/status, which a member answers by itself,
/// without a quorum).
struct EtcdMemberStatus {
  EtcdEndpoint endpoint;        ///< the member asked (statuses()); memberStatus(): empty
  std::string error;            ///< statuses(): why it gave no status (unreachable, not etcd); "" when it answered
  std::string version;          ///< the member's etcd version, e.g. "3.4.23"
  std::uint64_t member_id = 0;  ///< this member's ID
  std::uint64_t leader = 0;     ///< the cluster's leader as this member sees it; 0: none (its side has no quorum)
  std::string note;             ///< etcd's own errors for the member, e.g. "etcdserver: no leader"
  /// It knows a leader: its cluster has a quorum it is part of.
  bool hasLeader() const { return leader != 0; }
};

class EtcdClient {
 public:
  explicit EtcdClient(std::vector<EtcdEndpoint> endpoints, std::chrono::milliseconds timeout = kEtcdCallTimeout);

  /// The server's version ("3.4.23", GET /version).
  Checked<std::string> version();

  /// The first endpoint's own status (its version, its ID, the leader it follows).
  Checked<EtcdMemberStatus> memberStatus();

  /// GET /health: true when the member answers and its cluster has a leader (a quorum), false when it says not.
  Checked<bool> health();

  /// Every key starting with `prefix`, in key order.
  Checked<std::vector<EtcdKeyValue>> rangePrefix(const std::string& prefix);

  /// Every key in [key, range_end), in key order, and the revision the read saw.
  Checked<EtcdRange> range(const std::string& key, const std::string& range_end);

  /// The key, or nullopt when absent.
  Checked<std::optional<EtcdKeyValue>> get(const std::string& key);

  /// Writes `value` at `key`, bound to `lease` (0: none).
  Status put(const std::string& key, const std::string& value, std::int64_t lease = 0);

  /// One transaction: writes `value` at `key` only if the key's mod_revision is still `mod_revision` (0: the key
  /// must not exist). true when written, false when another writer came first.
  /// `lease` (0: none) binds the written key to that lease.
  Checked<bool> putIfModRevision(const std::string& key, const std::string& value, std::int64_t mod_revision,
                                 std::int64_t lease = 0);

  /// One transaction: deletes `key` only if its mod_revision is still `mod_revision`. true when deleted.
  Checked<bool> removeIfModRevision(const std::string& key, std::int64_t mod_revision);

  /// Streams the changes to [key, range_end) from `start_revision` on (POST /v3/watch) to `on_events`, one call per
  /// answer of etcd, in revision order, on this thread, until `stop` is set (seen within kEtcdStopCheck), the
  /// stream breaks, or no byte came for `idle` (etcd sends a progress note when a watch is quiet, so silence means
  /// a dead connection). The first endpoint that opens the stream serves it; one whose open stream broke is asked
  /// last next time. Ends with where to resume (also when it fails: `resume` is updated as events arrive), or
  /// fails with one line.
  Status watch(const std::string& key, const std::string& range_end, EtcdWatchEnd& resume,
               const std::function<void(std::vector<EtcdWatchEvent>)>& on_events, const std::atomic<bool>& stop,
               std::chrono::milliseconds idle);

  /// A new lease of `ttl` seconds; its ID.
  Checked<std::int64_t> leaseGrant(std::chrono::seconds ttl);

  /// Renews `lease`; the TTL it now has, in seconds (0 or less: the lease had expired).
  Checked<std::int64_t> leaseKeepAlive(std::int64_t lease);

  /// Ends `lease` and deletes its keys.
  Status leaseRevoke(std::int64_t lease);

  /// Every endpoint's member status, asked one by one (POST /v3/maintenance/status, which a member answers by
  /// itself, without a quorum): tells "etcd is not there" from "etcd is there but has no quorum on this side".
  std::vector<EtcdMemberStatus> statuses();

  /// The local address of the last connection that reached etcd: the address this host reaches the cluster from,
  /// and so (one network) the one the other nodes reach it on. "" before any call succeeded.
  const std::string& localAddress() const { return local_address_; }

  /// The index (in the endpoint list) of the endpoint this client tries first: the last one that answered.
  std::size_t preferredIndex() const { return preferred_; }

  /// What to do about the last failed call when the client knows better than its caller (TLS: which CA or client
  /// certificate to give; a scheme that does not match the member's); "" otherwise.
  const std::string& failureFix() const { return failure_fix_; }

  /// Whether the member of the last TLS connection asked for a client certificate (it runs --client-cert-auth).
  bool clientCertificateAsked() const { return client_cert_asked_; }

 private:
  /// A streamed answer read line by line (one JSON object a line, as etcd's gateway streams): each line to
  /// `on_line` until it returns false, or `stop` is set; no byte for `idle` fails the exchange.
  struct LineStream {
    std::function<bool(const std::string&)> on_line;
    const std::atomic<bool>* stop = nullptr;
    std::chrono::milliseconds idle{0};
  };
  /// POSTs `body` (JSON) to `path` (GET when `body` is empty), the first endpoint that answers; the response body.
  Checked<std::string> call(const std::string& path, const std::string& body);
  /// callOne() with the endpoint's token when it has credentials: taken once per member, again when it expired.
  /// `lines`: the answer is streamed to it (the body returned is then "").
  Checked<std::string> callOne(const EtcdEndpoint& endpoint, const std::string& path, const std::string& body,
                               const LineStream* lines = nullptr);
  /// One HTTP exchange; `token` ("": none) in the Authorization header; over TLS for https endpoints.
  Checked<std::string> exchange(const EtcdEndpoint& endpoint, const std::string& path, const std::string& body,
                                const std::string& token, const LineStream* lines = nullptr);
  /// One transaction: `then` (one request of a txn's success list, JSON) only if `key`'s mod_revision is still
  /// `mod_revision`; whether it ran.
  Checked<bool> txnIfModRevision(const std::string& key, std::int64_t mod_revision, const std::string& then);
  /// A fresh token from the endpoint (POST /v3/auth/authenticate).
  Checked<std::string> authenticate(const EtcdEndpoint& endpoint);

  std::vector<EtcdEndpoint> endpoints_;
  std::chrono::milliseconds timeout_;
  /// Records that endpoint `at` answered: this client and every client made later for the same list start there.
  void answeredBy(std::size_t at);

  std::size_t preferred_ = 0;
  std::string list_key_;  ///< the endpoint list's text: the key of the process-wide "answered last" memory
  std::string local_address_;
  std::string failure_fix_;
  bool client_cert_asked_ = false;
  bool stream_opened_ = false;  ///< the last exchange got the answer's header (a stream that broke after it)
  std::map<std::string, std::string> tokens_;  ///< endpoint text -> its auth token (simple tokens are per member)
};

/// How often a watch looks at its `stop` flag while it waits for etcd.
inline constexpr std::chrono::milliseconds kEtcdStopCheck{100};

/// The first key after every key starting with `prefix` (etcd's range_end for a prefix).
std::string etcdPrefixEnd(std::string prefix);

/// Base64 (standard alphabet, padded), as the JSON gateway wants keys and values.
std::string base64Encode(const std::string& bytes);
/// Inverse of base64Encode(); nullopt when `text` is not base64.
std::optional<std::string> base64Decode(const std::string& text);

}  // namespace taehv::group
