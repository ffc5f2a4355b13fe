// taehv-run backend for processes started by Open MPI's mpirun: one MPI rank = one worker.
//
// mpirun already started every process, so this backend plans single-worker mode: taehv-run sets torchrun's
// environment from Open MPI's variables and replaces itself with the worker (no extra process):
//   OMPI_COMM_WORLD_RANK -> rank          OMPI_COMM_WORLD_SIZE -> world size (nnodes x per-node)
//   OMPI_COMM_WORLD_LOCAL_RANK -> local rank   OMPI_COMM_WORLD_LOCAL_SIZE -> processes per node
// The node rank follows from mpirun's default block mapping (--map-by slot/core): rank = node*local_size+local.
// mpirun does not provide a rendezvous address: MASTER_ADDR / MASTER_PORT come from the environment
// (`mpirun -x MASTER_ADDR -x MASTER_PORT`) or taehv-run's --master-addr / --master-port flags.
//
// Its sub-command `taehv-run --backend mpi mpirun --np N --master-addr HOST [...] [-- COMMAND]` prints the mpirun
// command line that starts such a job: the options are declared (CommandSpec) and parsed by taehv-run.
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "taehv/parse.h"
#include "taehv/plugin_api.h"
#include "taehv/shell_quote.h"

namespace {

const char* const kRank = "OMPI_COMM_WORLD_RANK";
const char* const kSize = "OMPI_COMM_WORLD_SIZE";
const char* const kLocalRank = "OMPI_COMM_WORLD_LOCAL_RANK";
const char* const kLocalSize = "OMPI_COMM_WORLD_LOCAL_SIZE";

/// Reads `name` from `env` as a non-negative int, or fails with what is wrong.
taehv::Status readCount(const taehv::Env& env, const char* name, int& out) {
  auto it = env.find(name);
  if (it == env.end()) return {std::string(name) + " is not set; start the job with Open MPI's mpirun"};
  const std::string& text = it->second;
  const std::optional<int> value = taehv::parseCount(text);
  if (!value) return {std::string(name) + "='" + text + "' is not a non-negative number"};
  out = *value;
  return {};
}

class MpiBackend final : public taehv::Backend {
 public:
  taehv::Detection detect(const taehv::HostContext& host) const override {
    taehv::Detection d;
    if (host.env.count(kRank) && host.env.count(kSize)) {
      d.confidence = 80;
      d.reason = std::string(kRank) + "=" + host.env.at(kRank) + " and " + kSize + " set (started by mpirun)";
    }
    return d;
  }

  taehv::PlanResult plan(const taehv::HostContext& host, const taehv::PlanRequest& request) const override {
    (void)request;
    taehv::PlanResult r;
    int rank = 0, size = 0, local_rank = 0, local_size = 0;
    for (const auto& [name, out] : {std::pair<const char*, int*>{kRank, &rank}, {kSize, &size},
                                    {kLocalRank, &local_rank}, {kLocalSize, &local_size}}) {
      r.error = readCount(host.env, name, *out).error;
      if (!r.ok()) return r;
    }
    if (size < 1 || local_size < 1 || rank >= size || local_rank >= local_size) {
      r.error = "inconsistent Open MPI environment: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                ", local rank " + std::to_string(local_rank) + " of " + std::to_string(local_size);
      return r;
    }
    if (size % local_size != 0 || (rank - local_rank) % local_size != 0) {
      r.error = "ranks are not laid out in equal blocks per node (rank " + std::to_string(rank) + ", local rank " +
                std::to_string(local_rank) + " of " + std::to_string(local_size) + ", world " +
                std::to_string(size) + "); run mpirun with the same number of slots per node and --map-by slot";
      return r;
    }
    taehv::NodePlan& p = r.value;
    p.single_worker.set(true, "rule: mpirun started this process");
    p.rank.set(rank, std::string("env ") + kRank);
    p.local_rank.set(local_rank, std::string("env ") + kLocalRank);
    p.nproc_per_node.set(local_size, std::string("env ") + kLocalSize);
    p.nnodes.set(size / local_size, std::string("rule: ") + kSize + " / " + kLocalSize);
    p.node_rank.set(rank / local_size, std::string("rule: ") + kRank + " / " + kLocalSize + " (block mapping)");
    auto addr = host.env.find("MASTER_ADDR");
    if (addr != host.env.end() && !addr->second.empty()) p.master_addr.set(addr->second, "env MASTER_ADDR");
    auto port = host.env.find("MASTER_PORT");
    if (port != host.env.end() && !port->second.empty()) {
      const std::optional<int> port_number = taehv::parsePort(port->second);
      if (!port_number) {
        r.error = "MASTER_PORT='" + port->second + "' is not a port number";
        return r;
      }
      p.master_port.set(*port_number, "env MASTER_PORT");
    }
    auto job = host.env.find("OMPI_MCA_orte_ess_jobid");
    if (job != host.env.end()) p.run_id.set(job->second, "env OMPI_MCA_orte_ess_jobid");
    if (!p.master_addr.has() && size / local_size > 1) {
      p.notes.push_back("mpirun gives no master address: pass -x MASTER_ADDR to mpirun or --master-addr");
    }
    return r;
  }

