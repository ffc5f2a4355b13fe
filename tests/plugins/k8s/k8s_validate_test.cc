// Offline schema validation of `taehv-run --backend k8s render` output with the project's validator
// (tests/infra/k8s/k8s_validate.sh --strict: Kubernetes OpenAPI schema via npm kubernetes-models, unknown fields
// rejected), of the committed examples, and proof that a broken manifest is caught. Needs nodejs and npm; the
// first run installs the npm packages into /tmp (about 15 s).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "plugin_host.h"

namespace taehv::k8s {
namespace {

namespace fs = std::filesystem;
using testing::CommandOutput;
using testing::joinLogs;
using testing::readFile;
using testing::writeFile;

CommandOutput render(const std::vector<std::string>& args) {
  return testing::runPluginCommand(testing::sharedPlugin("k8s"), {{"PATH", "/usr/bin:/bin"}}, "render", args);
}

std::string tempDir() { return testing::makeTempDir(); }

std::string validator() { return testing::sourceDir() + "/tests/infra/k8s/k8s_validate.sh"; }

/// Runs the validator; returns its exit code and its report in `report`.
int validate(const std::vector<std::string>& files, std::string& report) {
  const std::string dir = tempDir();
  std::string cmd = validator() + " --strict";
  for (const auto& f : files) cmd += " '" + f + "'";
  cmd += " > " + dir + "/report 2>&1";
  int status = std::system(cmd.c_str());
  report = readFile(dir + "/report");
  fs::remove_all(dir);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

class K8sValidate : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = tempDir(); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string renderTo(const std::string& file, const std::vector<std::string>& args) {
    auto out = render(args);
    EXPECT_EQ(out.rc, 0) << joinLogs(out);
    writeFile(dir_ + "/" + file, out.out);
    return dir_ + "/" + file;
  }
  std::string dir_;
};

TEST_F(K8sValidate, RenderedManifestsPassStrictValidation) {
  std::vector<std::string> files = {
      renderTo("indexed.yaml", {"--nodes", "4", "--gpus-per-node", "8", "--image", "img:1", "--namespace", "ml",
                                "--shm-size", "16Gi", "--", "taehv-train", "--config", "a b.yaml"}),
      renderTo("cpu.yaml", {"--nodes", "1", "--gpus-per-node", "0", "--image", "img:1"}),
      renderTo("ptj.yaml", {"--nodes", "3", "--gpus-per-node", "8", "--image", "img:1", "--flavor", "pytorchjob"}),
      renderTo("ptj1.yaml", {"--nodes", "1", "--gpus-per-node", "1", "--image", "img:1", "--flavor", "pytorchjob"})};
  std::string report;
  ASSERT_EQ(validate(files, report), 0) << report;
  // Each document was checked strictly: Service + Job for both Indexed renders, and both PyTorchJobs.
  size_t strict = 0;
  for (size_t pos = 0; (pos = report.find("(strict)", pos)) != std::string::npos; ++pos) ++strict;
  EXPECT_EQ(strict, 6u) << report;
}

TEST_F(K8sValidate, CommittedExamplesAreValidAndCurrent) {
  const std::string examples = testing::sourceDir() + "/examples/k8s";
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(examples)) {
    if (e.path().extension() == ".yaml") files.push_back(e.path());
  }
  ASSERT_GE(files.size(), 2u) << "examples/k8s should hold rendered examples";
  std::string report;
  EXPECT_EQ(validate(files, report), 0) << report;
  // Each example records the command that made it on its first line ("# generated: taehv-run ... render ...").
  for (const auto& f : files) {
    const std::string text = readFile(f);
    const std::string prefix = "# generated: taehv-run --backend k8s render ";
    ASSERT_EQ(text.rfind(prefix, 0), 0u) << f;
    std::istringstream line(text.substr(prefix.size(), text.find('\n') - prefix.size()));
    std::vector<std::string> args;
    for (std::string a; line >> a;) args.push_back(a);
    auto out = render(args);
    ASSERT_EQ(out.rc, 0) << joinLogs(out);
    EXPECT_EQ(text.substr(text.find('\n') + 1), out.out)
        << f << " is stale: regenerate it (see examples/k8s/README.md)";
  }
}

// A render with a field typo must be caught, or the validation above proves nothing.
TEST_F(K8sValidate, BrokenManifestsAreCaught) {
  const std::string good = render({"--nodes", "2", "--gpus-per-node", "8", "--image", "img:1"}).out;
  struct Break {
    std::string file, from, to;
  };
  const Break breaks[] = {
      {"typo-pod.yaml", "subdomain:", "subdomian:"},                         // unknown field deep in the pod spec
      {"typo-job.yaml", "completionMode:", "completionMod:"},                // unknown field in JobSpec
      {"bad-policy.yaml", "restartPolicy: Never", "restartPolicy: Always"},  // API-server rule for Jobs
      {"bad-type.yaml", "completions: 2", "completions: two"},               // schema type
  };
  std::vector<std::string> files;
  for (const auto& b : breaks) {
    std::string text = good;
    auto pos = text.find(b.from);
    ASSERT_NE(pos, std::string::npos) << b.from;
    text.replace(pos, b.from.size(), b.to);
    writeFile(dir_ + "/" + b.file, text);
    files.push_back(dir_ + "/" + b.file);
  }
  std::string ptj = render({"--nodes", "2", "--gpus-per-node", "8", "--image", "img:1", "--flavor", "pytorchjob"}).out;
  auto pos = ptj.find("volumeMounts:");
  ASSERT_NE(pos, std::string::npos);
  ptj.replace(pos, 13, "volumeMount:");
  writeFile(dir_ + "/typo-ptj.yaml", ptj);
  files.push_back(dir_ + "/typo-ptj.yaml");
  // One validator run for all of them (each run costs seconds); every broken document must be named.
  std::string report;
  EXPECT_EQ(validate(files, report), 1) << report;
  for (const auto& b : breaks) {
    EXPECT_NE(report.find("INVALID " + dir_ + "/" + b.file + "#1 batch/v1/Job"), std::string::npos) << b.file << "\n"
                                                                                                    << report;
    EXPECT_NE(report.find("valid   " + dir_ + "/" + b.file + "#0 v1/Service"), std::string::npos)
        << "the untouched Service stays valid\n"
        << report;
  }
  EXPECT_NE(report.find("INVALID " + dir_ + "/typo-ptj.yaml#0 kubeflow.org/v1/PyTorchJob"), std::string::npos)
      << report;
}

}  // namespace
}  // namespace taehv::k8s
