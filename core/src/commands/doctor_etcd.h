// doctor's checks of the etcd cluster that holds the node group (--rdzv-backend etcd).
#pragma once

#include <chrono>
#include <vector>

#include "taehv/group/etcd_client.h"
#include "taehv/sizing/doctor.h"

namespace taehv {

/// The oldest etcd the group works with: the v3 JSON gateway under /v3/ (3.3 served it under /v3beta/).
inline constexpr int kMinEtcdMajor = 3;
inline constexpr int kMinEtcdMinor = 4;

/// One row per endpoint: reached within `timeout` per call, an etcd v3 JSON gateway (GET /version), its version at
/// least 3.4, healthy (GET /health), following a leader (POST /v3/maintenance/status) and letting this node read
/// (etcd's authentication, when on, takes the node's credentials). A failing endpoint is a
/// warning while another endpoint passes (the group uses the others) and a failure when none does; each names its fix.
std::vector<sizing::CheckResult> etcdChecks(const std::vector<group::EtcdEndpoint>& endpoints,
                                            std::chrono::milliseconds timeout = group::kEtcdCallTimeout);

}  // namespace taehv
