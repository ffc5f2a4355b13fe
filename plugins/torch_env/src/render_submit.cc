#include "taehv/torch_env/render_submit.h"

#include <cstdio>

#include "taehv/env.h"
#include "taehv/process/run.h"

namespace taehv::torch_env {
namespace {

void logError(const HostContext& host, const std::string& message) {
  if (host.log) host.log(LogLevel::kError, message);
}

}  // namespace

int runRenderOrSubmit(const HostContext& host, const std::string& backend, const std::string& name,
                      const Checked<std::string>& rendered, const SubmitTool& tool) {
  if (name != "render" && name != "submit") {
    logError(host, "unknown " + backend + " command '" + name + "' (commands: render, submit)");
    return 2;
  }
  if (!rendered.ok()) {
    logError(host, backend + " " + name + ": " + rendered.error + "; see taehv-run --backend " + backend + " " + name +
                       " --help");
    return 2;
  }
  const std::string& text = rendered.value;
  if (name == "render") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return std::ferror(stdout) ? 1 : 0;
  }
  // Only the host's PATH is searched; an unset or empty one finds nothing (rather than guessing the current folder).
  const auto path = envValue(host.env, "PATH");
  const std::string program = path ? process::findExecutable(tool.program, *path) : "";
  if (program.empty()) {
    logError(host, backend + " submit: " + tool.missing);
    return 1;
  }
  const std::vector<std::string> words = tool.arguments(text);
  std::vector<std::string> argv = {program};
  argv.insert(argv.end(), words.begin(), words.end());
  const process::RunResult ran =
      process::runProgram({argv, host.env, tool.text_on_stdin ? text : std::string(), false});
  if (!ran.started()) {
    logError(host, backend + " submit: " + ran.spawn_error);
    return 1;
  }
  const int rc = ran.status();
  if (rc != 0) logError(host, backend + " submit: `" + tool.shown + "` failed with exit code " + std::to_string(rc));
  return rc;
}

}  // namespace taehv::torch_env
