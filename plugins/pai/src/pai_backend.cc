// The pai backend: maps Alibaba Cloud PAI-DLC's environment to a node plan and renders/submits DLC jobs
// (taehv/pai/pai_job.h).
#include <cstdio>

#include "taehv/env.h"
#include "taehv/pai/pai_job.h"
#include "taehv/plugin_api.h"
#include "taehv/process/run.h"
#include "taehv/torch_env/container_plan.h"

namespace taehv::pai {
namespace {

void logError(const HostContext& host, const std::string& message) {
  if (host.log) host.log(LogLevel::kError, message);
}

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
    if (name != "render" && name != "submit") {
      logError(host, "unknown pai command '" + name + "' (commands: render, submit)");
      return 2;
    }
    PaiRenderOptions options;
    if (Status parsed = parsePaiRenderArgs(args, options); !parsed.ok()) {
      logError(host, "pai " + name + ": " + parsed.error + "; see taehv-run --backend pai " + name + " --help");
      return 2;
    }
    const std::string body = renderPai(options);
    if (name == "render") {
      std::fwrite(body.data(), 1, body.size(), stdout);
      std::fflush(stdout);
      return std::ferror(stdout) ? 1 : 0;
    }
    // Only the host's PATH is searched; an unset or empty one finds nothing (rather than guessing the current folder).
    const auto path = envValue(host.env, "PATH");
    const std::string aliyun = path ? process::findExecutable("aliyun", *path) : "";
    if (aliyun.empty()) {
      logError(host,
               "pai submit: the Alibaba Cloud CLI `aliyun` is not on PATH; install and configure it, or "
               "paste the output of `taehv-run --backend pai render ...` into the DLC console/OpenAPI");
      return 1;
    }
    // ROA-style call of the DLC OpenAPI; the body goes as an argument (aliyun reads no stdin, it gets EOF); its
    // own messages go to our stdout and stderr.
    const process::RunResult sent = process::runProgram(
        {{aliyun, "pai-dlc", "POST", "/api/v1/jobs", "--header", "Content-Type=application/json", "--body", body},
         host.env, std::string(), false});
    if (!sent.started()) {
      logError(host, "pai submit: " + sent.spawn_error);
      return 1;
    }
    const int rc = sent.status();
    if (rc != 0)
      logError(host, "pai submit: `aliyun pai-dlc POST /api/v1/jobs` failed with exit code " + std::to_string(rc));
    return rc;
  }
};

}  // namespace
}  // namespace taehv::pai

TAEHV_DEFINE_PLUGIN(taehv::pai::PaiBackend, "pai", "1.0.0",
                    "Alibaba Cloud PAI-DLC: map its PyTorch environment; render/submit DLC jobs")