  std::vector<taehv::CommandSpec> commands() const override {
    return {{"mpirun",
             "print the mpirun command line that starts a job with this backend",
             {{"np", "N", "MPI processes in all, one worker each (required)"},
              {"master-addr", "HOST", "address of the host of rank 0 (required)"},
              {"master-port", "PORT",
               "its rendezvous port (default " + std::to_string(taehv::kDefaultMasterPort) + ")"},
              {"host", "LIST", "mpirun --host: the hosts and their slots, e.g. a:4,b:4"},
              {"export", "NAME", "also hand variable NAME to every rank (mpirun -x NAME; repeatable)", true}},
             taehv::Operands::kCommand,
             "",
             "Every rank runs taehv-run (this one's path), which runs COMMAND (default: its trainer).\n"}};
  }

  int runCommand(const taehv::HostContext& host, const std::string& name, const taehv::CommandArgs& args) override {
    const auto fail = [&](const std::string& message) {
      if (host.log) host.log(taehv::LogLevel::kError, "mpi " + name + ": " + message);
      return 2;
    };
    const std::string* np = taehv::optionValue(args.options, "np");
    const std::string* addr = taehv::optionValue(args.options, "master-addr");
    const std::string* port_text = taehv::optionValue(args.options, "master-port");
    const std::string* hosts = taehv::optionValue(args.options, "host");
    if (!np || !taehv::parseCount(*np, 1)) return fail("--np N is required: the number of MPI processes, at least 1");
    if (!addr) return fail("--master-addr HOST is required: where rank 0 runs");
    const std::optional<int> port = port_text ? taehv::parsePort(*port_text) : taehv::kDefaultMasterPort;
    if (!port) return fail("--master-port '" + *port_text + "' is not a port number (1-65535)");
    std::vector<std::string> argv = {"mpirun", "-np", *np};
    if (hosts) argv.insert(argv.end(), {"--host", *hosts});
    argv.insert(argv.end(), {"-x", "MASTER_ADDR=" + *addr, "-x", "MASTER_PORT=" + std::to_string(*port)});
    if (const auto it = args.options.find("export"); it != args.options.end()) {
      for (const std::string& variable : it->second) argv.insert(argv.end(), {"-x", variable});
    }
    argv.push_back(host.self_path);
    if (!args.command.empty()) {
      argv.push_back("--");
      argv.insert(argv.end(), args.command.begin(), args.command.end());
    }
    const std::string line = taehv::shellJoin(argv) + "\n";
    return std::fputs(line.c_str(), stdout) < 0 ? 1 : 0;
  }
};

}  // namespace

TAEHV_DEFINE_PLUGIN(MpiBackend, "mpi", "1.0.0", "Open MPI (mpirun): one MPI rank per worker")
