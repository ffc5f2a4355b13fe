#include "commands/doctor_etcd.h"

#include <cstdio>
#include <sstream>
#include <string>

#include "taehv/group/etcd_tls.h"

namespace taehv {
namespace {

/// "3.4.23" -> (3, 4); false when it does not start with MAJOR.MINOR.
bool majorMinor(const std::string& version, int& major, int& minor) {
  return std::sscanf(version.c_str(), "%d.%d", &major, &minor) == 2;
}

std::string hexId(std::uint64_t id) {
  std::ostringstream s;
  s << std::hex << id;
  return s.str();
}

/// ", TLS verified against ..., client certificate ... accepted" for an https endpoint whose calls went through.
std::string tlsDetail(const group::EtcdEndpoint& endpoint, const group::EtcdClient& client) {
  if (!endpoint.tls) return "";
  const group::EtcdTls& tls = *endpoint.tls;
  std::string out = ", TLS verified against " + tls.caText();
  if (tls.clientSubject().empty()) return out + ", no client certificate given";
  return out + ", client certificate " + tls.clientSubject() +
         (client.clientCertificateAsked() ? " accepted" : " not asked for (etcd runs without --trusted-ca-file)");
}

/// One endpoint checked step by step; the first step that fails says what to do.
sizing::CheckResult checkEndpoint(const group::EtcdEndpoint& endpoint, std::chrono::milliseconds timeout) {
  sizing::CheckResult row;
  row.name = "etcd " + endpoint.text();
  row.status = sizing::CheckStatus::kFail;
  group::EtcdClient client({endpoint}, timeout);
  const std::string bound = std::to_string(timeout.count()) + " ms";
  Checked<std::string> version = client.version();
  if (!version.ok()) {
    row.detail = version.error;
    const bool reached = !client.localAddress().empty();
    row.fix = !client.failureFix().empty() ? client.failureFix()  // TLS: which CA, certificate or scheme
              : reached ? "something else answers there: give etcd's client URL (its --advertise-client-urls, port " +
                            std::to_string(group::kDefaultEtcdPort) + " by default), not its peer port or another "
                            "service"
                      : "start etcd there (or correct --rdzv-endpoint), and let TCP port " +
                            std::to_string(endpoint.port) + " through any firewall; each call must answer within " +
                            bound;
    return row;
  }
  int major = 0, minor = 0;
  if (!majorMinor(version.value, major, minor) || major < kMinEtcdMajor ||
      (major == kMinEtcdMajor && minor < kMinEtcdMinor)) {
    row.detail = "etcd " + version.value + " is older than " + std::to_string(kMinEtcdMajor) + "." +
                 std::to_string(kMinEtcdMinor) + " (the v3 JSON gateway under /v3/)";
    row.fix = "upgrade etcd to 3.4 or later (Debian 12's etcd-server is 3.4, Debian 13's 3.5)";
    return row;
  }
  Checked<bool> healthy = client.health();
  Checked<group::EtcdMemberStatus> status = client.memberStatus();
  if (!status.ok()) {
    row.detail = "etcd " + version.value + ": " + status.error;
    row.fix = "check the member's log; etcdctl --endpoints " + endpoint.text() + " endpoint status";
    return row;
  }
  if (status.value.leader == 0 || (healthy.ok() && !healthy.value)) {
    row.detail = "etcd " + version.value + ", member " + hexId(status.value.member_id) +
                 ": no leader (the cluster has no quorum)" + (healthy.ok() ? ", /health says unhealthy" : "");
    row.fix = "start a majority of the cluster's members (2 of 3, 3 of 5); etcdctl --endpoints " + endpoint.text() +
              " endpoint status --cluster names them";
    return row;
  }
  // A read under the group's prefix: what every node does first, and what etcd's authentication guards.
  if (Checked<std::optional<group::EtcdKeyValue>> read = client.get("/taehv/"); !read.ok()) {
    row.detail = "etcd " + version.value + ": " + read.error;
    row.fix = "give etcd's user and password on every node: TAEHV_ETCD_USER with TAEHV_ETCD_PASSWORD or "
              "TAEHV_ETCD_PASSWORD_FILE (etcdctl user get NAME shows its roles)";
    return row;
  }
  row.status = sizing::CheckStatus::kPass;
  row.detail = "etcd " + version.value + ", member " + hexId(status.value.member_id) + ", leader " +
               hexId(status.value.leader) + (status.value.leader == status.value.member_id ? " (this one)" : "") +
               (healthy.ok() ? ", healthy" : ", /health not read (" + healthy.error + ")") +
               (endpoint.credentials.user.empty() ? "" : ", user '" + endpoint.credentials.user + "' accepted") +
               tlsDetail(endpoint, client);
  return row;
}

}  // namespace

std::vector<sizing::CheckResult> etcdChecks(const std::vector<group::EtcdEndpoint>& endpoints,
                                            std::chrono::milliseconds timeout) {
  std::vector<sizing::CheckResult> rows;
  bool any_passed = false;
  for (const auto& e : endpoints) {
    rows.push_back(checkEndpoint(e, timeout));
    any_passed = any_passed || rows.back().status == sizing::CheckStatus::kPass;
  }
  if (any_passed) {
    for (auto& row : rows) {
      if (row.status != sizing::CheckStatus::kFail) continue;
      row.status = sizing::CheckStatus::kWarn;  // the group reaches the cluster through the endpoints that pass
      row.fix += " (the node group uses the other endpoints meanwhile)";
    }
  }
  return rows;
}

}  // namespace taehv
