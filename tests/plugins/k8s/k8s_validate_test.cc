// Offline schema validation of `taehv-run --backend k8s render` output with the project's validator
// (tests/infra/k8s/k8s_validate.sh --strict: Kubernetes OpenAPI schema via npm kubernetes-models, unknown fields
// rejected), of the committed examples, and proof that a broken manifest is caught. Needs nodejs and npm; the
// first run installs the npm packages into /tmp (about 15 s).
// JobSet and Kubeflow Trainer v2 resources are checked against their upstream CRDs (openAPIV3Schema, strict on
// unknown fields) with ../shared/infra/k8s_crd_validate.sh; the built-in kinds beside them (the token Secret) with
// the project's validator.
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

/// Runs `command` (a validator and its options) on `files`; returns its exit code and its report in `report`.
int runValidator(const std::string& command, const std::vector<std::string>& files, std::string& report) {
  const std::string dir = tempDir();
  std::string cmd = command;
  for (const auto& f : files) cmd += " '" + f + "'";
  cmd += " > " + dir + "/report 2>&1";
  int status = std::system(cmd.c_str());
  report = readFile(dir + "/report");
  fs::remove_all(dir);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/// The project's validator of built-in kinds (and PyTorchJob), strict.
int validate(const std::vector<std::string>& files, std::string& report) {
  return runValidator(validator() + " --strict", files, report);
}

/// The upstream CRD validator of JobSet and Trainer v2 resources (strict on unknown fields; CEL rules not run).
int validateCrds(const std::vector<std::string>& files, std::string& report) {
  return runValidator("bash " + testing::sourceDir() + "/../shared/infra/k8s_crd_validate.sh", files, report);
}

/// Splits a rendered manifest into its built-in documents and its custom resources (JobSet, Trainer v2).
std::pair<std::string, std::string> splitBuiltinAndCustom(const std::string& yaml) {
  std::string builtin, custom;
  size_t start = 0;
  while (start < yaml.size()) {
    size_t end = yaml.find("\n---\n", start);
    const std::string doc = yaml.substr(start, end == std::string::npos ? std::string::npos : end - start) + "\n";
    const bool is_custom = doc.find("apiVersion: jobset.x-k8s.io/") != std::string::npos ||
                           doc.find("apiVersion: trainer.kubeflow.org/") != std::string::npos;
    std::string& to = is_custom ? custom : builtin;
    to += (to.empty() ? "" : "---\n") + doc;
    if (end == std::string::npos) break;
    start = end + 5;
  }
  return {builtin, custom};
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

// ---- JobSet and Kubeflow Trainer v2: the upstream CRDs ----

class K8sCrdValidate : public K8sValidate {
 protected:
  /// Renders `args`, writes its custom resources to NAME.yaml and its built-in documents to NAME-builtin.yaml.
  std::pair<std::string, std::string> renderSplit(const std::string& name, const std::vector<std::string>& args) {
    auto out = render(args);
    EXPECT_EQ(out.rc, 0) << joinLogs(out);
    auto [builtin, custom] = splitBuiltinAndCustom(out.out);
    writeFile(dir_ + "/" + name + ".yaml", custom);
    writeFile(dir_ + "/" + name + "-builtin.yaml", builtin);
    return {dir_ + "/" + name + ".yaml", dir_ + "/" + name + "-builtin.yaml"};
  }
};

TEST_F(K8sCrdValidate, TrainJobAndJobSetRendersPassStrictValidation) {
  const std::vector<std::string> base = {"--gpus-per-node", "8", "--image", "registry.example/taehv:1", "--namespace",
                                         "ml"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), base.begin(), base.end());  // before any `--`
    return more;
  };
  const std::pair<std::string, std::string> renders[] = {
      renderSplit("jobset", with({"--flavor", "jobset", "--nodes", "4", "--max-restarts", "3", "--shm-size", "16Gi",
                                  "--", "taehv-train", "--config", "a b.yaml"})),
      renderSplit("jobset1", {"--flavor", "jobset", "--nodes", "1", "--gpus-per-node", "0", "--image", "img:1"}),
      renderSplit("trainjob",
                  with({"--flavor", "trainjob", "--nodes", "2", "--max-restarts", "2", "--", "taehv-train"})),
      renderSplit("trainjob-cluster", with({"--flavor", "trainjob", "--nodes", "3", "--runtime-kind",
                                            "ClusterTrainingRuntime", "--runtime", "taehv-torch"}))};
  std::vector<std::string> custom, builtin;
  for (const auto& [c, b] : renders) {
    custom.push_back(c);
    builtin.push_back(b);
  }
  std::string report;
  ASSERT_EQ(validateCrds(custom, report), 0) << report;
  // Two JobSets, and a runtime plus a TrainJob for each TrainJob render.
  EXPECT_NE(report.find("6 custom resource(s) checked, 0 invalid"), std::string::npos) << report;
  ASSERT_EQ(validate(builtin, report), 0) << report;
  size_t secrets = 0;
  for (size_t pos = 0; (pos = report.find("v1/Secret", pos)) != std::string::npos; ++pos) ++secrets;
  EXPECT_EQ(secrets, 4u) << "each render's token Secret, strictly\n" << report;
}

