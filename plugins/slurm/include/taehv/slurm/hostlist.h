// SLURM hostlist expressions: expansion (`n[1-3,7]` -> n1 n2 n3 n7) and compression (the reverse).
//
// Grammar, as SLURM 22.05's own parser accepts it (checked against `scontrol show hostnames`):
//  - a list is tokens separated by commas and/or whitespace (space, tab, newline); separators inside
//    brackets separate ranges instead;
//  - a token is text with zero or more bracket groups `[r1,r2,...]`; each range is `N` or `LO-HI` in decimal;
//    the width of LO's digit string is the zero-padded width of every number of that range
//    (`linux[0000-1023]`, `n[08-10]` -> n08 n09 n10, `n[8-10]` -> n8 n9 n10);
//  - several groups multiply (`a[0-1].b[2-3]` -> a0.b2 a0.b3 a1.b2 a1.b3): the last group varies fastest,
//    then the first, the second, ...; the second-to-last slowest (SLURM's recursion order);
//  - the last group must end the token (SLURM rejects `n[1-2]x`); digits may appear anywhere in the text;
//  - ranges keep the order written (`n[3,1-2]` -> n3 n1 n2) and duplicates are kept, as SLURM does.
// Anything else is an error with a message naming the offending part. No SLURM library or tool is needed,
// so this works inside containers that do not ship SLURM's client tools.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "taehv/checked.h"

namespace taehv::slurm {

/// Most hosts one range may hold; SLURM's own limit (MAX_RANGE), so lists SLURM rejects are rejected here too.
inline constexpr std::size_t kMaxHostsPerRange = 64 * 1024;
/// Most hosts one expansion may produce (guards memory against `a[0-65535].b[0-65535]`).
inline constexpr std::size_t kMaxHostsPerList = 1024 * 1024;

/// The outcome of expanding a hostlist: the hosts in order, or an error for a user to act on (e.g.
/// "hostlist 'n[3-1]': range 3-1 goes backwards ...").
using HostlistResult = Checked<std::vector<std::string>>;

/// Expands `list` into host names, in the order SLURM gives them. An empty list is an error.
HostlistResult expandHostlist(std::string_view list);

/// Compresses `hosts` (in the given order, duplicates kept) into the short form `scontrol show hostlist`
/// prints: runs of consecutive numbers with the same prefix and compatible zero padding become ranges, and
/// neighbouring ranges with the same prefix share one bracket group (`n1,n2,n3,n5,m01` -> `n[1-3,5],m01`).
/// expandHostlist(compressHostlist(h)).hosts == h for every list of valid host names.
std::string compressHostlist(const std::vector<std::string>& hosts);

}  // namespace taehv::slurm
