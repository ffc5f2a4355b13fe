// Running a platform CLI (kubectl, aliyun) with a rendered job on its stdin.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "taehv/plugin_api.h"

namespace taehv {

/// Absolute path of an executable `name` found on env["PATH"] (not this process's PATH: tests fake it).
std::optional<std::string> findOnPath(const std::string& name, const Env& env);

/// Runs `program` with `args` and environment `env`, writes `input` to its stdin and closes it; its stdout and
/// stderr are ours. Returns its exit code (128 + signal if killed), or -1 with `error` set if it could not start.
int runWithInput(const std::string& program, const std::vector<std::string>& args, const std::string& input,
                 const Env& env, std::string& error);

}  // namespace taehv
