#include "taehv/train/config.h"

#include "taehv/default_worker.h"
#include "taehv/parse.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "infra/built_programs.h"

namespace taehv::train {
namespace {

TEST(Config, RequiredKeysExist) {
  const auto keys = Config::keys();
  for (const char* k : {"train.steps", "train.batch_per_rank", "train.lr", "data.frames", "data.size", "data.source",
                        "checkpoint.every", "output.dir"}) {
    EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
  }
}

// Every config shipped in examples/configs (the quickstart and the profiles taehv-run --config picks from) loads
// through the trainer's own reader, which refuses unknown keys, and validates.
TEST(Config, ShippedConfigsLoadAndValidate) {
  const std::filesystem::path dir = std::filesystem::path(::taehv::testing::besideThisTest(TAEHV_TEST_SOURCE_DIR)) / "examples/configs";
  int loaded = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml") continue;
    Config c;
    EXPECT_NO_THROW({
      c.mergeYamlFile(entry.path().string());
      c.validate();
    }) << entry.path();
    ++loaded;
  }
  EXPECT_GE(loaded, 4) << "quickstart and the three H100 profiles";
}

// taehv-run's knowledge of its default worker (core/include/taehv/default_worker.h) matches the trainer.
TEST(Config, TaehvRunsDefaultWorkerFactsMatchTheTrainer) {
  EXPECT_EQ(Config().output.dir, default_worker::kOutputDir);
}

TEST(Config, YamlAndOverridesApplyInOrder) {
  Config c;
  c.mergeYamlText("train:\n  steps: 42\n  lr: 1e-3\ndata:\n  source: /videos\n  size: 128\n", "test.yaml");
  c.applyOverride("train.lr=5e-4");
  c.applyOverride("train.bf16=false");
  EXPECT_EQ(c.train.steps, 42);
  EXPECT_DOUBLE_EQ(c.train.lr, 5e-4);
  EXPECT_EQ(c.data.source.text(), "/videos");
  EXPECT_EQ(c.data.source.kind(), SourceKind::kFiles);
  EXPECT_EQ(c.data.size, 128);
  EXPECT_FALSE(c.train.bf16);
}

TEST(Config, UnknownKeyNamesTheClosestValidKey) {
  Config c;
  try {
    c.mergeYamlText("train:\n  learning_rat: 1\n", "my.yaml");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("my.yaml"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("train.learning_rat"), std::string::npos) << e.what();
  }
  try {
    c.applyOverride("train.setps=3");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'train.steps'"), std::string::npos) << e.what();
  }
  try {
    c.applyOverride("data.frame=8");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'data.frames'"), std::string::npos) << e.what();
  }
}

// The held-out evaluation's keys: sizes the model accepts, or 0 for the training data's.
TEST(Config, EvalKeysAreValidated) {
  Config ok;
  ok.applyOverride("eval.every=50");
  ok.applyOverride("eval.size=64");
  ok.applyOverride("eval.frames=12");
  EXPECT_NO_THROW(ok.validate());
  EXPECT_EQ(Config().eval.every, 0) << "no evaluation during training unless asked";
  for (const char* bad : {"eval.every=-1", "eval.size=60", "eval.size=4", "eval.frames=6", "eval.clips=0"}) {
    Config c;
    try {
      c.applyOverride(bad);  // a value outside the key's range is refused here, a size the model cannot take below
      c.validate();
      ADD_FAILURE() << bad << " accepted";
    } catch (const ConfigError& e) {
      const std::string key = std::string(bad).substr(0, std::string(bad).find('='));
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
  // The evaluation's clips go through the same model as the training's: the variant's multiples hold for both.
  Config ltx;
  ltx.applyOverride("model.variant=taeltx_2");  // 8 frames per latent, patch 4: sizes in steps of 32
  ltx.applyOverride("data.frames=16");
  ltx.applyOverride("eval.size=48");
  try {
    ltx.validate();
    ADD_FAILURE() << "eval.size 48 accepted for taeltx_2";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("eval.size must be 0 (= data.size) or a positive multiple of 32"),
              std::string::npos) << e.what();
  }
  ltx.applyOverride("eval.size=64");
  ltx.applyOverride("eval.frames=12");
  EXPECT_THROW(ltx.validate(), ConfigError);
  ltx.applyOverride("eval.frames=24");
  EXPECT_NO_THROW(ltx.validate());
}

TEST(Config, BadValuesAreRejectedWithTheKey) {
  Config c;
  EXPECT_THROW(c.applyOverride("train.steps=ten"), ConfigError);
  EXPECT_THROW(c.applyOverride("train.steps=10x"), ConfigError);
  EXPECT_THROW(c.applyOverride("train.lr=fast"), ConfigError);
  EXPECT_THROW(c.applyOverride("train.bf16=maybe"), ConfigError);
  EXPECT_THROW(c.applyOverride("nonsense"), ConfigError);
  EXPECT_THROW(c.mergeYamlText("train: [1, 2]\n"), ConfigError);
  EXPECT_THROW(c.mergeYamlText("train:\n  steps: [1, 2]\n"), ConfigError);
  EXPECT_THROW(c.mergeYamlText("train: {steps: 1\n"), ConfigError);
  EXPECT_THROW(c.mergeYamlFile("/nonexistent/config.yaml"), ConfigError);
}

TEST(Config, ValidateChecksConstraints) {
  Config c;
  EXPECT_NO_THROW(c.validate());
  c.data.frames = 6;
  EXPECT_THROW(c.validate(), ConfigError);
  c.data.frames = 8;
  c.data.size = 30;
  EXPECT_THROW(c.validate(), ConfigError);
  c.data.size = 32;
  EXPECT_THROW(c.applyOverride("train.loss=huber"), ConfigError);  // a choice is refused when it is set
  EXPECT_NO_THROW(c.validate());
}

// A key with a few possible values is parsed once, into its enum, when it is set; its text (--print-config, a
// saved config) is the name as before, and loads back.
TEST(Config, ChoicesAreParsedOnceAndPrintedByName) {
  Config c;
  EXPECT_EQ(c.train.optimizer, OptimizerKind::kAdamW);
  EXPECT_EQ(c.data.source.kind(), SourceKind::kSynthetic);
  for (const char* set : {"train.optimizer=sgd", "train.loss=mse+l1", "train.objective=distillation",
                          "train.cpu_precision=auto", "train.cpu_conv=winograd", "dist.backend=gloo",
                          "data.source=/data/clips"}) {
    c.applyOverride(set);
  }
  EXPECT_EQ(c.train.optimizer, OptimizerKind::kSgd);
  EXPECT_EQ(c.train.loss, LossKind::kMseL1);
  EXPECT_EQ(c.train.objective, ObjectiveKind::kDistillation);
  EXPECT_EQ(c.train.cpu_precision, CpuPrecision::kAuto);
  EXPECT_EQ(c.train.cpu_conv, CpuConv::kWinograd);
  EXPECT_EQ(c.dist.backend, DistBackend::kGloo);
  EXPECT_EQ(c.data.source.kind(), SourceKind::kFiles);
  const std::string yaml = c.toYaml();
  for (const char* line : {"  optimizer: \"sgd\"\n", "  loss: \"mse+l1\"\n", "  objective: \"distillation\"\n",
                           "  cpu_precision: \"auto\"\n", "  cpu_conv: \"winograd\"\n", "  backend: \"gloo\"\n",
                           "  source: \"/data/clips\"\n"}) {
    EXPECT_NE(yaml.find(line), std::string::npos) << line << " not in:\n" << yaml;
  }
  Config back;
  back.mergeYamlText(yaml, "printed");
  EXPECT_EQ(back.toYaml(), yaml);
  EXPECT_EQ(back.get("train.loss"), "mse+l1");
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"train.optimizer=adam", "train.optimizer must be adamw or sgd, got 'adam'"},
      {"train.loss=L1", "train.loss must be mse, l1 or mse+l1, got 'L1'"},
      {"train.objective=distill", "train.objective must be auto, reconstruction or distillation, got 'distill'"},
      {"dist.backend=mpi", "dist.backend must be auto, gloo or nccl, got 'mpi'"},
  };
  for (const auto& [set, message] : refused) {
    try {
      c.applyOverride(set);
      ADD_FAILURE() << set << " accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), message);
    }
  }
}

