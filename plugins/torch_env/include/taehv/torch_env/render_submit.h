// The `render` and `submit` sub-commands of the container backends (k8s, pai): `render` prints the job the backend
// rendered, `submit` hands the same text to the platform's own CLI (kubectl, aliyun) and returns its exit code.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "taehv/checked.h"
#include "taehv/plugin_api.h"

namespace taehv::torch_env {

/// How `submit` hands a rendered job to the platform's CLI.
struct SubmitTool {
  std::string program;  ///< looked up on the host's PATH only (unset or empty PATH: not found), e.g. "kubectl"
  /// The arguments after the program for the rendered `text` (e.g. {"apply", "-f", "-"}).
  std::function<std::vector<std::string>(const std::string& text)> arguments;
  bool text_on_stdin = false;  ///< the rendered text is the tool's stdin (else it gets EOF)
  std::string shown;           ///< the command as a failure names it, e.g. "kubectl apply -f -"
  std::string missing;         ///< the message when `program` is not on PATH: how to install it or do without
};

/// Runs sub-command `name` ("render" or "submit") of backend `backend`: `rendered` is the job's text, or why the
/// options were refused (then exit 2, with a pointer to `--help`). The tool's own output goes to our stdout and
/// stderr; a tool that fails is named with its exit code, which is returned. An unknown `name` is exit 2.
int runRenderOrSubmit(const HostContext& host, const std::string& backend, const std::string& name,
                      const Checked<std::string>& rendered, const SubmitTool& tool);

}  // namespace taehv::torch_env
