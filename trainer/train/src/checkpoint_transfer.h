// Node-local checkpoints on a fresh node: the agreed checkpoint sent over the process group to the nodes that hold
// none (a replacement node, an emptied disk), so that each node again holds its own copy. Private to taehv::train.
#pragma once

#include <cstdint>
#include <string>

#include "taehv/train/dist.h"

namespace taehv::train {

/// With node-local checkpoints and TAEHV_RESUME_STEP = `step` > 0 (taehv-run's node group agreed the newest step
/// every node holding checkpoints holds): a rank whose `out_dir` holds no checkpoint at all is fresh; when any rank
/// is, the lowest rank that is not sends its verified checkpoint-`step` (the files its manifest lists) to every
/// rank, and each fresh node's `writer` (its local rank 0) saves it into `out_dir` as checkpoint-`step` (atomically,
/// with a new manifest that must match the sender's), before any rank loads it. Collective: every rank calls it
/// with the same `step`; one small all-reduce when no rank is fresh. Returns the line the writer logs about what it
/// received, "" on every other rank. Throws CheckpointError (one line) when the sender's copy is missing or damaged
/// or the received files do not match the sender's manifest.
std::string receiveMissingCheckpoint(Distributed& dist, int64_t step, const std::string& out_dir, bool writer);

}  // namespace taehv::train
