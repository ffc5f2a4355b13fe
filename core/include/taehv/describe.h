// `taehv-run describe`: what each worker of this node would get, with provenance, without starting anything.
#pragma once

#include <string>
#include <vector>

#include "taehv/descriptor.h"
#include "taehv/group_plan.h"
#include "taehv/utf8.h"

namespace taehv {

/// The stable JSON form (documented in docs/launching.md, "taehv-run describe"): an array with one object per worker,
/// keys rank, local_rank, world_size, local_world_size, node_rank, nnodes, min_nnodes (integers; nnodes is MAX of an elastic --nnodes MIN:MAX), master_addr (string),
/// master_port (integer), env (object: every variable taehv-run sets, name -> value), provenance (object:
/// each of the keys above and each env name -> where its value came from) and notes (array of strings: how the
/// backend and sizing resolved ambiguous values, e.g. what a platform's WORLD_SIZE meant), node_group (object:
/// enabled, why_off, address, port, port_source, token_source "env"/"file"/"derived", token; null without `group`).
/// Pretty-printed, 2-space indent. Valid UTF-8 whatever the text in it holds (dumpValidUtf8, taehv/utf8.h): what was
/// replaced is said in `repair` (when given), for the caller to log.
std::string describeJson(const NodeDescriptor& node, const std::vector<WorkerDescriptor>& workers,
                         const GroupPlan* group = nullptr, Utf8Repair* repair = nullptr);

/// The human form: node summary and notes, the command, then per worker its fields and environment, each
/// with its source.
std::string describeText(const NodeDescriptor& node, const std::vector<WorkerDescriptor>& workers,
                         const std::vector<std::string>& command);

}  // namespace taehv
