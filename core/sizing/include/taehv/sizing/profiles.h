// Training profiles chosen by world size (`taehv-run --config DIR`).
//
// A profile is a trainer config file (the trainer's YAML schema: train.batch_per_rank, train.grad_accum,
// train.lr, ...) whose name ends in -<NODES>x<GPUS_PER_NODE>.yaml, e.g. examples/configs/h100-2x8.yaml: it is
// meant for NODES x GPUS_PER_NODE workers. Files in DIR with other names are not profiles and are ignored.
//
// Selection: the profile whose world size equals the job's wins (several: the one whose node count matches too,
// then the first by name). None: the base profile (the smallest world size) is used with its learning rate
// scaled linearly with the effective batch (world size x batch_per_rank x grad_accum), batch_per_rank and
// grad_accum kept: lr = base_lr x effective / base_effective. The choice always comes with a reason to print.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "taehv/checked.h"

namespace taehv::sizing {

/// One profile file, as far as sizing needs to know it.
struct TrainProfile {
  std::string path;         ///< the file
  std::string name;         ///< file name without .yaml, e.g. "h100-2x8"
  int nodes = 0;            ///< from the file name
  int gpus_per_node = 0;    ///< from the file name
  int batch_per_rank = 1;   ///< train.batch_per_rank (trainer default 1 when absent)
  int grad_accum = 1;       ///< train.grad_accum (trainer default 1 when absent)
  double lr = 0;            ///< train.lr (required in a profile)
  std::string output_dir;   ///< output.dir; "" when the profile leaves it to the trainer
  std::string data_source;  ///< data.source; "" when the profile leaves it to the trainer

  int worldSize() const { return nodes * gpus_per_node; }
  /// Clips per optimizer step over the whole job.
  long effectiveBatch() const { return static_cast<long>(worldSize()) * batch_per_rank * grad_accum; }
};

/// Trainer config keys sizing reads and writes.
inline constexpr const char* kLrKey = "train.lr";
inline constexpr const char* kBatchPerRankKey = "train.batch_per_rank";
inline constexpr const char* kGradAccumKey = "train.grad_accum";

/// Reads one profile file. Fails (naming the file and the fix) on a bad name, bad YAML or missing lr.
Checked<TrainProfile> loadProfile(const std::string& path);

/// Every profile in `dir`, sorted by world size then name. Fails when `dir` is unreadable, holds no profile, or
/// a profile is broken.
Checked<std::vector<TrainProfile>> loadProfiles(const std::string& dir);

/// The trainer config to run with.
struct ProfileChoice {
  std::string config_path;  ///< the profile file to give the trainer (--config)
  /// Overrides on top of it (--set key=value), e.g. {"train.lr", "2.5e-05"} for a derived profile; empty when a
  /// profile matched exactly.
  std::vector<std::pair<std::string, std::string>> overrides;
  bool derived = false;
  TrainProfile profile;  ///< the effective values (for a derived one: nodes/gpus_per_node of the job, scaled lr)
  std::string reason;    ///< one or two lines: which and why
};

/// Picks the profile for `nnodes` x `nproc_per_node` workers from `dir`. See the file comment.
Checked<ProfileChoice> chooseProfile(const std::string& dir, int nnodes, int nproc_per_node);

/// The shortest %g text that reads back as exactly `value`, e.g. 0.0001 -> "0.0001", 2.5e-05 -> "2.5e-05".
std::string formatLr(double value);

}  // namespace taehv::sizing
