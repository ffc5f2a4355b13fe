// How many workers a node runs and which GPU each owns.
//
// Contract: `--nproc-per-node auto` means one worker per visible GPU, or 1 on a CPU-only node (Gloo). Asking for
// more workers than the node has GPUs is refused before anything starts, with the command line that was probably
// meant (the "CUDA error: invalid device ordinal" that otherwise appears minutes later, on one rank only).
// On a CPU-only node, more than kCpuWorkersPerCore workers per usable core is refused unless the user says they
// mean it (--oversubscribe): a mistyped count (100000 for 1000) would otherwise fork until fork fails.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "taehv/plugin_api.h"
#include "taehv/sizing/gpu.h"

namespace taehv::sizing {

/// How a worker is told which GPU it owns. Every worker also gets TAEHV_DEVICE ("cuda:N" or "cpu").
enum class GpuBinding {
  /// Every worker sees the node's GPUs and uses cuda:LOCAL_RANK: torchrun's contract, so unchanged PyTorch
  /// scripts (torch.cuda.set_device(local_rank)) work. The default.
  kLocalRank,
  /// CUDA_VISIBLE_DEVICES holds only the worker's GPU and it uses cuda:0: workers cannot touch each other's GPUs,
  /// but scripts must not index devices by LOCAL_RANK.
  kVisibleDevices,
  kNone,  ///< no binding, no GPU-count check (the command manages devices itself)
};

/// "visible-devices", "local-rank", "none" -> binding; anything else -> nullopt.
std::optional<GpuBinding> parseGpuBinding(const std::string& text);
/// The inverse of parseGpuBinding.
std::string gpuBindingName(GpuBinding binding);

/// CPU workers per usable core allowed without --oversubscribe. More than one per core already oversubscribes
/// (each Gloo worker wants at least one thread); up to 4 keeps small DDP tests on a laptop or a 2-core CI machine
/// working, anything beyond is a typo far more often than a plan.
inline constexpr int kCpuWorkersPerCore = 4;

/// What the user asked and what the node has.
struct NprocInput {
  Sourced<int> requested;       ///< unset = auto; else the number and where it came from ("flag --nproc-per-node")
  int visible_gpus = 0;         ///< visibleGpus(...).gpus.size()
  std::string gpu_source;       ///< visibleGpus(...).source, quoted in reasons
  int nnodes = 1;               ///< nodes in the job
  Sourced<int> scheduler_gpus;  ///< GPUs the platform says this node has (NodePlan::gpus_on_node), if it says
  GpuBinding binding = GpuBinding::kLocalRank;
  /// The platform starts each worker itself (NodePlan::single_worker, e.g. one SLURM task per GPU): `requested`
  /// is the platform's task count, never auto, and a task that sees exactly one GPU owns that one.
  bool single_worker = false;
  int cpu_cores = 0;          ///< cores this process may run on (sched_getaffinity); 0 = unknown, no CPU-worker check
  bool oversubscribe = false;  ///< --oversubscribe: more CPU workers than kCpuWorkersPerCore per core on purpose
};

/// The decision, or why there is none.
struct NprocDecision {
  std::string error;               ///< empty on success; else one line with the fix
  Sourced<int> nproc_per_node;     ///< the value and its reason
  bool use_gpus = false;           ///< workers own GPUs (NCCL); false = CPU workers (Gloo)
  std::vector<std::string> notes;  ///< e.g. the scheduler's GPU count differs from the detected one
  bool ok() const { return error.empty(); }
};

/// Resolves --nproc-per-node (auto or a number) against the node's GPUs. See the file comment.
NprocDecision decideNprocPerNode(const NprocInput& input);

/// The device a worker should use, in TAEHV_DEVICE ("cuda:N" or "cpu"; absent with --gpu-binding none).
inline constexpr const char* kDeviceEnv = "TAEHV_DEVICE";

/// The GPU one worker owns: its environment (with reasons) and the torch device string it should use.
struct WorkerGpu {
  /// TAEHV_DEVICE always (unless kNone); CUDA_VISIBLE_DEVICES with kVisibleDevices (only its GPU), or with
  /// kLocalRank when the GPU list came from the scheduler (NodePlan::gpu_indices) rather than from
  /// CUDA_VISIBLE_DEVICES (then it lists the node's usable GPUs, so cuda:LOCAL_RANK is one of them).
  std::map<std::string, Sourced<std::string>> env;
  std::string device;  ///< "cuda:0", "cuda:3", "cuda" (kNone) or "cpu"
  std::string reason;  ///< e.g. "local rank 3 owns GPU 3 (NVIDIA H100, 80 GiB)"
};

/// Binding of worker `local_rank` when `use_gpus`; CPU workers get device "cpu". A worker that sees exactly one
/// GPU (a single-worker task bound by its platform) owns it as cuda:0 whatever its local rank.
WorkerGpu workerGpu(const VisibleGpus& gpus, int local_rank, bool use_gpus, GpuBinding binding);

}  // namespace taehv::sizing
