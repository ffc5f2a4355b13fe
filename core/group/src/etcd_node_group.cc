#include "taehv/group/etcd_node_group.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <ctime>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include <nlohmann/json.hpp>
#include <openssl/crypto.h>

#include "taehv/group/etcd_tls.h"
#include "taehv/group/etcd_watch.h"
#include "taehv/group/node_local_checkpoints.h"
#include "taehv/group/session.h"
#include "taehv/parse.h"
#include "stop_pipe.h"

namespace taehv::group {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

/// While forming, this node looks at what its watches saw at least this often (and at once when they saw a change).
constexpr std::chrono::milliseconds kFormingPoll{250};
/// Two looks at what the watches saw are at least this far apart: a lead woken by each of N records' changes
/// reads them once per gap, not N times.
constexpr std::chrono::milliseconds kTickGap{50};
/// Format of the values under the prefix; a value of another version does not verify. 2: a lead per job token
/// proposes formations and watches the members (version 1: every node read every record).
constexpr int kLayoutVersion = 2;

enum class Phase { kWaiting, kRunning, kStopped, kLeft };

const char* phaseName(Phase p) {
  switch (p) {
    case Phase::kWaiting: return "waiting";
    case Phase::kRunning: return "running";
    case Phase::kStopped: return "stopped";
    case Phase::kLeft: return "left";
  }
  return "?";
}

std::optional<Phase> parsePhase(const std::string& s) {
  for (Phase p : {Phase::kWaiting, Phase::kRunning, Phase::kStopped, Phase::kLeft}) {
    if (s == phaseName(p)) return p;
  }
  return std::nullopt;
}

/// A lease ID as etcd's tools print it (hex): the last part of a node's key.
std::string leaseHex(std::int64_t lease) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(lease));
  return buf;
}

std::string hex(std::string_view bytes) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

/// A node's registration (key nodes/<lease id>, bound to its lease).
struct Record {
  std::string id;  ///< the lease ID in hex: unique in the cluster, and the key's last part
  std::int64_t create_revision = 0;
  Phase phase = Phase::kWaiting;
  int round = 0;  ///< waiting: the formation it waits for; else the one it runs (ran)
  int rank = 0;   ///< its --node-rank (orders the nodes; ties by arrival)
  int nproc = 1;
  std::string addr, host, reason;
  std::string progress;  ///< its ranks' progress summary (progress_summary.h); "" from a node without one
  bool node_local = false;  ///< it keeps checkpoints on its own disk (--node-local-checkpoints): `checkpoints` says
  std::vector<std::int64_t> checkpoints;  ///< the steps of the complete checkpoints it holds
};

/// One node of a formation.
struct Member {
  std::string id;
  int rank = 0;
  int nproc = 1;
  std::string addr, host;
};

struct Formation {
  bool present = false;  ///< the key exists (valid or not)
  bool valid = false;
  std::int64_t mod_revision = 0;
  int round = -1;
  std::vector<Member> members;
  std::size_t ignored = 0;        ///< records the lead that proposed it found not verifying (a stranger's, say)
  std::int64_t resume_step = -1;  ///< node-local checkpoints: the step every member holds (0: none); -1: not agreed
  std::string resume_error;       ///< node-local checkpoints: why no step could be agreed ("" when one was)
};

/// A formation's end as its lead decided it (key halt): every member stops with `reason`.
struct Halt {
  bool valid = false;
  int round = -1;
  std::string reason;
  bool lost = false;  ///< a member lost (its lease expired), not one that stopped: NodeGroup::memberLost()
  std::string value;  ///< as stored
};

/// The JSON text a MAC covers and etcd stores: keys sorted (nlohmann's object), bytes that are not UTF-8 (a host
/// name, a worker's message) replaced rather than thrown on.
std::string canonical(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

/// The MAC'd JSON value: `body` plus "mac" = HMAC(job key, what | key | body).
std::string sealValue(const std::string& job_key, const std::string& what, const std::string& key, Json body) {
  body["v"] = kLayoutVersion;
  // Through text and back: what is MAC'd is exactly what a reader parses (replaced bytes included).
  body = Json::parse(canonical(body));
  const std::string mac = hex(hmacSha256(job_key, what + "|" + key + "|" + canonical(body)));
  body["mac"] = mac;
  return canonical(body);
}

/// The body of a value sealed by sealValue() under `job_key`, or nullopt (not JSON, another version, another key).
std::optional<Json> openValue(const std::string& job_key, const std::string& what, const std::string& key,
                              const std::string& value) {
  Json j = Json::parse(value, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("mac") || !j["mac"].is_string()) return std::nullopt;
  const std::string mac = j["mac"].get<std::string>();
  j.erase("mac");
  if (j.value("v", 0) != kLayoutVersion) return std::nullopt;
  const std::string want = hex(hmacSha256(job_key, what + "|" + key + "|" + canonical(j)));
  if (mac.size() != want.size() || CRYPTO_memcmp(mac.data(), want.data(), want.size()) != 0) return std::nullopt;
  return j;
}

/// Why etcd refuses this node, when the members it reaches answer but know no leader: the node is on the minority
/// side of a partition (or the cluster lost its quorum). "" when a member has a leader, or none answers (then the
/// calls' own errors say it: etcd is not there).
std::string noQuorumNote(const std::vector<EtcdMemberStatus>& statuses) {
  std::string answering, silent;
  for (const EtcdMemberStatus& m : statuses) {
    if (m.hasLeader()) return "";
    if (m.error.empty()) {
      answering += (answering.empty() ? "" : ", ") + m.endpoint.text() + (m.note.empty() ? "" : " (" + m.note + ")");
    } else {
      silent += (silent.empty() ? "" : ", ") + m.endpoint.text();
    }
  }
  if (answering.empty()) return "";
  return "no quorum on this node's side: etcd member(s) " + answering + " answer but know no leader" +
         (silent.empty() ? "" : ", " + silent + " cannot be reached") +
         ", so this node is cut off from the majority of the etcd cluster";
}

}  // namespace

