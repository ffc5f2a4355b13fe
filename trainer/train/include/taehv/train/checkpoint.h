// Checkpoint folders <output.dir>/checkpoint-STEP/: written atomically (a temporary folder whose files are
// fsynced, then renamed into place, then the parent fsynced), verified on load through manifest.json (size and
// CRC-32C of every file), pruned to the last K. No libtorch here: the trainer writes the files it needs into
// the folder this hands it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace taehv::train {

/// A checkpoint that cannot be used as asked (damaged, missing, not a folder): a usage error (exit 2), where
/// a failed write is a runtime error.
struct CheckpointError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Writes checkpoint-`step` under `output_dir`: `write(tmp_dir)` creates the files, then the manifest is
/// added, everything fsynced and the folder renamed into place. An existing folder for the same step is replaced
/// when it is intact, and moved aside to damaged-checkpoint-STEP-PID when it is not (never destroyed). Then only
/// the newest `keep` checkpoints are kept. Returns the final path. Throws std::runtime_error naming the folder and
/// its free space, after removing the temporary folder.
std::string saveCheckpoint(const std::string& output_dir, int64_t step, int64_t keep,
                           const std::function<void(const std::string& tmp_dir)>& write);

/// manifest.json of a checkpoint folder: its step and, per file, the size and CRC-32C recorded at save time.
struct CheckpointManifest {
  struct File {
    std::string name;  ///< a file name in the folder (never a path)
    uint64_t size = 0;
    uint32_t crc32c = 0;
  };
  int64_t step = 0;
  std::vector<File> files;
};
/// Parses manifest.json text. Throws CheckpointError saying what is malformed (any bytes: fuzzed).
CheckpointManifest parseCheckpointManifest(const std::string& text);

/// state.json of a checkpoint folder: where training resumes, and the run's shape when it was saved.
struct CheckpointState {
  int64_t step = 0;
  int64_t samples_consumed = 0;  ///< samples of the data order consumed by every rank together
  int64_t data_skipped = 0;      ///< unreadable items skipped so far
  // For people (and a resume at another world size): not needed to resume, so optional when read (0 = absent).
  int64_t world_size = 0;
  int64_t batch_per_rank = 0;
  int64_t grad_accum = 0;
  int64_t seed = 0;
  /// The global batch (world x batch_per_rank x grad_accum) train.lr is meant for: the first run's, kept through
  /// resumes at other shapes (TrainConfig::keep_global_batch).
  int64_t global_batch = 0;
  /// Seconds of training up to this step, resumes included (train.max_minutes counts from it; 0 = absent).
  double train_seconds = 0;
};
/// Parses state.json text. Throws CheckpointError saying what is malformed (any bytes: fuzzed).
CheckpointState parseCheckpointState(const std::string& text);
/// state.json text of `state` (what parseCheckpointState reads back).
std::string formatCheckpointState(const CheckpointState& state);

/// True when `dir` holds a manifest whose files all exist with the recorded size and CRC. `why` says what is
/// wrong otherwise.
bool verifyCheckpoint(const std::string& dir, std::string* why);

/// checkpoint-STEP folders under `output_dir`, newest first. Folders named checkpoint-* whose STEP is no step
/// number (not digits, or above 2^63-1) are not checkpoints; `not_steps`, when given, receives their paths.
std::vector<std::pair<int64_t, std::string>> listCheckpoints(const std::string& output_dir,
                                                             std::vector<std::string>* not_steps = nullptr);

/// Removes what killed saves left in `output_dir` (.tmp-checkpoint-STEP-PID, .old-checkpoint-STEP-PID whose PID
/// is not a live process) and killed file writes left in it and in previews/ (FILE.tmp.XXXXXX of
/// writeFileAtomically). Returns the removed paths, for the log.
std::vector<std::string> removeStaleTemporaries(const std::string& output_dir);

/// Resolves `--resume`: "latest" -> the newest valid checkpoint in `output_dir` (invalid newer ones, and folders
/// named checkpoint-* whose STEP is no number, are skipped, each with a warning through `warn`; nullopt when there is no checkpoint at all); a checkpoint folder
/// -> it; an output folder -> its newest valid checkpoint. Throws CheckpointError when checkpoints exist but none
/// is valid (training from scratch would overwrite them), or the folder given fails verification.
/// `option` is the flag the value came from, for the messages.
std::optional<std::string> resolveResume(const std::string& resume, const std::string& output_dir,
                                         const std::function<void(const std::string&)>& warn,
                                         const std::string& option = "--resume");

/// fsyncs a file or folder (best effort for folders on filesystems that refuse).
void fsyncPath(const std::string& path);

}  // namespace taehv::train
