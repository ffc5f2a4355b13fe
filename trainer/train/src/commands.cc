#include "taehv/train/commands.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "taehv/model/cpu_tuning.h"
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
    "  --print-config     print the effective config and exit\n";

constexpr const char* kEvalUsage =
    "usage: taehv-train eval --checkpoint latest|PATH [--config FILE] [--set key=value]... [--no-ema]\n"
    "  Reports PSNR and SSIM of a checkpoint (folder, or weights .safetensors) on eval.clips clips of data.source\n"
    "  (synthetic: scenes the training never reads, at eval.size x eval.frames; see taehv-train --print-config).\n";

struct Parsed {
  Config config;
  std::string resume, checkpoint;
  int64_t stop_at_step = 0;
  bool print_config = false, help = false, no_ema = false;
};

/// Applies --config first, then every --set in order, whatever their position.
Parsed parse(const std::vector<std::string>& args, bool eval) {
  Parsed p;
  std::vector<std::string> sets;
  std::vector<std::string> flags = {"--config", "--set", "--help"};
  if (eval) {
    flags.insert(flags.end(), {"--checkpoint", "--no-ema"});
  } else {
    flags.insert(flags.end(), {"--resume", "--stop-at-step", "--print-config"});
  }
  std::string config_file;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw ConfigError(a + " needs a value");
      return args[++i];
    };
    auto has = [&](const char* f) { return std::find(flags.begin(), flags.end(), f) != flags.end(); };
    if (a == "--help" || a == "-h") {
      p.help = true;
    } else if (a == "--config" && has("--config")) {
      config_file = value();
    } else if (a == "--set" && has("--set")) {
      sets.push_back(value());
    } else if (a.rfind("--set=", 0) == 0) {
      sets.push_back(a.substr(6));
    } else if (a == "--resume" && has("--resume")) {
      p.resume = value();
    } else if (a == "--stop-at-step" && has("--stop-at-step")) {
      const std::string v = value();
      char* end = nullptr;
      p.stop_at_step = std::strtoll(v.c_str(), &end, 10);
      if (*end || p.stop_at_step < 1) throw ConfigError("--stop-at-step expects a step number >= 1, got '" + v + "'");
    } else if (a == "--print-config" && has("--print-config")) {
      p.print_config = true;
    } else if (a == "--checkpoint" && has("--checkpoint")) {
      p.checkpoint = value();
    } else if (a == "--no-ema" && has("--no-ema")) {
      p.no_ema = true;
    } else {
      throw ConfigError("unknown argument '" + a + "'; did you mean '" + closestName(a, flags) + "'? (see --help)");
    }
  }
  if (!config_file.empty()) p.config.mergeYamlFile(config_file);
  for (const auto& s : sets) p.config.applyOverride(s);
  return p;
}

}  // namespace

int trainCommand(const std::vector<std::string>& args) {
  Parsed p;
  try {
    p = parse(args, false);
    if (p.help) {
      std::fputs(kTrainUsage, stdout);
      return 0;
    }
    p.config.validate();
    p.config.applyLauncherEnvironment([](const char* name) { return std::getenv(name); });
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "taehv-train: %s\n", e.what());
    return 2;
  }
  if (p.print_config) {
    std::fputs(p.config.toYaml().c_str(), stdout);
    return 0;
  }
  TrainOptions options{p.config, p.resume, p.stop_at_step};
  // Before any thread starts: freed activations stay in the heap. Without it each CPU step page-faults its
  // activations in afresh (2 ranks x 1 thread, 2 x 12 x 64x64: 39-55k minor faults and 0.07-0.09 s of kernel time
  // per step and rank, ~9% of the step; with it ~200 faults and 0.005 s).
  tuneCpuAllocator();
  return runTraining(options);
}

int evalCommand(const std::vector<std::string>& args) {
  Parsed p;
  try {
    p = parse(args, true);
    if (p.help) {
      std::fputs(kEvalUsage, stdout);
      return 0;
    }
    if (p.checkpoint.empty()) throw ConfigError("eval needs --checkpoint latest|PATH");
    p.config.validate();
    p.config.applyLauncherEnvironment([](const char* name) { return std::getenv(name); });
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "taehv-train eval: %s\n", e.what());
    return 2;
  }
  try {
    const EvalResult r = runEval(EvalOptions{p.config, p.checkpoint, !p.no_ema});
    // The last line is JSON for scripts: a value that is not a number is null there (JSON has no NaN), and the exit
    // status says the result is unusable.
    const bool finite = std::isfinite(r.psnr) && std::isfinite(r.ssim);
    const auto json = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
    std::printf("eval: clips=%lld psnr=%.3f dB ssim=%.4f edge_share=%.3f%s\n", static_cast<long long>(r.clips), r.psnr,
                r.ssim, r.edges, r.held_out ? " (held out)" : " (file source: training items, other crops)");
    std::printf("%s\n", nlohmann::json{{"clips", r.clips}, {"psnr", json(r.psnr)}, {"ssim", json(r.ssim)},
                                       {"edge_share", json(r.edges)}, {"held_out", r.held_out}}.dump().c_str());
    if (!finite) {
      std::fprintf(stderr, "taehv-train eval: PSNR or SSIM is not a number: the model's output holds NaN or "
                           "infinite values\n");
      return 1;
    }
    return 0;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "taehv-train eval: %s\n", e.what());
    return 2;
  } catch (const DataError& e) {
    std::fprintf(stderr, "taehv-train eval: data: %s\n", e.what());
    return 2;
  } catch (const CheckpointError& e) {
    std::fprintf(stderr, "taehv-train eval: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "taehv-train eval: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace taehv::train