std::string etcdRunPrefix(const std::string& run_id) { return "/taehv/" + run_id + "/"; }

std::string etcdLeadKey(const std::string& run_id, const std::string& job_key) {
  // Named after the token (not revealing it): a node of another job token under the same prefix leads its own
  // nodes, and does not fight this job's lead for one key.
  return etcdRunPrefix(run_id) + "lead/" + hex(hmacSha256(job_key, "lead key")).substr(0, 16);
}

class EtcdNodeGroup::Impl {
 public:
  explicit Impl(EtcdGroupOptions o) : o_(std::move(o)), client_(o_.endpoints), prefix_(etcdRunPrefix(o_.run_id)) {
    want_round_ = o_.group.round;
  }
  ~Impl() {
    halt();
    stopWatches();
  }

  Status start();
  Status form(Clock::time_point deadline);
  Status finish(bool success);
  void requestStop(const std::string& reason);

  AgreedRanks agreed() const {
    std::lock_guard<std::mutex> lock(mu_);
    return agreed_;
  }
  std::string stopReason() const {
    std::lock_guard<std::mutex> lock(mu_);
    return reason_;
  }
  bool memberLost() const {
    std::lock_guard<std::mutex> lock(mu_);
    return member_lost_;
  }
  int stopFd() const { return stop_pipe_.readFd(); }

  /// Written with the record at the next heartbeat's tick, not at once: one put per node per heartbeat at most.
  void setLocalProgress(const std::vector<RankSummary>& ranks) {
    std::lock_guard<std::mutex> lock(mu_);
    local_progress_ = ranks;
    local_progress_at_ = Clock::now();
    for (RankSummary& r : local_progress_) r.node = o_.group.node_rank;
    progress_dirty_ = true;
  }

  std::vector<RankSummary> peersProgress() const {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = Clock::now();
    std::vector<RankSummary> out;
    for (const auto& [id, heard] : peer_progress_) {
      const std::vector<RankSummary> aged = agedSince(heard.ranks, heard.at, now);
      out.insert(out.end(), aged.begin(), aged.end());
    }
    return out;
  }

 private:
  void log(LogLevel level, const std::string& line) const {
    if (o_.group.log) o_.group.log(level, "node group (etcd): " + line);
  }
  std::string endpointsText() const {
    std::string s;
    for (const auto& e : o_.endpoints) s += (s.empty() ? "" : ",") + e.text();
    return s;
  }
  /// ", over TLS verified against ... with client certificate ..." for https endpoints; "" for http.
  std::string tlsText() const {
    const EtcdEndpoint& e = o_.endpoints.front();
    if (!e.tls) return "";
    const EtcdTls& tls = *e.tls;
    return ", over TLS verified against " + tls.caText() +
           (tls.clientSubject().empty() ? "" : ", client certificate " + tls.clientSubject());
  }
  std::string recordKey(const std::string& id) const { return prefix_ + "nodes/" + id; }
  std::string formationKey() const { return prefix_ + "formation"; }
  // The control keys every node watches: [formation, nodes/) holds formation, halt and lead/.
  std::string haltKey() const { return prefix_ + "halt"; }
  std::string leadKey() const { return etcdLeadKey(o_.run_id, o_.group.job_key); }
  /// The members' progress as the lead gathered it; outside the control range (written every heartbeat).
  std::string progressKey() const { return prefix_ + "progress/" + leadKey().substr(prefix_.size() + 5); }
  std::string describe(const Member& m) const {
    return "node " + std::to_string(m.rank) + " (host " + m.host + ", address " + m.addr + ")";
  }
  std::string recordValue() const;
  std::vector<Record> readRecords(const std::vector<EtcdKeyValue>& kvs);
  Formation readFormation(const std::vector<EtcdKeyValue>& kvs);

  void loop();
  void tick();
  void keepAlive();
  void writeRecord();
  /// Starts `watch` on [key, range_end) into `mirror` unless it runs.
  void ensureWatch(std::unique_ptr<EtcdWatch>& watch, std::map<std::string, EtcdKeyValue>& mirror, bool& synced,
                   const std::string& key, const std::string& range_end);
  void stopWatches();
  /// What a watch's mirror holds now, in key order; nullopt before its first snapshot.
  std::optional<std::vector<EtcdKeyValue>> mirrored(const std::map<std::string, EtcdKeyValue>& mirror, bool synced);
  /// Whether this node holds the lead key; takes it when none holds it (validly), gives it up once stopped.
  bool lead(const std::vector<EtcdKeyValue>& control, Phase phase);
  Halt readHalt(const std::vector<EtcdKeyValue>& control);
  void formStep(const std::vector<Record>* records, const Formation& formation);
  /// The lead: a member of the formation lost or stopped halts it; the members' progress gathered in one value.
  void superviseStep(const std::vector<Record>& records, const Formation& formation, const Halt& halt);
  void writeHalt(const Formation& formation, const std::string& reason, bool lost);
  /// `now_too`: written even within a heartbeat of the last write (before a halt: the members' last word).
  void gatherProgress(const std::vector<Record>& records, const Formation& formation, bool now_too = false);
  /// A member that does not lead: the lead's gathered progress, once per heartbeat.
  /// `now_too`: read even within a heartbeat of the last read (on a halt: what every node said last).
  void readProgress(bool now_too = false);
  /// Whether `candidates` (the records waiting for the next formation) include every member of `formation` whose
  /// record is still in `records` (alive, not left): nobody else who ran in it can come back, so the lead proposes
  /// without the last call.
  bool everyoneBack(const std::vector<Record>& records, const std::vector<Record>& candidates,
                    const Formation& formation) const;
  void propose(std::vector<Record> candidates, const Formation& formation);
  /// Stops this node's part of the job with `reason` (the first reason wins); `lost`: a member was lost.
  void stopWith(const std::string& reason, bool lost = false);
  void halt();

