// The pure part of an SSH fan-out: from the filtered hosts, the user's generic launch options and the forwarded
// environment to one ssh command line per host. No I/O here, so every rule is unit-tested.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "taehv/checked.h"
#include "taehv/plugin_api.h"
#include "taehv/ssh/hostfile.h"

namespace taehv::ssh {

/// Fails with why the fan-out refuses the launch flags: --node-rank, --standalone and --restart-count are its own to set
/// for every host.
Status refusedFlags(const JobFlags& flags);

/// --nnodes as the user wrote it ("3" or "2:4"), "" when not given: for messages.
std::string nnodesText(const JobFlags& flags);

/// SIGTERM -> SIGKILL delay on the hosts when the job is torn down, unless --remote-grace says.
inline constexpr int kDefaultRemoteGraceSeconds = 10;

/// The teardown grace on the hosts, in whole seconds: `remote_grace` (--remote-grace) when given; else, with
/// `shutdown_grace` (--shutdown-grace, forwarded to the remote taehv-run), that grace rounded up plus 2 s, so that
/// the remote taehv-run stops its workers within its own grace before SIGKILL reaches it; else
/// kDefaultRemoteGraceSeconds.
int remoteGraceSeconds(std::optional<std::chrono::seconds> remote_grace,
                       std::optional<std::chrono::milliseconds> shutdown_grace);

/// The shape of the job: which hosts, how many processes each.
struct JobShape {
  std::string error;
  std::vector<HostEntry> hosts;  ///< node rank = index
  std::vector<int> nprocs;       ///< processes of each host (its slots), by node rank; hosts may differ
  int nproc_per_node = 0;        ///< the count when every host runs as many, else 0
  /// `--nnodes MIN:MAX` (elastic): the job may run on MIN.. of `hosts` (the first MAX); = hosts.size() when fixed.
  int min_nodes = 0;
  std::vector<std::string> notes;  ///< how ambiguous values were resolved (for the log)
};

/// Applies flags.nnodes (use the first N hosts, like DeepSpeed's --num_nodes; MIN:MAX: the first MAX, and the job
/// may go on with MIN of them at a restart) and `nproc_per_node` (--nproc-per-node: use the first N slots of every
/// host; unset = the slots themselves, which may differ between hosts: node k's ranks then start at the slots of
/// hosts 0..k-1, agreed through the remote taehv-runs' node group).
JobShape shapeJob(const std::vector<HostEntry>& hosts, const JobFlags& flags, std::optional<int> nproc_per_node);

/// Everything one host's command line needs.
struct RemoteJob {
  std::string remote_bin;                  ///< absolute path of taehv-run on the host
  std::string cwd;                         ///< working directory on the host
  std::map<std::string, std::string> env;  ///< exported before taehv-run starts
  std::vector<std::string> taehv_args;     ///< taehv-run's arguments (without argv[0])
  int grace_seconds = 10;                  ///< SIGTERM -> SIGKILL delay for the remote process group
  /// The first line of ssh's stdin is the job token (TAEHV_JOB_TOKEN for the node group): a secret stays out of
  /// the command line, which `ps` shows on the host.
  bool token_on_stdin = false;
};

/// taehv-run arguments for node `node_rank`: --backend local and the explicit plan, then `forwarded`, then
/// `-- command` when a command is given.
std::vector<std::string> remoteTaehvArgs(int nnodes, int node_rank, int nproc_per_node, const std::string& master_addr,
                                         int master_port, const std::vector<std::string>& forwarded,
                                         const std::vector<std::string>& command);

/// The /bin/sh script a host runs: enter cwd, export env, start taehv-run in its own session (process group)
/// with stdin from /dev/null, and watch our stdin: when it reaches EOF (the ssh client or the launcher died,
/// or the launcher closed it) send SIGTERM to the group, SIGKILL after grace_seconds. Exits with taehv-run's
/// status. Every value in it is shell-quoted. With token_on_stdin, first reads one line of stdin into
/// TAEHV_JOB_TOKEN (exported to taehv-run only); no line: exit 125.
std::string remoteScript(const RemoteJob& job);

/// The command string handed to ssh: runs `script` under /bin/sh whatever the remote login shell is
/// (as long as it parses POSIX single quotes).
std::string remoteCommand(const std::string& script);

/// ssh client argv: ssh, the user's options (first, so that they win: ssh keeps the first value of an
/// option), our defaults (-T, BatchMode, keepalives), `--`, host, command.
std::vector<std::string> sshArgv(const std::string& ssh, const std::vector<std::string>& ssh_opts,
                                 const std::string& host, const std::string& command);

/// Environment forwarding: variables of `env` whose names start with one of kForwardedPrefixes.
inline const std::vector<std::string> kForwardedPrefixes = {"NCCL_", "GLOO_", "TAEHV_", "TORCH_"};
std::map<std::string, std::string> forwardedEnv(const std::map<std::string, std::string>& env);

/// Parses a .taehv_env file (KEY=VALUE per line, '#' comment lines and blank lines skipped, the value is
/// everything after the first '=') into `out`, later files overriding. Fails with an error naming ORIGIN:LINE.
Status parseEnvFile(const std::string& text, const std::string& origin, std::map<std::string, std::string>* out);

/// Parses one --env K=V into `out`; fails for a missing '=' or an invalid name.
Status parseEnvAssignment(const std::string& kv, std::map<std::string, std::string>* out);

}  // namespace taehv::ssh
