// The node group over TCP (PROTOCOL.md): a star around node 0, Boost.Asio on one thread, HMAC-authenticated.
#pragma once

#include <memory>

#include "taehv/group/attempt_log.h"
#include "taehv/group/node_group.h"

namespace taehv::group {

/// Counters of what the leader refused, for tests and the benchmark.
struct GroupStats {
  std::uint64_t refused = 0;  ///< connections closed for any Attempt kind
  int members = 0;            ///< members joined and not left
};

class TcpNodeGroup : public NodeGroup {
 public:
  explicit TcpNodeGroup(GroupOptions options);
  ~TcpNodeGroup() override;
  TcpNodeGroup(const TcpNodeGroup&) = delete;
  TcpNodeGroup& operator=(const TcpNodeGroup&) = delete;

  Status start() override;
  Status form(std::chrono::steady_clock::time_point deadline) override;
  AgreedRanks agreedRanks() const override;
  int stopFd() const override;
  std::string stopReason() const override;
  bool leaderLost() const override;
  bool memberLost() const override;
  void requestStop(const std::string& reason) override;
  Status finish(bool success) override;
  void setLocalProgress(const std::vector<RankSummary>& ranks) override;
  std::vector<RankSummary> peersProgress() const override;

  /// The port the leader listens on (useful with port 0 in tests); 0 on a member.
  int boundPort() const;
  GroupStats stats() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

/// The group port for a master port when none is given: MASTER_PORT + 1 (MASTER_PORT - 1 for 65535).
int defaultGroupPort(int master_port);

}  // namespace taehv::group