  EtcdGroupOptions o_;
  EtcdClient client_;  ///< used by start(), then only by the thread, then by finish() once the thread ended
  const std::string prefix_;
  std::int64_t lease_ = 0;
  std::string id_;
  std::string addr_;
  StopPipe stop_pipe_;
  std::thread thread_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool quit_ = false;
  Phase phase_ = Phase::kWaiting;
  bool dirty_ = true;  ///< this node's record must be written again
  int want_round_ = 0;
  std::string reason_;
  bool member_lost_ = false;  ///< reason_ is a member lost (memberLost())
  AgreedRanks agreed_;
  std::vector<Member> formation_;  ///< the formation this node runs in
  std::string summary_;            ///< what forming saw last (for form()'s error)
  std::vector<RankSummary> local_progress_;  ///< this node's ranks (setLocalProgress)
  Clock::time_point local_progress_at_{};    ///< when they were handed over
  bool progress_dirty_ = false;    ///< local_progress_ changed since the record was last written
  struct HeardProgress {
    std::vector<RankSummary> ranks;
    Clock::time_point at{};
  };
  std::map<std::string, HeardProgress> peer_progress_;  ///< by node record id: the members' summaries

  // The watches' mirrors (under mu_): the control keys every node watches, the records the lead watches.
  std::unique_ptr<EtcdWatch> control_watch_, nodes_watch_;
  std::size_t watched_at_ = 0;  ///< client_.preferredIndex() when control_watch_ was opened (it starts there too)
  std::map<std::string, EtcdKeyValue> control_kvs_, node_kvs_;
  bool control_synced_ = false, nodes_synced_ = false;
  bool woken_ = false;  ///< a watch saw a change since the last tick

  // The thread's own.
  bool leading_ = false;
  std::int64_t lead_revision_ = 0;  ///< the lead key's mod_revision while this node holds it
  std::string halt_value_;          ///< the halt this node wrote as lead (written again if overwritten)
  int halted_round_ = -1;
  Clock::time_point last_progress_put_{};
  Clock::time_point last_progress_io_{};
  Clock::time_point last_tick_{};
  std::size_t last_invalid_ = 0;  ///< records that did not verify at the last read
  struct ReadRecord {
    std::int64_t mod_revision = 0;
    std::optional<Record> record;  ///< nullopt: it did not verify
  };
  std::map<std::string, ReadRecord> read_;  ///< readRecords(): each key's value as last checked
  std::map<std::string, Clock::time_point> heard_at_;  ///< the lead: when each member's progress last changed
  std::map<std::string, std::string> heard_text_;
  Clock::time_point last_renewed_ = Clock::now();
  Clock::time_point last_keepalive_{};
  std::string keepalive_error_;
  Clock::time_point min_since_{};
  bool min_reached_ = false;
  int last_valid_round_ = -1;
  int at_once_round_ = -1;  ///< the formation after which this node last proposed at once (logged once)
  std::set<std::string> left_;
  std::map<std::string, std::time_t> last_seen_;
  bool warned_invalid_ = false;
  bool warned_shape_ = false;
  std::string unwritten_;  ///< this node's record as it should be in etcd, when the last write failed
  std::vector<std::int64_t> held_;  ///< --node-local-checkpoints: the steps held there when start() read it
};

std::string EtcdNodeGroup::Impl::recordValue() const {
  Json body = {{"phase", phaseName(phase_)}, {"round", phase_ == Phase::kWaiting ? want_round_ : agreed_.round},
               {"rank", o_.group.node_rank}, {"nproc", o_.group.nproc}, {"addr", addr_}, {"host", o_.group.host},
               {"reason", reason_}};
  // Only when there is one: a record without it reads as before to a node of an older version.
  if (!local_progress_.empty()) {
    // Ages as of the write, not as of the hand-over: a silent rank's age keeps growing.
    body["progress"] = encodeSummary(agedSince(local_progress_, local_progress_at_, Clock::now()));
  }
  if (!o_.checkpoint_dir.empty()) body["checkpoints"] = held_;
  return sealValue(o_.group.job_key, "record", recordKey(id_), std::move(body));
}

std::vector<Record> EtcdNodeGroup::Impl::readRecords(const std::vector<EtcdKeyValue>& kvs) {
  std::vector<Record> out;
  std::size_t invalid = 0;
  const std::string nodes = prefix_ + "nodes/";
  std::map<std::string, ReadRecord> read;
  for (const EtcdKeyValue& kv : kvs) {
    if (kv.key.compare(0, nodes.size(), nodes) != 0) continue;
    // A value already checked at this revision is not checked again: the lead reads N records per look, not N MACs.
    if (const auto it = read_.find(kv.key); it != read_.end() && it->second.mod_revision == kv.mod_revision) {
      if (it->second.record) out.push_back(*it->second.record);
      else ++invalid;
      read.insert(*it);
      continue;
    }
    ReadRecord& cached = read[kv.key];
    cached.mod_revision = kv.mod_revision;
    const std::optional<Json> j = openValue(o_.group.job_key, "record", kv.key, kv.value);
    std::optional<Phase> phase;
    if (j) phase = parsePhase(j->value("phase", ""));
    // The key names the lease the record is bound to: a record copied under another node's key does not count.
    if (!j || !phase || kv.lease == 0 || kv.key.substr(nodes.size()) != leaseHex(kv.lease)) {
      ++invalid;
      continue;
    }
    Record r;
    r.id = kv.key.substr(nodes.size());
    r.create_revision = kv.create_revision;
    r.phase = *phase;
    r.round = j->value("round", 0);
    r.rank = j->value("rank", 0);
    r.nproc = j->value("nproc", 1);
    r.addr = j->value("addr", "");
    r.host = j->value("host", "");
    r.reason = j->value("reason", "");
    r.progress = j->value("progress", "");
    if (const auto c = j->find("checkpoints"); c != j->end() && c->is_array()) {
      r.node_local = true;
      for (const Json& step : *c) {
        if (step.is_number_integer() && step.get<std::int64_t>() >= 0) r.checkpoints.push_back(step.get<std::int64_t>());
      }
    }
    cached.record = r;
    out.push_back(std::move(r));
  }
  read_ = std::move(read);
  last_invalid_ = invalid;
  if (invalid > 0 && !warned_invalid_) {
    warned_invalid_ = true;
    log(LogLevel::kWarn, "ignoring " + std::to_string(invalid) + " node record(s) under " + prefix_ +
                             "nodes/ that do not verify with this node's job token (another job token, or a "
                             "stranger writing under the prefix); if this node should be in that job, give it the "
                             "same TAEHV_JOB_TOKEN / --job-token-file");
  }
  return out;
}

