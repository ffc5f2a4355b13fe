#include "taehv/train/commands.h"

#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "taehv/cli/options.h"
#include "taehv/env.h"
#include "taehv/log.h"
#include "taehv/model/cpu_tuning.h"
#include "taehv/parse.h"
#include "taehv/train/checkpoint.h"
#include "taehv/train/data.h"
#include "taehv/train/trainer.h"

namespace taehv::train {
namespace {

constexpr const char* kTrainUsage =
    "usage: taehv-train [train] [--config FILE] [--set key=value]... [--resume latest|PATH]\n"
    "                   [--stop-at-step N] [--print-config]\n"
    "  Trains TAEHV data-parallel across the ranks taehv-run (or torchrun) started; alone, as one process.\n"
    "  --config FILE      YAML config (sections model, train, data, dist, checkpoint, log, output, eval)\n"
    "  --set key=value    override one key, e.g. --set train.steps=500 --set data.source=/data/videos\n"
    "  --resume latest    continue from the newest valid checkpoint in output.dir (PATH: a checkpoint folder)\n"
    "  --stop-at-step N   after step N save a checkpoint and exit 0, as SIGTERM would\n"
    "  --print-config     print the effective config, each number with its valid range, and exit\n";

constexpr const char* kEvalUsage =
    "usage: taehv-train eval --checkpoint latest|PATH [--config FILE] [--set key=value]... [--no-ema]\n"
    "  Reports PSNR and SSIM of a checkpoint (folder, or weights .safetensors) on eval.clips clips of data.source\n"
    "  (synthetic: scenes the training never reads, at eval.size x eval.frames; see taehv-train --print-config).\n";

cli::Options trainOptions() {
  return cli::Options().value("config").repeatable("set").value("resume").value("stop-at-step").flag("print-config");
}

cli::Options evalOptions() {
  return cli::Options().value("config").repeatable("set").value("checkpoint").flag("no-ema");
}

/// --config first, then every --set in order, whatever their position; the launcher's variables last.
Config configFrom(const cli::Args& args) {
  Config config;
  if (const std::string file = args.get("config", ""); !file.empty()) config.mergeYamlFile(file);
  for (const auto& s : args.values("set")) config.applyOverride(s);
  return config;
}

void checkAndResolve(Config& config) {
  config.validate();
  config.applyLauncherEnvironment(processEnvironment());
}

/// The result lines of `taehv-train eval`; the exit status.
int reportEval(const EvalOptions& options) {
  try {
    const EvalResult r = runEval(options);
    // The last line is JSON for scripts: a value that is not a number is null there (JSON has no NaN), and the exit
    // status says the result is unusable.
    const bool finite = std::isfinite(r.psnr) && std::isfinite(r.ssim);
    const auto json = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
    log::report(log::format("eval: clips=%lld psnr=%.3f dB ssim=%.4f edge_share=%.3f%s",
                            static_cast<long long>(r.clips), r.psnr, r.ssim, r.edges,
                            r.held_out ? " (held out)" : " (file source: training items, other crops)"));
    log::report(nlohmann::json{{"clips", r.clips}, {"psnr", json(r.psnr)}, {"ssim", json(r.ssim)},
                               {"edge_share", json(r.edges)}, {"held_out", r.held_out}}
                    .dump());
    if (!finite) {
      log::error("PSNR or SSIM is not a number: the model's output holds NaN or infinite values");
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    return reportRunError(e);
  }
}

}  // namespace

int trainCommand(const std::vector<std::string>& argv) {
  return cli::runCommand(kTrainUsage, argv, [&] {
    const cli::Args args = trainOptions().parse(argv);
    TrainOptions options;
    try {
      if (args.has("stop-at-step")) {
        const std::string v = args.get("stop-at-step", "");
        const std::optional<int64_t> step = parseInteger<int64_t>(v, 1);
        if (!step) throw ConfigError("--stop-at-step expects a step number >= 1, got '" + v + "'");
        options.stop_at_step = *step;
      }
      options.config = configFrom(args);
      options.resume = args.get("resume", "");
      checkAndResolve(options.config);
    } catch (const ConfigError& e) {
      log::error(e.what());
      return 2;
    }
    if (args.flag("print-config")) {
      log::print(log::Stream::kStdout, options.config.toYaml(Config::YamlComments::kOriginsAndRanges));
      return 0;
    }
    // Before any thread starts: freed activations stay in the heap. Without it each CPU step page-faults its
    // activations in afresh (2 ranks x 1 thread, 2 x 12 x 64x64: 39-55k minor faults and 0.07-0.09 s of kernel
    // time per step and rank, ~9% of the step; with it ~200 faults and 0.005 s).
    tuneCpuAllocator();
    return runTraining(options);
  });
}

int evalCommand(const std::vector<std::string>& argv) {
  return cli::runCommand(kEvalUsage, argv, [&] {
    const cli::Args args = evalOptions().parse(argv);
    EvalOptions options;
    try {
      options.config = configFrom(args);
      options.checkpoint = args.get("checkpoint", "");
      if (options.checkpoint.empty()) throw ConfigError("eval needs --checkpoint latest|PATH");
      checkAndResolve(options.config);
    } catch (const ConfigError& e) {
      log::error(e.what());
      return 2;
    }
    options.ema = !args.flag("no-ema");
    return reportEval(options);
  });
}

}  // namespace taehv::train
