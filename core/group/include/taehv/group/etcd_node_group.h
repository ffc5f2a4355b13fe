// The node group with membership, formation and liveness in an etcd cluster (PROTOCOL.md, "The etcd group"):
// no node leads, so any node, node 0 included, may be lost and the rest re-form with a new master.
//
// Contract: the NodeGroup contract (node_group.h). start() checks etcd (reachable, v3 gateway, 3.4 or later),
// takes a lease of TTL --node-timeout and registers this node; its thread keeps the lease alive and watches the
// run's control keys (formation, halt, lead: EtcdWatch). One node at a time holds the lead key (bound to its
// lease, taken by a transaction when absent): it alone watches every node's record, proposes each formation (one
// etcd transaction: compare-and-swap on the formation key) and halts the formation when a member is lost or
// stopped, so the work asked of etcd grows with the node count, not its square. The formation's master is its
// first node, whose address agreedRanks().master_addr carries. A member whose lease expired is lost; this node
// losing etcd for --node-timeout stops itself (its lease is gone: the others go on without it). The lead is no
// leader in the TCP group's sense: its loss hands the lead key to another node. leaderLost() is always false.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "taehv/group/etcd_client.h"
#include "taehv/group/node_group.h"

namespace taehv::group {

struct EtcdGroupOptions {
  GroupOptions group;                   ///< node_rank orders the nodes (ties: order of arrival); leader_addr unused
  std::vector<EtcdEndpoint> endpoints;  ///< the etcd cluster
  std::string run_id;                   ///< keys live under /taehv/<run_id>/
  std::string address;                  ///< the address the other nodes reach this one on ("": the local address
                                        ///< of its connection to etcd)
  /// --node-local-checkpoints: this node's own checkpoint folder, whose complete steps its record carries; each
  /// formation agrees on the newest step every member holds (AgreedRanks::resume_step). "": shared storage.
  std::string checkpoint_dir;
};

/// The key prefix of a run: "/taehv/<run_id>/".
std::string etcdRunPrefix(const std::string& run_id);

/// The key of a run's lead for one job token (under etcdRunPrefix(), named after the token without revealing it):
/// the node holding it reads the records and proposes formations.
std::string etcdLeadKey(const std::string& run_id, const std::string& job_key);

class EtcdNodeGroup final : public NodeGroup {
 public:
  explicit EtcdNodeGroup(EtcdGroupOptions options);
  ~EtcdNodeGroup() override;

  Status start() override;
  Status form(std::chrono::steady_clock::time_point deadline) override;
  AgreedRanks agreedRanks() const override;
  int stopFd() const override;
  std::string stopReason() const override;
  bool leaderLost() const override { return false; }
  bool memberLost() const override;
  void requestStop(const std::string& reason) override;
  Status finish(bool success) override;
  void setLocalProgress(const std::vector<RankSummary>& ranks) override;
  std::vector<RankSummary> peersProgress() const override;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace taehv::group