Formation EtcdNodeGroup::Impl::readFormation(const std::vector<EtcdKeyValue>& kvs) {
  Formation f;
  for (const EtcdKeyValue& kv : kvs) {
    if (kv.key != formationKey()) continue;
    f.present = true;
    f.mod_revision = kv.mod_revision;
    const std::optional<Json> j = openValue(o_.group.job_key, "formation", kv.key, kv.value);
    if (!j || !j->contains("members") || !(*j)["members"].is_array()) break;
    f.round = j->value("round", -1);
    f.resume_step = j->value("resume_step", std::int64_t{-1});
    f.resume_error = j->value("resume_error", "");
    f.ignored = j->value("ignored", std::size_t{0});
    for (const Json& m : (*j)["members"]) {
      if (!m.is_object()) return Formation{true, false, kv.mod_revision, -1, {}, 0, -1, ""};
      f.members.push_back(
          {m.value("id", ""), m.value("rank", 0), m.value("nproc", 1), m.value("addr", ""), m.value("host", "")});
    }
    // An old formation written back (a replay) is not taken for the current one.
    f.valid = !f.members.empty() && f.round >= last_valid_round_;
  }
  if (f.valid) last_valid_round_ = f.round;
  return f;
}

Status EtcdNodeGroup::Impl::start() {
  if (!stop_pipe_.ok()) return {"node group: cannot create its stop pipe"};
  Checked<std::string> version = client_.version();
  if (!version.ok()) {
    // TLS and scheme failures come with their own fix (which CA, which certificate, which scheme).
    if (!client_.failureFix().empty()) {
      return {"etcd at " + endpointsText() + " (--rdzv-endpoint): " + version.error + "; " + client_.failureFix()};
    }
    return {"cannot reach etcd at " + endpointsText() + " (--rdzv-endpoint): " + version.error +
            "; start etcd there or fix the endpoint list"};
  }
  int major = 0, minor = 0;
  if (std::sscanf(version.value.c_str(), "%d.%d", &major, &minor) != 2 || major != 3 || minor < 4) {
    return {"etcd at " + endpointsText() + " is version " + version.value +
            "; the etcd node group needs etcd 3.4 or later (its v3 JSON gateway under /v3/)"};
  }
  const auto ttl = std::chrono::seconds(static_cast<long>(
      std::ceil(std::chrono::duration<double>(o_.group.node_timeout).count())));
  Checked<std::int64_t> lease = client_.leaseGrant(ttl);
  if (!lease.ok()) {
    const std::string quorum = noQuorumNote(client_.statuses());
    return {"etcd at " + endpointsText() + ": cannot take a lease: " + (quorum.empty() ? lease.error : quorum)};
  }
  lease_ = lease.value;
  id_ = leaseHex(lease_);
  // Read once per formation (each formation starts a fresh group): what the workers saved until the last one ended.
  if (!o_.checkpoint_dir.empty()) held_ = heldCheckpointSteps(o_.checkpoint_dir);
  addr_ = o_.address.empty() ? client_.localAddress() : o_.address;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (Status s = client_.put(recordKey(id_), recordValue(), lease_); !s.ok()) {
      return {"etcd at " + endpointsText() + ": cannot register this node: " + s.error};
    }
    dirty_ = false;
  }
  last_renewed_ = Clock::now();
  log(LogLevel::kInfo, "etcd " + version.value + " at " + endpointsText() + tlsText() + "; this node registered as " +
                           recordKey(id_) + " (address " + addr_ + ", lease TTL " + std::to_string(ttl.count()) +
                           " s)");
  thread_ = std::thread([this] { loop(); });
  return {};
}

void EtcdNodeGroup::Impl::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!quit_) {
    lock.unlock();
    try {
      tick();
    } catch (const std::exception& e) {
      // A value of the right MAC but an unexpected shape (another taehv-run version writing under the prefix):
      // this tick is skipped, the group does not crash the launcher.
      if (!warned_shape_) log(LogLevel::kWarn, std::string("a value under ") + prefix_ + " could not be read: " + e.what());
      warned_shape_ = true;
    }
    lock.lock();
    last_tick_ = Clock::now();
    const auto period = phase_ == Phase::kWaiting ? kFormingPoll : o_.group.heartbeat;
    cv_.wait_for(lock, period, [this] { return quit_ || dirty_ || woken_; });
    // Woken by a watch: the changes that come within the gap are looked at together.
    cv_.wait_until(lock, last_tick_ + kTickGap, [this] { return quit_; });
    woken_ = false;
  }
}