// "did you mean" names only close keys: a misspelt key, or a key's last part without its section; nothing else.
TEST(Config, UnknownKeysNameOnlyCloseOnes) {
  const auto message = [](const std::string& set) {
    try {
      Config().applyOverride(set);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message("lr=1"), "unknown config key 'lr' (did you mean 'train.lr'?)");
  EXPECT_EQ(message("train.stpes=1").rfind("unknown config key 'train.stpes' (did you mean 'train.steps'", 0), 0u)
      << "the nearest first";
  EXPECT_EQ(message("quite.unlike_anything=1"), "unknown config key 'quite.unlike_anything'");
}

// The synthetic scenes' knobs and the frame-difference weight: out-of-range values are one message naming the
// key and the range.
TEST(Config, SyntheticSceneKeysAreValidated) {
  auto error = [](const std::string& set) {
    Config c;
    try {
      c.applyOverride(set);
      c.validate();
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto says = [&](const std::string& set, const std::string& text) {
    const std::string message = error(set);
    EXPECT_NE(message.find(text), std::string::npos) << set << ": " << message;
  };
  EXPECT_EQ(error("data.synthetic_shapes=1"), "");
  EXPECT_EQ(error("data.synthetic_shape_scale=3"), "");
  EXPECT_EQ(error("train.frame_diff_weight=0.5"), "");
  says("data.synthetic_shapes=0", "data.synthetic_shapes must be in [1, 5]");
  says("data.synthetic_shapes=6", "got 6");
  says("data.synthetic_shape_scale=0", "data.synthetic_shape_scale must be in (0, 3]");
  says("data.synthetic_shape_scale=3.5", "got 3.5");
  says("train.frame_diff_weight=-1", "train.frame_diff_weight must be in [0, 100]");
  EXPECT_EQ(error("train.edge_weight=2"), "");
  says("train.edge_weight=101", "train.edge_weight must be in [0, 100]");
  EXPECT_EQ(error("train.ssim_weight=0.1"), "");
  says("train.ssim_weight=-1", "train.ssim_weight must be in [0, 100]");
  says("train.ssim_from_step=-1", "train.ssim_from_step must be in [0, 1000000000]");
  EXPECT_EQ(error("model.init_output_scale=1"), "");
  says("model.init_output_scale=-0.5", "model.init_output_scale must be in [0, 10], got -0.5");
  EXPECT_EQ(error("data.synthetic_scene_size=64"), "");
  EXPECT_EQ(error("data.synthetic_scene_size=100"), "");
  says("data.synthetic_scene_size=32", "data.synthetic_scene_size must be 0 (= data.size) or >= data.size=64");
  says("data.synthetic_scene_size=-1", "got -1");
  Config defaults;
  EXPECT_EQ(defaults.data.synthetic_shapes, 5);
  EXPECT_EQ(defaults.data.synthetic_shape_scale, 1.0);
  EXPECT_FALSE(defaults.data.synthetic_flat_background);
  EXPECT_EQ(defaults.data.synthetic_scene_size, 0);
  EXPECT_EQ(defaults.train.frame_diff_weight, 0.0);
  EXPECT_EQ(defaults.model.init_output_scale, 0.1);
}

TEST(Config, ValidateChecksFramesAndSizeForTheVariant) {
  Config c;
  c.model.variant = "taew2_2_supr";
  try {
    c.validate();
    ADD_FAILURE() << "unknown variant accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'taew2_2_super'"), std::string::npos) << e.what();
  }
  c.model.variant = "taeltx_2";  // 8 frames per latent, patch 4: sizes in steps of 32
  c.data.frames = 12;
  c.data.size = 64;
  EXPECT_THROW(c.validate(), ConfigError);
  c.data.frames = 16;
  EXPECT_NO_THROW(c.validate());
  c.data.size = 48;
  EXPECT_THROW(c.validate(), ConfigError);
  c.model.variant = "taeh3";  // chunks of 17 frames
  c.data.size = 32;
  EXPECT_THROW(c.validate(), ConfigError);
  c.data.frames = 17;
  EXPECT_NO_THROW(c.validate());
}

TEST(Config, ZeroStageIsZeroOneOrTwoAndNeedsAdamW) {
  Config c;
  EXPECT_EQ(c.train.zero_stage, 0);
  for (int stage : {1, 2}) {
    c.set("train.zero_stage", std::to_string(stage));
    EXPECT_NO_THROW(c.validate());
  }
  const auto refused = [&](const std::string& expected, const std::function<void()>& change = [] {}) {
    try {
      change();
      c.validate();
    } catch (const ConfigError& e) {
      return std::string(e.what()).find(expected) != std::string::npos ? std::string() : std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refused("train.zero_stage must be in [0, 2] (parameter sharding, ZeRO-3, is not built: see docs/zero.md), "
                    "got 3",
                    [&] { c.set("train.zero_stage", "3"); }),
            "");
  c.set("train.zero_stage", "1");
  c.set("train.optimizer", "sgd");
  EXPECT_EQ(refused("use train.zero_stage=0"), "");
}

TEST(Config, EffectiveConfigRoundTrips) {
  Config a;
  a.applyOverride("train.steps=7");
  a.applyOverride("output.dir=/tmp/x y");
  a.applyOverride("train.ema=0.999");
  Config b;
  b.mergeYamlText(a.toYaml(), "saved");
  for (const auto& k : Config::keys()) EXPECT_EQ(a.get(k), b.get(k)) << k;
}

/// A getenv over a fixed map, so the test does not depend on (or change) the process environment.
Env fakeEnv(const std::map<std::string, std::string>& vars) { return vars; }

TEST(Config, LauncherTimeoutAndDeviceApplyWhenTheConfigLeavesThemOnAuto) {
  Config c;
  c.validate();
  c.applyLauncherEnvironment(fakeEnv({{"TAEHV_COLLECTIVE_TIMEOUT_S", "7200"}, {"TAEHV_DEVICE", "cuda:3"}}));
  EXPECT_DOUBLE_EQ(c.dist.timeout_s, 7200);
  EXPECT_EQ(c.train.device, "cuda:3");
  EXPECT_NO_THROW(c.validate());
  // The printed effective config says where each value came from, and still loads back.
  const std::string yaml = c.toYaml();
  EXPECT_NE(yaml.find("timeout_s: 7200  # from TAEHV_COLLECTIVE_TIMEOUT_S"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("# from TAEHV_DEVICE"), std::string::npos) << yaml;
  Config back;
  back.mergeYamlText(yaml, "printed");
  EXPECT_DOUBLE_EQ(back.dist.timeout_s, 7200);
  EXPECT_EQ(back.train.device, "cuda:3");

  Config cpu;
  cpu.applyLauncherEnvironment(fakeEnv({{"TAEHV_DEVICE", "cpu"}}));
  EXPECT_EQ(cpu.train.device, "cpu");
  EXPECT_DOUBLE_EQ(cpu.dist.timeout_s, DistConfig::kDefaultTimeoutS);  // no variable: the default
  EXPECT_NE(cpu.toYaml().find("# default"), std::string::npos) << cpu.toYaml();

  Config none;
  none.applyLauncherEnvironment(fakeEnv({}));
  EXPECT_EQ(none.train.device, "auto");  // stays auto: the trainer then picks CUDA if usable, else CPU
  EXPECT_DOUBLE_EQ(none.dist.timeout_s, 300);
}

TEST(Config, ExplicitTimeoutAndDeviceWinOverTheLauncher) {
  Config c;
  c.mergeYamlText("dist:\n  timeout_s: 45\ntrain:\n  device: cpu\n", "my.yaml");
  c.applyLauncherEnvironment(fakeEnv({{"TAEHV_COLLECTIVE_TIMEOUT_S", "7200"}, {"TAEHV_DEVICE", "cuda:1"}}));
  EXPECT_DOUBLE_EQ(c.dist.timeout_s, 45);
  EXPECT_EQ(c.train.device, "cpu");
  EXPECT_EQ(c.toYaml().find("TAEHV_"), std::string::npos) << c.toYaml();
}

TEST(Config, BadLauncherVariablesAreClearErrors) {
  for (const char* bad : {"soon", "0", "-5", "10s"}) {
    Config c;
    try {
      c.applyLauncherEnvironment(fakeEnv({{"TAEHV_COLLECTIVE_TIMEOUT_S", bad}}));
      FAIL() << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("TAEHV_COLLECTIVE_TIMEOUT_S"), std::string::npos) << e.what();
    }
  }
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "auto"}) {
    Config c;
    EXPECT_THROW(c.applyLauncherEnvironment(fakeEnv({{"TAEHV_DEVICE", bad}})), ConfigError) << bad;
  }
  Config c;
  c.train.device = "cuda:x";
  EXPECT_THROW(c.validate(), ConfigError);
  c.train.device = "cuda:2";
  EXPECT_NO_THROW(c.validate());
}


