// The pai backend: maps Alibaba Cloud PAI-DLC's environment to a node plan and renders/submits DLC jobs
// (taehv/pai/pai_job.h).
#include "taehv/pai/pai_job.h"
#include "taehv/plugin_api.h"
#include "taehv/torch_env/container_plan.h"
#include "taehv/torch_env/render_submit.h"

namespace taehv::pai {
namespace {

class PaiBackend final : public Backend {
 public:
  Detection detect(const HostContext& host) const override { return detectPai(host.env); }

  PlanResult plan(const HostContext& host, const PlanRequest& request) const override {
    return planPai(host.env, request);
  }

  std::vector<OptionSpec> options() const override { return {torch_env::masterWaitOption()}; }

  std::vector<CommandSpec> commands() const override {
    return {{"render", "print a PAI-DLC CreateJob request (JSON) for a PyTorchJob running taehv-run",
             paiRenderOptions(), Operands::kCommand, "", paiRenderHelp()},
            {"submit", "render the job and send it with `aliyun pai-dlc POST /api/v1/jobs`", paiRenderOptions(),
             Operands::kCommand, "", paiRenderHelp()}};
  }

  int runCommand(const HostContext& host, const std::string& name, const CommandArgs& args) override {
    PaiRenderOptions options;
    const Status parsed = parsePaiRenderArgs(args, options);
    const Checked<std::string> body = parsed.ok() ? Checked<std::string>{"", renderPai(options)}
                                                  : Checked<std::string>{parsed.error};
    // ROA-style call of the DLC OpenAPI; the body goes as an argument (aliyun reads no stdin, it gets EOF).
    torch_env::SubmitTool aliyun;
    aliyun.program = "aliyun";
    aliyun.arguments = [](const std::string& text) {
      return std::vector<std::string>{"pai-dlc", "POST", "/api/v1/jobs", "--header", "Content-Type=application/json",
                                      "--body", text};
    };
    aliyun.shown = "aliyun pai-dlc POST /api/v1/jobs";
    aliyun.missing = "the Alibaba Cloud CLI `aliyun` is not on PATH; install and configure it, or paste the output of "
                     "`taehv-run --backend pai render ...` into the DLC console/OpenAPI";
    return torch_env::runRenderOrSubmit(host, "pai", name, body, aliyun);
  }

};

}  // namespace
}  // namespace taehv::pai

TAEHV_DEFINE_PLUGIN(taehv::pai::PaiBackend, "pai", "1.0.0",
                    "Alibaba Cloud PAI-DLC: map its PyTorch environment; render/submit DLC jobs")