void EtcdNodeGroup::Impl::keepAlive() {
  const auto now = Clock::now();
  if (now - last_keepalive_ < o_.group.heartbeat) return;
  last_keepalive_ = now;
  Checked<std::int64_t> ttl = client_.leaseKeepAlive(lease_);
  if (ttl.ok() && ttl.value > 0) {
    if (!keepalive_error_.empty()) log(LogLevel::kInfo, "etcd reached again");
    keepalive_error_.clear();
    last_renewed_ = now;
    return;
  }
  if (ttl.ok()) {
    stopWith("this node's etcd lease expired (etcd did not hear from it for --node-timeout): the other nodes go on "
             "without it; this node stops");
    return;
  }
  if (keepalive_error_.empty()) log(LogLevel::kWarn, "cannot renew this node's lease: " + ttl.error);
  keepalive_error_ = ttl.error;
  const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_renewed_);
  if (silent >= o_.group.node_timeout) {
    const std::string quorum = noQuorumNote(client_.statuses());
    const std::string secs = std::to_string(silent.count() / 1000) + " s (";
    stopWith(quorum.empty() ? "this node could not reach etcd for " + secs + ttl.error +
                                  "): its lease has expired there, so the other nodes go on without it; this node stops"
                            : "this node could not renew its etcd lease for " + secs + quorum +
                                  "): its lease has expired on the majority's side, so the other nodes go on without "
                                  "it; this node stops");
  }
}

void EtcdNodeGroup::Impl::writeRecord() {
  std::string value;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Progress alone is written at most once a heartbeat.
    const bool progress_due = progress_dirty_ && Clock::now() - last_progress_put_ >= o_.group.heartbeat;
    if (dirty_ || progress_due) {
      value = recordValue();
      dirty_ = false;
      if (progress_due || progress_dirty_) last_progress_put_ = Clock::now();
      progress_dirty_ = false;
    }
  }
  if (!value.empty()) unwritten_ = value;
  // Not written (etcd away): tried again at the next tick, not at once, so a refusing etcd is no busy loop.
  if (!unwritten_.empty() && client_.put(recordKey(id_), unwritten_, lease_).ok()) unwritten_.clear();
}

void EtcdNodeGroup::Impl::ensureWatch(std::unique_ptr<EtcdWatch>& watch, std::map<std::string, EtcdKeyValue>& mirror,
                                      bool& synced, const std::string& key, const std::string& range_end) {
  if (watch) return;
  watch = std::make_unique<EtcdWatch>(o_.endpoints, key, range_end, [this, &mirror, &synced](EtcdWatchUpdate u) {
    std::lock_guard<std::mutex> lock(mu_);
    if (u.snapshot) {
      mirror.clear();
      for (EtcdKeyValue& kv : u.kvs) mirror[kv.key] = std::move(kv);
      synced = true;
    }
    for (EtcdWatchEvent& e : u.events) {
      if (e.deleted) mirror.erase(e.kv.key);
      else mirror[e.kv.key] = std::move(e.kv);
    }
    woken_ = true;
    cv_.notify_all();
  });
}

void EtcdNodeGroup::Impl::stopWatches() {
  if (control_watch_) control_watch_->stop();
  if (nodes_watch_) nodes_watch_->stop();
}

std::optional<std::vector<EtcdKeyValue>> EtcdNodeGroup::Impl::mirrored(
    const std::map<std::string, EtcdKeyValue>& mirror, bool synced) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!synced) return std::nullopt;
  std::vector<EtcdKeyValue> out;
  out.reserve(mirror.size());
  for (const auto& [key, kv] : mirror) out.push_back(kv);
  return out;
}

void EtcdNodeGroup::Impl::tick() {
  keepAlive();
  writeRecord();
  // The client moved to another member (the one it used stopped answering: cut off, stopped). The watches, opened
  // where the client was then, may sit on that member's stream, which a cut link leaves silent until etcd notices
  // the member has no leader (about 11 s measured) or the idle bound (30 s): they are opened again where it answers.
  if (control_watch_ && client_.preferredIndex() != watched_at_) {
    log(LogLevel::kDebug, "etcd endpoint " + o_.endpoints[client_.preferredIndex()].text() +
                              " answers now: the watches are opened there");
    stopWatches();
    control_watch_.reset();
    nodes_watch_.reset();
    std::lock_guard<std::mutex> lock(mu_);
    control_synced_ = nodes_synced_ = false;
  }
  if (!control_watch_) watched_at_ = client_.preferredIndex();
  ensureWatch(control_watch_, control_kvs_, control_synced_, formationKey(), prefix_ + "nodes/");
  const std::optional<std::vector<EtcdKeyValue>> control = mirrored(control_kvs_, control_synced_);
  if (!control) return;  // the watch has not read the control keys yet
  const Formation formation = readFormation(*control);
  const Halt halted = readHalt(*control);
  Phase phase;
  {
    std::lock_guard<std::mutex> lock(mu_);
    phase = phase_;
  }
  std::optional<std::vector<Record>> records;
  if (lead(*control, phase)) {
    ensureWatch(nodes_watch_, node_kvs_, nodes_synced_, prefix_ + "nodes/", etcdPrefixEnd(prefix_ + "nodes/"));
    if (const std::optional<std::vector<EtcdKeyValue>> kvs = mirrored(node_kvs_, nodes_synced_)) {
      records = readRecords(*kvs);
    }
  } else if (nodes_watch_) {
    nodes_watch_.reset();
    std::lock_guard<std::mutex> lock(mu_);
    node_kvs_.clear();
    nodes_synced_ = false;
  }
  if (phase == Phase::kWaiting) formStep(records ? &*records : nullptr, formation);
  if (records) superviseStep(*records, formation, halted);
  int round = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (phase_ != Phase::kRunning) return;
    round = agreed_.round;
  }
  if (halted.valid && halted.round == round) {
    if (!leading_) readProgress(true);  // the lead gathered every member's last record before it halted
    stopWith(halted.reason, halted.lost);
  } else if (!leading_) {
    readProgress();
  }
}

