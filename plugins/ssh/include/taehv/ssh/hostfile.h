// DeepSpeed-style hostfiles and --include/--exclude resource filters.
//
// Hostfile: one `HOST slots=N` per line (N >= 1 processes on that host); `#` starts a comment; blank lines are
// ignored; a host may appear once. The order of the lines is the order of node ranks.
// Filters (DeepSpeed's runner.py syntax): NODE_SPEC[@NODE_SPEC...], NODE_SPEC = HOST[:SLOT[,SLOT...]].
// --include keeps only the named hosts (all their slots, or the listed ones); --exclude removes the named hosts
// or only the listed slots; the two are mutually exclusive. Hosts left without slots drop out; the result keeps
// hostfile order.
#pragma once

#include <string>
#include <vector>

#include "taehv/checked.h"

namespace taehv::ssh {

/// One host of the job.
struct HostEntry {
  std::string host;        ///< as written in the hostfile (an ssh destination or ~/.ssh/config alias)
  std::vector<int> slots;  ///< slot indices used on this host, ascending; their count = processes there
  int slots_in_file = 0;   ///< the `slots=N` of the hostfile
  int line = 0;            ///< 1-based line in the hostfile
};

/// The hosts, or one line naming the line/host and the fix.
using HostsResult = Checked<std::vector<HostEntry>>;

/// Parses hostfile `text`; `origin` (the file name) prefixes error messages as "ORIGIN:LINE: ...".
HostsResult parseHostfile(const std::string& text, const std::string& origin);

/// Applies --include / --exclude (either may be empty; both non-empty is an error).
HostsResult filterHosts(const std::vector<HostEntry>& hosts, const std::string& include, const std::string& exclude);

}  // namespace taehv::ssh
