// The k8s backend: maps Kubeflow Trainer v2 TrainJob, JobSet, Indexed Job, Kubeflow PyTorchJob and KubeBrain-style
// environments to a node plan (taehv/k8s/k8s_mapping.h), and renders/submits jobs (taehv/k8s/k8s_render.h).
#include <cstdio>

#include "taehv/env.h"
#include "taehv/k8s/k8s_mapping.h"
#include "taehv/k8s/k8s_render.h"
#include "taehv/plugin_api.h"
#include "taehv/process/run.h"
#include "taehv/torch_env/container_plan.h"

namespace taehv::k8s {
namespace {

void logError(const HostContext& host, const std::string& message) {
  if (host.log) host.log(LogLevel::kError, message);
}

class K8sBackend final : public Backend {
 public:
  Detection detect(const HostContext& host) const override { return detectK8s(host.env); }

  PlanResult plan(const HostContext& host, const PlanRequest& request) const override {
    return planK8s(host.env, request);
  }

  std::vector<OptionSpec> options() const override { return {torch_env::masterWaitOption()}; }

  std::vector<CommandSpec> commands() const override {
    return {{"render",
             "print a Kubeflow Trainer v2 TrainJob + runtime, a JobSet, an Indexed Job + headless Service or a "
             "Kubeflow PyTorchJob (v1) as YAML",
             k8sRenderOptions(), Operands::kCommand, "", k8sRenderHelp()},
            {"submit", "render the job and pipe it to `kubectl apply -f -`", k8sRenderOptions(), Operands::kCommand, "",
             k8sRenderHelp()}};
  }

  int runCommand(const HostContext& host, const std::string& name, const CommandArgs& args) override {
    if (name != "render" && name != "submit") {
      logError(host, "unknown k8s command '" + name + "' (commands: render, submit)");
      return 2;
    }
    K8sRenderOptions options;
    if (Status parsed = parseK8sRenderArgs(args, options); !parsed.ok()) {
      logError(host, "k8s " + name + ": " + parsed.error + "; see taehv-run --backend k8s " + name + " --help");
      return 2;
    }
    const std::string yaml = renderK8s(options);
    if (name == "render") {
      std::fwrite(yaml.data(), 1, yaml.size(), stdout);
      std::fflush(stdout);
      return std::ferror(stdout) ? 1 : 0;
    }
    // Only the host's PATH is searched; an unset or empty one finds nothing (rather than guessing the current folder).
    const auto path = envValue(host.env, "PATH");
    const std::string kubectl = path ? process::findExecutable("kubectl", *path) : "";
    if (kubectl.empty()) {
      logError(host,
               "k8s submit: kubectl not found on PATH; install kubectl, or run `taehv-run --backend k8s "
               "render ...` and apply the YAML where kubectl works");
      return 1;
    }
    // kubectl's own messages go to our stdout and stderr.
    const process::RunResult applied = process::runProgram({{kubectl, "apply", "-f", "-"}, host.env, yaml, false});
    if (!applied.started()) {
      logError(host, "k8s submit: " + applied.spawn_error);
      return 1;
    }
    const int rc = applied.status();
    if (rc != 0) logError(host, "k8s submit: `kubectl apply -f -` failed with exit code " + std::to_string(rc));
    return rc;
  }
};

}  // namespace
}  // namespace taehv::k8s

TAEHV_DEFINE_PLUGIN(taehv::k8s::K8sBackend, "k8s", "1.0.0",
                    "Kubernetes: Trainer v2 TrainJob, JobSet, Indexed Job, PyTorchJob, KubeBrain-style; "
                    "render/submit jobs")
