// `taehv-train checkpoint info|consolidate DIR`: a checkpoint folder's layout, and its sharded optimizer state
// (ZeRO stages 1-2, zero_checkpoint.h) written as the full single-file state.
#include <filesystem>

#include "taehv/cli/options.h"
#include "taehv/log.h"
#include "taehv/train/checkpoint.h"
#include "taehv/train/commands.h"
#include "taehv/train/trainer.h"
#include "train_state.h"
#include "zero_checkpoint.h"

namespace taehv::train {
namespace {
namespace fs = std::filesystem;

constexpr const char* kCheckpointUsage =
    "usage: taehv-train checkpoint info DIR\n"
    "       taehv-train checkpoint consolidate DIR [--out FOLDER]\n"
    "  info         prints the checkpoint folder DIR's step, files (sizes, CRC-32C) and optimizer layout (full, or\n"
    "               sharded: the world size and ZeRO stage that wrote it, each rank's shard)\n"
    "  consolidate  writes DIR's optimizer state in the full single-file format (optimizer.pt) as checkpoint-STEP\n"
    "               under FOLDER (default: the folder holding DIR, whose checkpoint-STEP it replaces atomically)\n";

}  // namespace

int checkpointCommand(const std::vector<std::string>& argv) {
  return cli::runCommand(kCheckpointUsage, argv, [&] {
    // ACTION DIR, then options: the option layer has no positional arguments, so the two come off the front.
    if (argv.size() < 2 || argv[1].rfind("--", 0) == 0) {
      throw cli::UsageError("checkpoint needs an action (info or consolidate) and a checkpoint folder");
    }
    const std::string action = argv[0], dir = argv[1];
    if (action != "info" && action != "consolidate") {
      throw cli::UsageError("unknown checkpoint action '" + action + "' (use info or consolidate)");
    }
    const std::vector<std::string> rest(argv.begin() + 2, argv.end());
    const cli::Args args = (action == "info" ? cli::Options() : cli::Options().value("out")).parse(rest);
    try {
      if (!fs::is_directory(dir)) throw CheckpointError(dir + " is not a folder; give a checkpoint-STEP folder");
      if (action == "info") {
        for (const auto& line : describeCheckpoint(dir)) log::print(log::Stream::kStdout, line + "\n");
        return 0;
      }
      const std::string out = args.get("out", fs::absolute(dir).lexically_normal().parent_path().string());
      log::report("consolidated " + dir + " into " + consolidateCheckpoint(dir, out));
      return 0;
    } catch (const std::exception& e) {
      return reportRunError(e);
    }
  });
}

}  // namespace taehv::train