bool EtcdNodeGroup::Impl::lead(const std::vector<EtcdKeyValue>& control, Phase phase) {
  const auto kv = std::find_if(control.begin(), control.end(), [&](const EtcdKeyValue& x) { return x.key == leadKey(); });
  std::string holder;
  if (kv != control.end()) {
    const std::optional<Json> j = openValue(o_.group.job_key, "lead", kv->key, kv->value);
    // Bound to its holder's lease, as a record is: a lead value copied under another lease does not count.
    if (j && kv->lease != 0 && j->value("id", "") == leaseHex(kv->lease)) holder = leaseHex(kv->lease);
  }
  const bool active = phase == Phase::kWaiting || phase == Phase::kRunning;
  if (holder == id_) {
    lead_revision_ = kv->mod_revision;
    if (!active) {
      // Stopped: the next formation's nodes need a lead that proposes; this one only waits for its end.
      client_.removeIfModRevision(leadKey(), lead_revision_);
      leading_ = false;
      return false;
    }
    if (!leading_) log(LogLevel::kDebug, "this node leads (" + leadKey() + ")");
    leading_ = true;
    return true;
  }
  if (leading_) log(LogLevel::kDebug, "this node no longer leads");
  leading_ = false;
  if (!holder.empty() || !active) return false;
  // No lead, or a value that does not verify (a stranger's): one transaction on what this node saw decides who
  // takes it; the watch shows the winner.
  const std::string value = sealValue(o_.group.job_key, "lead", leadKey(), Json{{"id", id_}});
  client_.putIfModRevision(leadKey(), value, kv != control.end() ? kv->mod_revision : 0, lease_);
  return false;
}

Halt EtcdNodeGroup::Impl::readHalt(const std::vector<EtcdKeyValue>& control) {
  Halt h;
  for (const EtcdKeyValue& kv : control) {
    if (kv.key != haltKey()) continue;
    h.value = kv.value;
    const std::optional<Json> j = openValue(o_.group.job_key, "halt", kv.key, kv.value);
    if (!j) break;
    h.round = j->value("round", -1);
    h.reason = j->value("reason", "");
    h.lost = j->value("lost", false);
    h.valid = h.round >= 0 && !h.reason.empty();
  }
  return h;
}

void EtcdNodeGroup::Impl::formStep(const std::vector<Record>* records, const Formation& formation) {
  const int fr = formation.valid ? formation.round : last_valid_round_;
  if (formation.valid && formation.round >= o_.group.round) {
    const auto me = std::find_if(formation.members.begin(), formation.members.end(),
                                 [&](const Member& m) { return m.id == id_; });
    if (me != formation.members.end()) {
      AgreedRanks a;
      std::vector<int> counts;
      std::int64_t world = 0;
      for (const Member& m : formation.members) {
        if (&m == &*me) a.first_rank = static_cast<int>(std::min<std::int64_t>(world, INT_MAX));
        world += m.nproc;
        counts.push_back(m.nproc);
      }
      a.world_size = static_cast<int>(std::min<std::int64_t>(world, INT_MAX));
      a.counts = formatCounts(counts);
      a.node_rank = static_cast<int>(me - formation.members.begin());
      a.nnodes = static_cast<int>(formation.members.size());
      a.round = formation.round;
      a.master_addr = formation.members.front().addr;
      a.resume_step = formation.resume_step;
      if (formation.ignored > 0 && !warned_invalid_) {
        warned_invalid_ = true;
        log(LogLevel::kWarn, "the lead ignored " + std::to_string(formation.ignored) + " node record(s) under " +
                                 prefix_ + "nodes/ that do not verify with this node's job token (another job "
                                 "token, or a stranger writing under the prefix)");
      }
      std::string names;
      for (const Member& m : formation.members) names += (names.empty() ? "" : ", ") + describe(m);
      log(LogLevel::kInfo, "formation " + std::to_string(a.round) + ": " + names + "; master " +
                               describe(formation.members.front()));
      if (!formation.resume_error.empty()) {
        stopWith("formation " + std::to_string(a.round) + ": " + formation.resume_error);
        return;
      }
      std::lock_guard<std::mutex> lock(mu_);
      agreed_ = a;
      formation_ = formation.members;
      phase_ = Phase::kRunning;
      dirty_ = true;
      cv_.notify_all();
      return;
    }
  }
  const int want = std::max(o_.group.round, fr + 1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (want != want_round_) {
      want_round_ = want;
      dirty_ = true;
    }
  }
  if (!records) {
    // Only the lead reads the records and proposes; the others wait for its formation (or for the lead key).
    std::lock_guard<std::mutex> lock(mu_);
    summary_ = "waiting under " + prefix_ + " for the lead node to propose a formation (" + leadKey() + ")";
    return;
  }
  // A formation still running (a member of it alive and not yet stopped) is not replaced: its nodes first stop.
  bool busy = false;
  std::vector<Record> candidates;
  for (const Record& r : *records) {
    const bool member = std::any_of(formation.members.begin(), formation.members.end(),
                                    [&](const Member& m) { return m.id == r.id; });
    if (formation.valid && member && r.round <= fr && (r.phase == Phase::kRunning || r.phase == Phase::kWaiting)) {
      busy = true;
    }
    if (r.phase == Phase::kWaiting && r.round > fr) candidates.push_back(r);
  }
  const int min_nodes = o_.group.min_nnodes > 0 ? o_.group.min_nnodes : o_.group.nnodes;
  const bool mine = std::any_of(candidates.begin(), candidates.end(), [&](const Record& r) { return r.id == id_; });
  {
    std::lock_guard<std::mutex> lock(mu_);
    summary_ = std::to_string(candidates.size()) + " node(s) waiting under " + prefix_ + " of the " +
               std::to_string(min_nodes) + " needed" + (busy ? " (formation " + std::to_string(fr) + " still running)" : "");
  }
  if (busy || !mine || static_cast<int>(candidates.size()) < min_nodes) {
    min_reached_ = false;
    return;
  }
  if (!min_reached_) {
    min_reached_ = true;
    min_since_ = Clock::now();
  }
  if (static_cast<int>(candidates.size()) < o_.group.nnodes) {
    if (formation.valid && everyoneBack(*records, candidates, formation)) {
      if (at_once_round_ != formation.round) {
        log(LogLevel::kInfo, "proposing at once: every live member of formation " + std::to_string(formation.round) +
                                 " is waiting (" + std::to_string(candidates.size()) + " node(s); no last call)");
      }
      at_once_round_ = formation.round;
    } else if (Clock::now() - min_since_ < kLastCall) {
      return;
    }
  }
  propose(std::move(candidates), formation);
}

