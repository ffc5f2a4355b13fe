// The SLURM backend: detection and node plan (slurm_env.h), plus the sub-commands
//   hostnames [LIST]   one host per line, like `scontrol show hostnames` (LIST defaults to SLURM_JOB_NODELIST)
//   hostlist LIST...   the compressed form, like `scontrol show hostlist`
//   submit ...         render an sbatch script and submit it (sbatch_script.h)
#pragma once

#include <string>
#include <vector>

#include "taehv/plugin_api.h"

namespace taehv::slurm {

/// The backend class the plugin's factory creates.
class SlurmBackend final : public Backend {
 public:
  Detection detect(const HostContext& host) const override;
  PlanResult plan(const HostContext& host, const PlanRequest& request) const override;
  std::vector<OptionSpec> options() const override;
  std::vector<CommandSpec> commands() const override;
  int runCommand(const HostContext& host, const std::string& name, const std::vector<std::string>& args) override;
};

}  // namespace taehv::slurm
