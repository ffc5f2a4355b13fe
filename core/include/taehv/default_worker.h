// What taehv-run knows of its default worker, taehv-train (started when no command follows `--`), in one place.
// The trainer's tests check that these agree with the trainer (tests/trainer/train/config_test.cc).
#pragma once

namespace taehv::default_worker {

/// The program, looked for beside taehv-run; only it is given the --config profile's --config/--set arguments.
inline constexpr const char* kProgram = "taehv-train";
/// Its output.dir default, which `taehv-run doctor` checks when neither --output-dir nor a profile names one.
inline constexpr const char* kOutputDir = "runs/taehv";

}  // namespace taehv::default_worker