bool EtcdNodeGroup::Impl::everyoneBack(const std::vector<Record>& records, const std::vector<Record>& candidates,
                                       const Formation& formation) const {
  // A node registers afresh (a new lease, a new record) for each formation, so a member of the last one is known
  // again by what it says of itself: its --node-rank, host and address. Several alike (one machine, no ranks) are
  // counted, not told apart. A mismatch errs towards the last call, never towards leaving a survivor out.
  std::multiset<std::tuple<int, std::string, std::string>> waiting;
  for (const Record& c : candidates) waiting.insert({c.rank, c.host, c.addr});
  for (const Member& m : formation.members) {
    const auto r = std::find_if(records.begin(), records.end(), [&](const Record& x) { return x.id == m.id; });
    // Its record gone (its lease expired: lost) or left (its workers finished): it does not come back.
    if (r == records.end() || r->phase == Phase::kLeft) continue;
    const auto back = waiting.find({m.rank, m.host, m.addr});
    if (back == waiting.end()) return false;
    waiting.erase(back);
  }
  return true;
}

void EtcdNodeGroup::Impl::propose(std::vector<Record> candidates, const Formation& formation) {
  std::stable_sort(candidates.begin(), candidates.end(), [](const Record& a, const Record& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.create_revision < b.create_revision;
  });
  if (static_cast<int>(candidates.size()) > o_.group.nnodes) candidates.resize(static_cast<std::size_t>(o_.group.nnodes));
  int round = 0;
  Json members = Json::array();
  bool node_local = false;
  std::vector<HeldCheckpoints> held;
  for (const Record& r : candidates) {
    round = std::max(round, r.round);
    members.push_back({{"id", r.id}, {"rank", r.rank}, {"nproc", r.nproc}, {"addr", r.addr}, {"host", r.host}});
    node_local = node_local || r.node_local;
    held.push_back({describe({r.id, r.rank, r.nproc, r.addr, r.host}), r.checkpoints});
  }
  Json body{{"round", round}, {"members", members}};
  if (last_invalid_ > 0) body["ignored"] = last_invalid_;
  // Node-local checkpoints: the formation fixes the step its workers resume from, in the same transaction.
  if (node_local) {
    const Checked<std::int64_t> step = agreeResumeStep(held);
    if (step.ok()) body["resume_step"] = step.value;
    else body["resume_error"] = step.error;
  }
  const std::string value = sealValue(o_.group.job_key, "formation", formationKey(), std::move(body));
  // One transaction decides: the first proposal made against the formation key as this node read it wins.
  Checked<bool> won = client_.putIfModRevision(formationKey(), value, formation.present ? formation.mod_revision : 0);
  if (won.ok() && won.value) {
    log(LogLevel::kDebug, "proposed formation " + std::to_string(round) + " (" + std::to_string(candidates.size()) +
                              " nodes), and etcd took it");
  }
}

void EtcdNodeGroup::Impl::superviseStep(const std::vector<Record>& records, const Formation& formation,
                                         const Halt& halted) {
  if (!formation.valid) return;
  if (halted.valid && halted.round >= formation.round) {
    // Ended already. Written back if a stranger overwrote it, so every member still reads why.
    if (halted_round_ == formation.round && halted.value != halt_value_) client_.put(haltKey(), halt_value_);
    return;
  }
  if (halted_round_ == formation.round) {
    client_.put(haltKey(), halt_value_);
    return;
  }
  const std::time_t now = std::time(nullptr);
  for (const Member& m : formation.members) {
    if (left_.count(m.id)) continue;
    const auto r = std::find_if(records.begin(), records.end(), [&](const Record& x) { return x.id == m.id; });
    if (r == records.end()) {
      std::string seen;
      if (const auto it = last_seen_.find(m.id); it != last_seen_.end()) {
        char buf[32];
        std::strftime(buf, sizeof buf, "%H:%M:%S", std::localtime(&it->second));
        seen = "; its record was last read at " + std::string(buf);
      }
      gatherProgress(records, formation, true);
      writeHalt(formation, describe(m) + " lost: its etcd lease expired (not renewed for --node-timeout " +
                               std::to_string(o_.group.node_timeout.count() / 1000) + " s" + seen + ")",
                true);
      return;
    }
    last_seen_[m.id] = now;
    if (r->phase == Phase::kLeft) left_.insert(m.id);
    if (r->phase == Phase::kStopped) {
      gatherProgress(records, formation, true);
      writeHalt(formation, describe(m) + " stopped" + (r->reason.empty() ? std::string() : ": " + r->reason), false);
      return;
    }
  }
  gatherProgress(records, formation);
}

void EtcdNodeGroup::Impl::writeHalt(const Formation& formation, const std::string& reason, bool lost) {
  halted_round_ = formation.round;
  halt_value_ = sealValue(o_.group.job_key, "halt", haltKey(),
                          Json{{"round", formation.round}, {"reason", reason}, {"lost", lost}});
  // Not written (etcd away): the next tick writes it again (superviseStep).
  client_.put(haltKey(), halt_value_);
  int round = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (phase_ == Phase::kRunning) round = agreed_.round;
  }
  if (round == formation.round) stopWith(reason, lost);
}