// Each deliberately broken rendering must be caught, or the validation above proves nothing.
TEST_F(K8sCrdValidate, BrokenRenderingsAreCaught) {
  const std::string jobset = render({"--flavor", "jobset", "--nodes", "2", "--gpus-per-node", "8", "--image", "img:1",
                                     "--max-restarts", "1"}).out;
  const std::string trainjob = render({"--flavor", "trainjob", "--nodes", "2", "--gpus-per-node", "8", "--image",
                                       "img:1"}).out;
  struct Break {
    std::string file;
    const std::string& source;
    std::string from, to, expect;  // expect: the validator's reason
  };
  const Break breaks[] = {
      // an unknown field, one deep in the pod template, a wrong type, a name that is not a DNS label
      {"js-unknown.yaml", jobset, "enableDNSHostnames:", "enableDnsHostnames:",
       "additional properties: enableDnsHostnames"},
      {"js-pod.yaml", jobset, "volumeMounts:", "volumeMount:", "additional properties: volumeMount"},
      {"js-type.yaml", jobset, "maxRestarts: 1", "maxRestarts: once", "maxRestarts must be integer"},
      {"js-name.yaml", jobset, "kind: JobSet\nmetadata:\n  name: taehv-train",
       "kind: JobSet\nmetadata:\n  name: Taehv_Train", "\"Taehv_Train\" is not a DNS-1123 label"},
      {"tj-unknown.yaml", trainjob, "runtimeRef:", "runtimeReference:", "additional properties: runtimeReference"},
      {"tj-type.yaml", trainjob, "numProcPerNode: 8", "numProcPerNode: eight", "numProcPerNode must be integer"},
      {"tj-runtime.yaml", trainjob, "mlPolicy:", "mlPolicies:", "additional properties: mlPolicies"},
      {"tj-name.yaml", trainjob, "kind: TrainJob\nmetadata:\n  name: taehv-train",
       "kind: TrainJob\nmetadata:\n  name: taehv.train.", "\"taehv.train.\" is not a DNS-1123 label"},
  };
  std::vector<std::string> files;
  for (const auto& b : breaks) {
    std::string text = splitBuiltinAndCustom(b.source).second;
    auto pos = text.find(b.from);
    ASSERT_NE(pos, std::string::npos) << b.from << "\n" << text;
    text.replace(pos, b.from.size(), b.to);
    writeFile(dir_ + "/" + b.file, text);
    files.push_back(dir_ + "/" + b.file);
  }
  // One validator run for all of them; every broken file must be named, for the reason it was broken.
  std::string report;
  EXPECT_EQ(validateCrds(files, report), 1) << report;
  for (const auto& b : breaks) {
    const std::string at = dir_ + "/" + b.file + "#";
    bool named = false, for_the_reason = false;
    std::istringstream lines(report);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind(at, 0) != 0) continue;
      named = true;
      for_the_reason |= line.find(b.expect) != std::string::npos;
    }
    EXPECT_TRUE(named) << b.file << " was not caught\n" << report;
    EXPECT_TRUE(for_the_reason) << b.file << ": caught, but not for " << b.expect << "\n" << report;
  }
  EXPECT_NE(report.find(" invalid"), std::string::npos) << report;
  EXPECT_EQ(report.find("8 custom resource(s) checked, 0 invalid"), std::string::npos) << report;
  // The broken Secret is the other validator's: a typo there is caught too.
  std::string secret = splitBuiltinAndCustom(jobset).first;
  secret.replace(secret.find("stringData:"), 11, "stringdata:");
  writeFile(dir_ + "/secret.yaml", secret);
  EXPECT_EQ(validate({dir_ + "/secret.yaml"}, report), 1) << report;
  EXPECT_NE(report.find("INVALID " + dir_ + "/secret.yaml#0 v1/Secret"), std::string::npos) << report;
}

}  // namespace
}  // namespace taehv::k8s
