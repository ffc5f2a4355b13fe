// Issues 3 and 4: weights exported by saveWeights load unchanged in the upstream Python TAEHV. The Python side
// (upstream_load.py, run by the project's Python, .venv/ with torch 2.13) reads the file with a strict safetensors reader written from
// the format spec (the contract of safetensors.torch.load_file), builds the Python TAEHV of bench/model/taehv_py.py,
// calls load_state_dict(strict=True) and decodes the reference noise latents. Fails when that Python cannot import
// torch (scripts/setup.sh makes it).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/torch.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "taehv/model/safetensors.h"
#include "taehv/model/taehv.h"
#include "infra/built_programs.h"
#include "test_util.h"

namespace taehv {
namespace {

using testing::referenceDir;
using testing::TempDir;

const std::string kPython = ::taehv::testing::besideThisTest(TAEHV_TEST_PYTHON);  ///< the project's .venv (scripts/setup.sh), not the one on PATH

struct RunResult {
  int exit_code = -1;
  std::string output;  ///< stdout and stderr together
};

/// Runs `command` through /bin/sh, capturing stdout and stderr. Arguments are quoted by the caller.
RunResult runCommand(const std::string& command) {
  RunResult result;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    result.output = "popen failed";
    return result;
  }
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) {
    result.output.append(buffer.data(), n);
  }
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  }
  return out + "'";
}

std::string sourceDir() {
  const char* dir = std::getenv("TAEHV_SOURCE_DIR");
  return dir != nullptr ? dir : ".";
}

/// upstream_load.py on `weights`; exit 0 means loaded strictly and decoded the reference within 2e-5.
RunResult runUpstreamLoad(const std::string& weights) {
  const std::string script = sourceDir() + "/tests/trainer/model/upstream_load.py";
  return runCommand(std::string(kPython) + " " + quote(script) + " " + quote(weights) + " " +
                    quote(referenceDir()) + " " + quote(sourceDir()));
}

class UpstreamLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::useTestThreads();
    const RunResult probe = runCommand(std::string(kPython) + " -c 'import torch'");
    if (probe.exit_code != 0) {
      FAIL() << kPython << " cannot import torch (run scripts/setup.sh): " << probe.output;
    }
  }

  /// The official taehv weights loaded by the C++ loader.
  TAEHV loadedModel() {
    TAEHV model(TAEHVOptions::forVariant("taehv"));
    loadWeights(*model, referenceDir() + "/taehv.f16.safetensors");
    return model;
  }
};

TEST_F(UpstreamLoadTest, F32ExportLoadsStrictlyAndDecodesTheReference) {
  TempDir tmp;
  const std::string path = tmp.file("weights.f32.safetensors");
  saveWeights(*loadedModel(), path, torch::kFloat);
  const RunResult r = runUpstreamLoad(path);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("max_abs_error="), std::string::npos) << r.output;
  std::printf("F32 export: %s", r.output.c_str());
}

TEST_F(UpstreamLoadTest, F16ExportLoadsStrictlyAndDecodesTheReference) {
  TempDir tmp;
  const std::string path = tmp.file("weights.f16.safetensors");
  saveWeights(*loadedModel(), path, torch::kHalf);
  const RunResult r = runUpstreamLoad(path);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("max_abs_error="), std::string::npos) << r.output;
  std::printf("F16 export: %s", r.output.c_str());
}

// The check can fail: an export with one tensor renamed, one reshaped, one missing, or a damaged header is
// rejected by the Python side with the reason.
TEST_F(UpstreamLoadTest, CorruptedExportsAreRejected) {
  TempDir tmp;
  const TAEHV model = loadedModel();
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& item : model->named_parameters(/*recurse=*/true)) {
    tensors.emplace(item.key(), item.value().detach().clone());
  }
  ASSERT_EQ(tensors.count("decoder.1.weight"), 1U);
  ASSERT_EQ(tensors.count("encoder.0.bias"), 1U);

  auto renamed = tensors;
  renamed["decoder.1.weightx"] = renamed.at("decoder.1.weight");
  renamed.erase("decoder.1.weight");
  writeSafetensors(tmp.file("renamed.safetensors"), renamed, torch::kFloat);
  RunResult r = runUpstreamLoad(tmp.file("renamed.safetensors"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("decoder.1.weightx"), std::string::npos) << r.output;

  auto reshaped = tensors;
  reshaped["encoder.0.bias"] = torch::zeros({63});
  writeSafetensors(tmp.file("reshaped.safetensors"), reshaped, torch::kFloat);
  r = runUpstreamLoad(tmp.file("reshaped.safetensors"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("size mismatch for encoder.0.bias"), std::string::npos) << r.output;

  auto missing = tensors;
  missing.erase("encoder.0.bias");
  writeSafetensors(tmp.file("missing.safetensors"), missing, torch::kFloat);
  r = runUpstreamLoad(tmp.file("missing.safetensors"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Missing key(s)"), std::string::npos) << r.output;

  // A correct export, then its last byte cut off: the strict reader must refuse the short buffer.
  const std::string truncated = tmp.file("truncated.safetensors");
  saveWeights(*model, truncated, torch::kFloat);
  std::filesystem::resize_file(truncated, std::filesystem::file_size(truncated) - 1);
  r = runUpstreamLoad(truncated);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cannot read weights"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace taehv