// The message of the --set or validate() refusing `sets`, or "" when they pass.
std::string validationError(std::vector<std::string> sets) {
  Config c;
  try {
    for (const auto& s : sets) c.applyOverride(s);
    c.validate();
    return "";
  } catch (const ConfigError& e) {
    return e.what();
  }
}

TEST(HostileConfig, OutOfRangeValuesAreRefusedNamingTheKeyAndTheRange) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"train.beta1=1.5", "train.beta1 must be in [0, 1), got 1.5"},
      {"train.beta2=1", "train.beta2 must be in [0, 1)"},
      {"train.beta1=nan", "'train.beta1': 'nan' is not a number"},
      {"train.lr=1e300", "train.lr must be in (0, 1]"},
      {"train.lr=0", "train.lr must be"},
      {"train.weight_decay=-0.1", "train.weight_decay must be in [0, 1)"},
      {"train.min_lr_ratio=2", "train.min_lr_ratio must be in [0, 1]"},
      {"train.cpu_precision=fp16", "train.cpu_precision must be fp32, bf16 or auto, got 'fp16'"},
      {"train.cpu_conv=fft", "train.cpu_conv must be direct, winograd or auto, got 'fft'"},
      {"train.grad_clip=-1", "train.grad_clip must be in [0, 1000000] (0 = off), got -1"},
      {"data.frames=100000", "data.frames must be in [1, 4096], got 100000"},
      {"data.size=16384", "data.size must be in [1, 8192]"},
      {"train.batch_per_rank=100000", "train.batch_per_rank must be in [1, 4096]"},
      {"train.grad_accum=1000000", "train.grad_accum must be in [1, 65536]"},
      {"train.steps=9999999999", "train.steps must be in [1, 1000000000]"},
      {"train.max_minutes=-5", "train.max_minutes must be in [0, 1000000] (0 = no time budget), got -5"},
  };
  for (const auto& [set, expected] : cases) {
    const std::string m = validationError({set});
    EXPECT_NE(m.find(expected), std::string::npos) << set << " -> '" << m << "'";
  }
  EXPECT_EQ(validationError({"train.beta1=0", "train.beta2=0.999", "train.lr=1"}), "");
  EXPECT_NE(validationError({"train.cpu_precision=bf16", "train.slices=2"}).find("a bf16 step runs as one pass"),
            std::string::npos);
  EXPECT_EQ(validationError({"train.cpu_precision=auto", "train.slices=1"}), "");
  EXPECT_NE(validationError({"train.cpu_precision=bf16", "train.cpu_conv=winograd"}).find("is for fp32 CPU steps"),
            std::string::npos);
  EXPECT_EQ(validationError({"train.cpu_precision=auto", "train.cpu_conv=winograd"}), "");
}

