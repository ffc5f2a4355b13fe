// The k8s backend: maps Kubeflow Trainer v2 TrainJob, JobSet, Indexed Job, Kubeflow PyTorchJob and KubeBrain-style
// environments to a node plan (taehv/k8s/k8s_mapping.h), and renders/submits jobs (taehv/k8s/k8s_render.h).
#include "taehv/k8s/k8s_mapping.h"
#include "taehv/k8s/k8s_render.h"
#include "taehv/plugin_api.h"
#include "taehv/torch_env/container_plan.h"
#include "taehv/torch_env/render_submit.h"

namespace taehv::k8s {
namespace {

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
    K8sRenderOptions options;
    const Status parsed = parseK8sRenderArgs(args, options);
    const Checked<std::string> yaml = parsed.ok() ? Checked<std::string>{"", renderK8s(options)}
                                                  : Checked<std::string>{parsed.error};
    torch_env::SubmitTool kubectl;
    kubectl.program = "kubectl";
    kubectl.arguments = [](const std::string&) { return std::vector<std::string>{"apply", "-f", "-"}; };
    kubectl.text_on_stdin = true;  // kubectl's own messages go to our stdout and stderr
    kubectl.shown = "kubectl apply -f -";
    kubectl.missing = "kubectl not found on PATH; install kubectl, or run `taehv-run --backend k8s render ...` and "
                      "apply the YAML where kubectl works";
    return torch_env::runRenderOrSubmit(host, "k8s", name, yaml, kubectl);
  }

};

}  // namespace
}  // namespace taehv::k8s

TAEHV_DEFINE_PLUGIN(taehv::k8s::K8sBackend, "k8s", "1.0.0",
                    "Kubernetes: Trainer v2 TrainJob, JobSet, Indexed Job, PyTorchJob, KubeBrain-style; "
                    "render/submit jobs")
