// Sharded optimizer checkpoints of ZeRO stages 1-2 (issue 39): the AdamW moments stay in shards on disk, as in
// memory, so saving never gathers them onto one rank.
//
// Files in checkpoint-STEP/ (beside model.pt, state.json, ...; all covered by manifest.json's sizes and CRCs):
//   optimizer_layout.json                  what the shards hold: the world size and stage that wrote them, N (the
//                                          flat element count), the AdamW step, each parameter's range of the
//                                          flat order (by name), the gradient buckets, each shard's file and range
//   optimizer_shard_rank<R>_of<W>.safetensors  rank R's elements [begin, end) of the flat order: two F32 tensors,
//                                          exp_avg and exp_avg_sq, of end - begin elements each
// Rank 0 writes every file: the other ranks send their moments chunk by chunk (ShardedAdamW::sendShardToRank0), so
// output.dir need not be shared to save, and the folder still becomes valid in one rename (saveCheckpoint). A
// resume reads, on every rank, only the byte ranges of its own shard (pread), whatever world size, stage and
// bucket size wrote them; stage 0 reads every parameter's range into torch::optim::AdamW's state.
// Private to taehv::train.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "taehv/train/zero.h"

namespace taehv::train {

/// optimizer_layout.json.
struct ZeroLayout {
  struct Param {
    std::string name;
    int64_t offset = 0;  ///< first element in the flat order
    int64_t numel = 0;
  };
  struct Shard {
    std::string file;  ///< a file name in the checkpoint folder
    int64_t begin = 0, end = 0;
  };
  int64_t world_size = 1;
  int64_t stage = 1;
  int64_t numel = 0;  ///< N
  int64_t step = 0;   ///< AdamW steps taken (0: no state yet)
  std::vector<Param> params;                           ///< in flat order
  std::vector<std::pair<int64_t, int64_t>> buckets;    ///< flat ranges, for people (a resume does not need them)
  std::vector<Shard> shards;                           ///< rank order
};

/// The layout file's name in a checkpoint folder; its presence makes the folder a sharded one.
inline constexpr const char* kZeroLayoutFile = "optimizer_layout.json";

/// optimizer_shard_rank<R>_of<W>.safetensors.
std::string zeroShardFileName(int rank, int world_size);

/// The layout of `zero`'s state now, its parameters named `names` (in the optimizer's parameter order).
ZeroLayout zeroLayoutOf(const ShardedAdamW& zero, const std::vector<std::string>& names);
/// optimizer_layout.json text of `layout`.
std::string formatZeroLayout(const ZeroLayout& layout);
/// Parses and checks optimizer_layout.json text (any bytes: shards that tile [0, N) in rank order, parameters that
/// tile it too, plain file names). Throws CheckpointError naming `file` and what is wrong.
ZeroLayout parseZeroLayout(const std::string& text, const std::string& file);
/// Reads `dir`/optimizer_layout.json (through taehv::files). Throws CheckpointError.
ZeroLayout readZeroLayout(const std::string& dir);

/// Collective (every rank of `zero`): rank 0 writes every rank's shard file into `dir` (the other ranks send theirs,
/// one chunk of `chunk` elements at a time) and optimizer_layout.json. No rank allocates more than one chunk. On
/// rank 0 a failed write throws OutputFileError after every rank's shard was received.
void saveZeroShards(const std::string& dir, const ShardedAdamW& zero, const std::vector<std::string>& names,
                    int64_t chunk);
/// Rank 0, when its save failed before saveZeroShards: receives and drops every other rank's shard, so they stop
/// waiting.
void drainZeroShards(const ShardedAdamW& zero, int64_t chunk);

/// Loads a sharded checkpoint's moments from `dir`: into `zero` (this rank's pieces only) when it is non-null, else
/// into `adamw`'s state (every parameter, as torch::optim::AdamW::step leaves it). `params` and `names`: the
/// model's parameters in the optimizer's order. A parameter missing or of another size, a missing or damaged shard
/// file: CheckpointError naming it.
void loadZeroShards(const std::string& dir, const std::vector<torch::Tensor>& params,
                    const std::vector<std::string>& names, ShardedAdamW* zero, torch::optim::AdamW* adamw);

/// Lines describing checkpoint folder `dir` for `taehv-train checkpoint info`: step, format, and for a sharded one
/// its world size, stage, shards (range, bytes, CRC-32C) and buckets. Throws CheckpointError.
std::vector<std::string> describeCheckpoint(const std::string& dir);

}  // namespace taehv::train
