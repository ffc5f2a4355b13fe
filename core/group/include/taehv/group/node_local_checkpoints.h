// Checkpoints kept on node-local disks (PROTOCOL.md, "The etcd group", "Resume"): each node holds its own copy of
// each checkpoint, and the nodes of a formation agree in etcd on the newest step every one of them holds.
//
// Contract: heldCheckpointSteps() reads one folder (this node's --node-local-checkpoints), never writes; the
// agreement is a pure function of what every member reported, so every node that reads a formation derives nothing
// of its own: the proposer computes it once and the formation carries it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "taehv/checked.h"

namespace taehv::group {

/// The most steps a node reports (its newest ones): bounds the node record's size whatever checkpoint.keep is.
inline constexpr std::size_t kMaxReportedSteps = 64;

/// The steps of the complete checkpoints in `dir`, newest first, at most kMaxReportedSteps: the sub-folders named
/// `checkpoint-STEP` (STEP a whole number) that hold a `manifest.json` (taehv-train writes it last, then renames the
/// folder into place, so a folder with it is a finished save; its checksums are the trainer's to check). A folder
/// that does not exist holds none.
std::vector<std::int64_t> heldCheckpointSteps(const std::string& dir);

/// What one member of a formation holds.
struct HeldCheckpoints {
  std::string node;                  ///< how a line names it ("node 1 (host h, address a)")
  std::vector<std::int64_t> steps;   ///< heldCheckpointSteps() of its folder, any order
};

/// The step the formation resumes from: the newest one every member that holds any holds; 0 (start from scratch)
/// when no member holds any. A member holding none (a fresh node) does not count: its workers receive that
/// checkpoint from a rank that holds it (taehv-train, over the process group) and save it into its folder. Fails
/// with one line naming what each member holds when the members holding checkpoints have none in common: nothing
/// is resumed and nothing deleted.
Checked<std::int64_t> agreeResumeStep(const std::vector<HeldCheckpoints>& members);

}  // namespace taehv::group
