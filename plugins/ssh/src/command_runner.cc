#include "taehv/ssh/command_runner.h"

namespace taehv::ssh {

std::vector<Captured> ProcessCommandRunner::runAll(const std::vector<std::vector<std::string>>& argvs,
                                                   const std::map<std::string, std::string>& env,
                                                   std::chrono::milliseconds timeout,
                                                   std::size_t max_parallel) {
  std::vector<process::RunRequest> requests;
  requests.reserve(argvs.size());
  for (const auto& argv : argvs) requests.push_back({argv, env, std::nullopt, true});
  return process::runPrograms(requests, timeout, max_parallel);
}

}  // namespace taehv::ssh