TEST(HostileConfig, ADuplicateYamlKeyIsAnErrorNamingBothLines) {
  Config c;
  try {
    c.mergeYamlText("train:\n  lr: 0.1\n  steps: 5\n  lr: 0.2\n", "dup.yaml");
    FAIL() << "a duplicate key must not silently take the last value";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("dup.yaml: key 'train.lr' is given twice (lines 2 and 4)"), std::string::npos)
        << e.what();
  }
}

TEST(HostileConfig, AFolderAsConfigIsRefusedNamingItsYamlFiles) {
  char tmpl[] = "/tmp/taehv-cfg-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  std::ofstream(dir + "/quickstart.yaml") << "train:\n  steps: 1\n";
  Config c;
  try {
    c.mergeYamlFile(dir);
    FAIL() << "a folder must not train with the built-in defaults";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("is a folder"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("quickstart.yaml"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// mergeYamlFile(path) in a child process with at most 1 GiB of address space and 10 s: the ConfigError's message,
// or what ended the child instead. The bounds let the old unbounded read end (the child dies) instead of hanging
// or filling the machine.
std::string configErrorInChild(const std::string& path) {
  int out[2];
  if (::pipe(out) != 0) return "pipe failed";
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(out[0]);
    ::alarm(10);
    const struct rlimit space = {1ul << 30, 1ul << 30};
    ::setrlimit(RLIMIT_AS, &space);
    std::string said = "no ConfigError";
    try {
      Config c;
      c.mergeYamlFile(path);
    } catch (const ConfigError& e) {
      said = e.what();
    } catch (const std::exception& e) {
      said = std::string("another exception: ") + e.what();
    }
    ssize_t ignored = ::write(out[1], said.data(), said.size());
    (void)ignored;
    _exit(0);
  }
  ::close(out[1]);
  std::string said;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) said.append(buf, static_cast<size_t>(n));
  ::close(out[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (WIFSIGNALED(status)) return "the child died of signal " + std::to_string(WTERMSIG(status));
  return said;
}

// Issue 38, defects 11 and 12: `taehv-train --config /dev/zero` grew by ~1 GB/s for ever, a FIFO blocked, and a
// file of gigabytes was read whole. Each is now one line naming --config, at once.
TEST(HostileConfig, DevZeroAFifoAndAHugeFileAreOneLineAtOnce) {
  char tmpl[] = "/tmp/taehv-cfg-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string fifo = dir + "/config.yaml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string huge = dir + "/huge.yaml";
  std::ofstream(huge) << "train:\n  steps: 1\n";
  std::filesystem::resize_file(huge, 8ull << 30);  // sparse: 8 GiB that take no disk
  EXPECT_EQ(configErrorInChild("/dev/zero"),
            "--config /dev/zero: a character device, not a regular file; give the path of a regular file");
  EXPECT_NE(configErrorInChild(fifo).find("--config " + fifo + ": a FIFO (named pipe), not a regular file"),
            std::string::npos);
  EXPECT_EQ(configErrorInChild(huge), "--config " + huge + ": larger than 4 MiB, the most taken for it; give the "
                                      "right file");
  std::filesystem::remove_all(dir);
}

// At ZeRO stages 1-2 a rank holds 1/W of the AdamW state: a machine that cannot hold two stage-0 ranks of the
// quickstart's size can hold two stage-1 ranks, and the refusal names the stage.
TEST(HostileConfig, TheMemoryCheckCountsThisRanksShareOfTheZeroState) {
  Config c;
  c.applyOverride("data.frames=12");
  c.applyOverride("data.size=64");
  c.applyOverride("train.batch_per_rank=2");
  const uint64_t stage0 = c.cpuStepMemoryEstimate(2);
  c.applyOverride("train.zero_stage=1");
  c.validate();
  EXPECT_EQ(c.cpuStepMemoryEstimate(1), stage0) << "one rank holds all of the state";
  EXPECT_EQ(stage0 - c.cpuStepMemoryEstimate(2), Config::kAdamWStateBytes - Config::kAdamWStateBytes / 2);
  c.applyOverride("train.zero_stage=2");
  EXPECT_EQ(stage0 - c.cpuStepMemoryEstimate(4), Config::kAdamWStateBytes - Config::kAdamWStateBytes / 4);
  const uint64_t between = 2 * (stage0 - Config::kAdamWStateBytes / 4);  // two ranks: per rank 3/4 of the state
  EXPECT_EQ(c.memoryCheck(between, 2, 2), "");
  c.applyOverride("train.zero_stage=0");
  const std::string m = c.memoryCheck(between, 2, 2);
  EXPECT_NE(m.find("one training step needs about"), std::string::npos) << m;
  c.applyOverride("train.zero_stage=1");
  const std::string z = c.memoryCheck(between / 2, 2, 2);
  EXPECT_NE(z.find("train.zero_stage=1 over 2 ranks"), std::string::npos) << z;
}

TEST(HostileConfig, AStepThatCannotFitInMemoryIsRefusedWithTheFigures) {
  Config c;
  c.applyOverride("data.frames=4000");
  c.applyOverride("data.size=256");
  c.validate();
  const std::string m = c.memoryCheck(24ull << 30, 2);
  EXPECT_NE(m.find("one training step needs about"), std::string::npos) << m;
  EXPECT_NE(m.find("data.frames=4000"), std::string::npos) << m;
  EXPECT_NE(m.find("24.0 GiB available"), std::string::npos) << m;
  // The quickstart's size fits two processes on a 2 GiB machine; two of them do not fit in 1 GiB.
  Config q;
  q.applyOverride("data.frames=12");
  q.applyOverride("data.size=64");
  q.applyOverride("train.batch_per_rank=2");
  EXPECT_EQ(q.memoryCheck(2ull << 30, 2), "");
  EXPECT_NE(q.memoryCheck(1ull << 30, 2), "");
  // The estimate never wraps around at the limits.
  Config huge;
  for (const auto* s : {"data.frames=4096", "data.size=8192", "train.batch_per_rank=4096"}) huge.applyOverride(s);
  EXPECT_GT(huge.cpuStepMemoryEstimate(), uint64_t{1} << 60);
}


// The message of merging `yaml` as file "bad.yaml" and validating it, or "accepted".
std::string yamlError(const std::string& yaml) {
  Config c;
  try {
    c.mergeYamlText(yaml, "bad.yaml");
    c.validate();
    return "accepted";
  } catch (const ConfigError& e) {
    return e.what();
  }
}

// A mapping key that is not a plain name (a list, a mapping, nothing) is one message naming its line. It was
// yaml-cpp's bad-conversion exception, which nothing caught: SIGABRT in training, eval and --print-config.
TEST(HostileConfig, AKeyThatIsNotAPlainNameIsOneMessageNotACrash) {
  for (const char* yaml : {"train:\n  ? [a, b]\n  : 1\n", "? {a: 1}\n: 2\n", "train:\n  ? !!null\n  : 1\n"}) {
    const std::string m = yamlError(yaml);
    EXPECT_EQ(m.rfind("bad.yaml: line ", 0), 0u) << yaml << " -> " << m;
    EXPECT_NE(m.find("is not a plain name"), std::string::npos) << yaml << " -> " << m;
  }
}

// Aliases of mappings nested 20 deep name 4^19 paths in 862 bytes; the loader walked every one of them (for ever).
// The config is read as it is shaped, sections of scalar keys, so it stops at the first key that is none of those.
TEST(HostileConfig, NestedAliasesOfMappingsAreRefusedAtOnce) {
  std::string defs = "  a0: &a0 {x: 1}\n";
  for (int i = 1; i < 20; ++i) {
    const std::string p = "*a" + std::to_string(i - 1);
    defs += "  a" + std::to_string(i) + ": &a" + std::to_string(i) + " {a: " + p + ", b: " + p + ", c: " + p +
            ", d: " + p + "}\n";
  }
  for (const std::string& yaml : {"defs:\n" + defs + "train: *a19\n", "train: *a19\ndefs:\n" + defs}) {
    const auto start = std::chrono::steady_clock::now();
    const std::string m = yamlError(yaml);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1)) << m;
    EXPECT_EQ(m.rfind("bad.yaml: ", 0), 0u) << m;
  }
  // Aliases of scalars, and of a mapping used once as a section, read as written.
  Config c;
  c.mergeYamlText("train: &t\n  steps: &n 7\n  warmup_steps: *n\n", "ok.yaml");
  EXPECT_EQ(c.train.steps, 7);
  EXPECT_EQ(c.train.warmup_steps, 7);
}

// Only the first YAML document was read: "---", a comment and another "---" trained on the defaults with exit 0.
TEST(HostileConfig, AFileOfSeveralYamlDocumentsIsRefused) {
  for (const char* yaml : {"---\n# settings\n---\ntrain:\n  steps: 1\n", "train:\n  steps: 1\n---\ntrain:\n  lr: 1\n",
                           "---\n---\n"}) {
    const std::string m = yamlError(yaml);
    EXPECT_NE(m.find("bad.yaml: holds 2 YAML documents"), std::string::npos) << yaml << " -> " << m;
  }
  for (const char* one : {"---\ntrain:\n  steps: 7\n", "train:\n  steps: 7\n...\n", "---\ntrain:\n  steps: 7\n...\n"}) {
    Config c;
    c.mergeYamlText(one, "one.yaml");
    EXPECT_EQ(c.train.steps, 7) << one;
  }
  EXPECT_EQ(yamlError(""), "accepted");
  EXPECT_EQ(yamlError("# only a comment\n"), "accepted");
}

// A ',' outside [...] or {...} made yaml-cpp's LoadAll hand out empty documents for ever (jbeder/yaml-cpp#1040),
// growing by gigabytes (found by taehv_config_fuzz, ", au/-"). Now one line naming the place, at once; read in a child
// bounded to 1 GiB and 10 s, so the old loop fails this test instead of hanging it.
TEST(HostileConfig, ACommaWhereAValueShouldStartIsOneLineNotAHang) {
  char tmpl[] = "/tmp/taehv-cfg-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string path = dir + "/comma.yaml";
  for (const auto& [yaml, place] : std::vector<std::pair<std::string, std::string>>{
           {", au/-\n", "line 1, column 1"}, {"# settings\n,\n", "line 2, column 1"},
           {"{train: {steps: 1}},\n", "line 1, column 20"}}) {
    std::ofstream(path) << yaml;
    EXPECT_EQ(configErrorInChild(path), path + ": not valid YAML: yaml-cpp: error at " + place +
                                            ": a ',' outside [...] or {...} starts no value")
        << yaml;
  }
  std::filesystem::remove_all(dir);
  // A ',' inside a flow collection, or inside a value, is YAML as before.
  Config c;
  c.mergeYamlText("train: {steps: 3, lr: 0.5}\noutput:\n  dir: a,b\n", "ok.yaml");
  EXPECT_EQ(c.train.steps, 3);
  EXPECT_EQ(c.output.dir, "a,b");
}

// `train: 5` suggested 'train.lr': a section given a value is named as a section, with the keys it holds.
TEST(HostileConfig, ASectionGivenAValueIsNamedAsASection) {
  std::string set_message;
  try {
    Config().applyOverride("train=5");
  } catch (const ConfigError& e) {
    set_message = e.what();
  }
  for (const std::string& m : {yamlError("train: 5\n"), set_message}) {
    EXPECT_NE(m.find("'train' is a section, not a value"), std::string::npos) << m;
    EXPECT_NE(m.find("steps, max_minutes, batch_per_rank, grad_accum"), std::string::npos) << m;
    EXPECT_EQ(m.find("did you mean"), std::string::npos) << m;
  }
  EXPECT_EQ(yamlError("train:\n"), "accepted") << "an empty section sets nothing";
}

// Every numeric key has a range, checked when the value is set (a --set or a YAML value), in a message that names the
// key, the value as given and the range. Before, eval.size=1000000000 was accepted (the first evaluation died in
// libtorch), data.prefetch=1000000000 grew memory ~100 MB/s, train.threads=4294967297 ran with 1 thread.
TEST(HostileConfig, EveryNumericKeyRefusesAValueOutsideItsRangeWhenItIsSet) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"eval.size=1000000000", "eval.size must be 0 (= data.size) or in [8, 8192], got 1000000000"},
      {"data.prefetch=1000000000", "data.prefetch must be in [1, 64]"},
      {"train.threads=4294967297", "train.threads must be 0 (auto) or in [1, 1024], got 4294967297"},
      {"eval.size=1e9", "config key 'eval.size': '1e9' is not an integer in 0 (= data.size) or [8, 8192]"},
  };
  for (const auto& [set, expected] : cases) {
    Config c;
    try {
      c.applyOverride(set);
      ADD_FAILURE() << set << " accepted when it was set";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << set << " -> " << e.what();
    }
  }
  // The class: every key whose value is a number refuses the largest 64-bit integer and -1 (train.seed takes any
  // 64-bit integer), from --set and from YAML alike.
  int numeric = 0;
  for (const std::string& key : Config::keys()) {
    const std::string value = Config().get(key);
    if (key == "train.seed" || !parseNumber(value)) continue;
    ++numeric;
    for (const std::string bad : {"9223372036854775807", "-1"}) {
      Config c;
      try {
        c.set(key, bad);
        ADD_FAILURE() << key << "=" << bad << " accepted";
      } catch (const ConfigError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find(key), std::string::npos) << m;
        EXPECT_NE(m.find(bad), std::string::npos) << m;
        EXPECT_TRUE(m.find(" must be ") != std::string::npos || m.find(" is not ") != std::string::npos) << m;
      }
    }
    const std::string section = key.substr(0, key.find('.'));
    const std::string m = yamlError(section + ":\n  " + key.substr(key.find('.') + 1) + ": 9223372036854775807\n");
    EXPECT_EQ(m.rfind("bad.yaml: ", 0), 0u) << m;
    EXPECT_NE(m.find(key), std::string::npos) << m;
  }
  EXPECT_GE(numeric, 35);
}

}  // namespace
}  // namespace taehv::train