void EtcdNodeGroup::Impl::gatherProgress(const std::vector<Record>& records, const Formation& formation,
                                          bool now_too) {
  const auto now = Clock::now();
  Json nodes = Json::array();
  for (const Member& m : formation.members) {
    const auto r = std::find_if(records.begin(), records.end(), [&](const Record& x) { return x.id == m.id; });
    if (r == records.end() || r->progress.empty()) continue;
    // A record's ages are as of its write; they grow from when this node saw it change.
    if (heard_text_[m.id] != r->progress) {
      heard_text_[m.id] = r->progress;
      heard_at_[m.id] = now;
    }
    Checked<std::vector<RankSummary>> heard = decodeSummary(r->progress);
    if (!heard.ok()) continue;
    for (RankSummary& x : heard.value) x.node = m.rank;  // the record's MAC vouches for its node
    if (m.id != id_) {
      std::lock_guard<std::mutex> lock(mu_);
      peer_progress_[m.id] = {heard.value, heard_at_[m.id]};
    }
    nodes.push_back(
        {{"id", m.id}, {"rank", m.rank}, {"progress", encodeSummary(agedSince(heard.value, heard_at_[m.id], now))}});
  }
  // One value for every member to read, once a heartbeat: N small reads, not N x N records.
  if (nodes.empty() || (!now_too && now - last_progress_io_ < o_.group.heartbeat)) return;
  last_progress_io_ = now;
  client_.put(progressKey(), sealValue(o_.group.job_key, "progress", progressKey(),
                                       Json{{"round", formation.round}, {"nodes", nodes}}));
}

void EtcdNodeGroup::Impl::readProgress(bool now_too) {
  const auto now = Clock::now();
  if (!now_too && now - last_progress_io_ < o_.group.heartbeat) return;
  last_progress_io_ = now;
  Checked<std::optional<EtcdKeyValue>> kv = client_.get(progressKey());
  if (!kv.ok() || !kv.value) return;
  const std::optional<Json> j = openValue(o_.group.job_key, "progress", kv.value->key, kv.value->value);
  std::vector<Member> members;
  int round = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    members = formation_;
    round = agreed_.round;
  }
  if (!j || j->value("round", -1) != round || !j->contains("nodes") || !(*j)["nodes"].is_array()) return;
  for (const Json& n : (*j)["nodes"]) {
    const std::string id = n.value("id", "");
    const auto m = std::find_if(members.begin(), members.end(), [&](const Member& x) { return x.id == id; });
    if (id == id_ || m == members.end()) continue;
    Checked<std::vector<RankSummary>> heard = decodeSummary(n.value("progress", ""));
    if (!heard.ok()) continue;
    for (RankSummary& x : heard.value) x.node = m->rank;
    std::lock_guard<std::mutex> lock(mu_);
    peer_progress_[id] = {std::move(heard.value), now};
  }
}

void EtcdNodeGroup::Impl::stopWith(const std::string& reason, bool lost) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!reason_.empty()) return;
  reason_ = reason;
  member_lost_ = lost;
  if (phase_ != Phase::kLeft) phase_ = Phase::kStopped;
  dirty_ = true;
  stop_pipe_.raise();
  cv_.notify_all();
}

void EtcdNodeGroup::Impl::requestStop(const std::string& reason) {
  log(LogLevel::kInfo, "stopping every node: " + reason);
  stopWith(reason);
}

Status EtcdNodeGroup::Impl::form(Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_until(lock, deadline, [this] { return phase_ != Phase::kWaiting || !reason_.empty(); });
  if (!reason_.empty()) return {reason_};
  if (phase_ == Phase::kRunning) return {};
  return {"the group did not form in etcd: " + (summary_.empty() ? std::string("no answer from etcd") : summary_)};
}

void EtcdNodeGroup::Impl::halt() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

Status EtcdNodeGroup::Impl::finish(bool success) {
  halt();
  stopWatches();
  // The next formation's nodes take the lead at once rather than when this lease runs out.
  if (leading_) client_.removeIfModRevision(leadKey(), lead_revision_);
  std::string value;
  {
    std::lock_guard<std::mutex> lock(mu_);
    phase_ = success && reason_.empty() ? Phase::kLeft : Phase::kStopped;
    value = recordValue();
  }
  // The record stays until its lease runs out, so every other node reads "left" or "stopped" (and why) rather
  // than a node that vanished.
  if (lease_ != 0) {
    if (Status s = client_.put(recordKey(id_), value, lease_); !s.ok()) {
      log(LogLevel::kWarn, "could not write this node's end to etcd: " + s.error);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  return {reason_};
}

EtcdNodeGroup::EtcdNodeGroup(EtcdGroupOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
EtcdNodeGroup::~EtcdNodeGroup() = default;
Status EtcdNodeGroup::start() { return impl_->start(); }
Status EtcdNodeGroup::form(std::chrono::steady_clock::time_point deadline) { return impl_->form(deadline); }
AgreedRanks EtcdNodeGroup::agreedRanks() const { return impl_->agreed(); }
int EtcdNodeGroup::stopFd() const { return impl_->stopFd(); }
std::string EtcdNodeGroup::stopReason() const { return impl_->stopReason(); }
bool EtcdNodeGroup::memberLost() const { return impl_->memberLost(); }
void EtcdNodeGroup::requestStop(const std::string& reason) { impl_->requestStop(reason); }
Status EtcdNodeGroup::finish(bool success) { return impl_->finish(success); }
void EtcdNodeGroup::setLocalProgress(const std::vector<RankSummary>& ranks) { impl_->setLocalProgress(ranks); }
std::vector<RankSummary> EtcdNodeGroup::peersProgress() const { return impl_->peersProgress(); }

}  // namespace taehv::group
