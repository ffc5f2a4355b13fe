#include "taehv/sizing/workers.h"

namespace taehv::sizing {

std::optional<GpuBinding> parseGpuBinding(const std::string& text) {
  if (text == "visible-devices") return GpuBinding::kVisibleDevices;
  if (text == "local-rank") return GpuBinding::kLocalRank;
  if (text == "none") return GpuBinding::kNone;
  return std::nullopt;
}

std::string gpuBindingName(GpuBinding binding) {
  switch (binding) {
    case GpuBinding::kVisibleDevices:
      return "visible-devices";
    case GpuBinding::kLocalRank:
      return "local-rank";
    case GpuBinding::kNone:
      return "none";
  }
  return "none";
}

NprocDecision decideNprocPerNode(const NprocInput& in) {
  NprocDecision d;
  const int gpus = in.visible_gpus;
  const std::string gpu_text = std::to_string(gpus) + " GPU" + (gpus == 1 ? "" : "s");

  if (in.scheduler_gpus.has() && *in.scheduler_gpus.value != gpus) {
    d.notes.push_back("the platform says this node has " + std::to_string(*in.scheduler_gpus.value) + " GPUs (" +
                      in.scheduler_gpus.source + ") but " + std::to_string(gpus) + " are visible (" + in.gpu_source +
                      "); sizing uses the visible ones");
  }

  if (!in.requested.has()) {
    if (gpus > 0) {
      d.use_gpus = true;
      d.nproc_per_node.set(gpus, "auto: one worker per visible GPU (" + gpu_text + ", " + in.gpu_source + ")");
    } else {
      d.nproc_per_node.set(1, "auto: no GPU visible (" + in.gpu_source + "), 1 CPU worker using Gloo");
    }
    return d;
  }

  const int asked = *in.requested.value;
  if (asked < 1) {
    d.error = "--nproc-per-node must be at least 1 (got " + std::to_string(asked) + " from " + in.requested.source +
              "); give a positive number or 'auto'";
    return d;
  }
  if (gpus == 0) {
    // A platform that starts each worker itself (single_worker) has already made its processes.
    const int cores = in.cpu_cores;
    if (!in.single_worker && cores > 0 && asked > static_cast<long long>(kCpuWorkersPerCore) * cores &&
        !in.oversubscribe) {
      d.error = "--nproc-per-node " + std::to_string(asked) + " (" + in.requested.source + ") asks for " +
                std::to_string(asked) + " CPU workers, but this node has no GPU visible (" + in.gpu_source +
                ") and " + std::to_string(cores) + " usable core" + (cores == 1 ? "" : "s") + "; at most " +
                std::to_string(kCpuWorkersPerCore * cores) + " (" + std::to_string(kCpuWorkersPerCore) +
                " per core) start without --oversubscribe: use --nproc-per-node " + std::to_string(cores) +
                " or fewer, or add --oversubscribe if you mean it";
      return d;
    }
    d.nproc_per_node.set(asked, in.requested.source + "; no GPU visible (" + in.gpu_source + "): CPU workers, Gloo");
    if (cores > 0 && asked > cores) {
      d.notes.push_back(std::to_string(asked) + " CPU workers share " + std::to_string(cores) + " core" +
                        (cores == 1 ? "" : "s") + " (oversubscribed: each runs slower than it could)");
    }
    return d;
  }
  d.use_gpus = true;
  if (in.single_worker && gpus == 1 && asked > 1) {
    d.nproc_per_node.set(asked, in.requested.source);
    d.notes.push_back("each worker is its own task and this one sees exactly one GPU (" + in.gpu_source +
                      "): it owns it as cuda:0");
    return d;
  }
  if (asked <= gpus) {
    d.nproc_per_node.set(asked, in.requested.source);
    if (asked < gpus) {
      d.notes.push_back(std::to_string(asked) + " workers use " + std::to_string(asked) + " of the " + gpu_text +
                        " visible; the rest stay idle");
    }
    return d;
  }
  if (in.binding == GpuBinding::kNone) {
    d.nproc_per_node.set(asked, in.requested.source);
    d.notes.push_back(std::to_string(asked) + " workers share " + gpu_text +
                      " (--gpu-binding none: the command manages devices itself)");
    return d;
  }

  std::string fix;
  if (in.nnodes > 1 && asked % in.nnodes == 0 && asked / in.nnodes <= gpus) {
    fix = "did you mean --nnodes " + std::to_string(in.nnodes) + " --nproc-per-node " +
          std::to_string(asked / in.nnodes) + "?";
  } else if (asked % gpus == 0) {
    fix = "did you mean --nnodes " + std::to_string(asked / gpus) + " --nproc-per-node " + std::to_string(gpus) + "?";
  } else {
    fix = "use --nproc-per-node " + std::to_string(gpus) +
          " (or fewer), or --gpu-binding none if workers share GPUs on purpose";
  }
  d.error = "--nproc-per-node " + std::to_string(asked) + " (" + in.requested.source + ") asks for " +
            std::to_string(asked) + " workers on this node, but it has " + gpu_text + " (" + in.gpu_source + ")" +
            (in.nnodes > 1 ? " and is one of " + std::to_string(in.nnodes) + " nodes" : std::string()) +
            "; --nproc-per-node counts workers per node, not in the whole job: " + fix;
  return d;
}

WorkerGpu workerGpu(const VisibleGpus& gpus, int local_rank, bool use_gpus, GpuBinding binding) {
  WorkerGpu w;
  if (!use_gpus) {
    w.device = "cpu";
    w.reason = "no GPU: CPU worker";
    w.env[kDeviceEnv].set(w.device, w.reason);
    return w;
  }
  if (binding == GpuBinding::kNone || gpus.gpus.empty() || local_rank < 0) {
    w.device = "cuda";
    w.reason = "--gpu-binding none: the command chooses its device";
    return w;
  }
  // A worker that sees one GPU while its local rank is higher was bound by its platform (one task per GPU).
  const bool own_single = gpus.gpus.size() == 1 && local_rank >= 1;
  const std::size_t index = own_single ? 0 : static_cast<std::size_t>(local_rank);
  if (index >= gpus.gpus.size()) {
    w.device = "cuda";
    w.reason = "local rank " + std::to_string(local_rank) + " has no GPU of its own (" +
               std::to_string(gpus.gpus.size()) + " visible)";
    return w;
  }
  const GpuInfo& gpu = gpus.gpus[index];
  std::string what = "GPU " + gpu.device_token;
  if (!gpu.name.empty() || gpu.memory_bytes > 0) {
    what += " (" + gpu.name +
            (gpu.memory_bytes > 0 ? (gpu.name.empty() ? "" : ", ") + formatBytes(gpu.memory_bytes) : std::string()) +
            ")";
  }
  w.reason = "local rank " + std::to_string(local_rank) + " owns " + what;
  if (own_single) {
    w.device = "cuda:0";
    w.env[kDeviceEnv].set(w.device, w.reason + ", the only GPU it sees (bound by the platform)");
  } else if (binding == GpuBinding::kVisibleDevices) {
    w.device = "cuda:0";
    w.env["CUDA_VISIBLE_DEVICES"].set(gpu.device_token,
                                      w.reason + " (--gpu-binding visible-devices: it sees only that GPU)");
    w.env[kDeviceEnv].set(w.device, w.reason + ", as cuda:0 (--gpu-binding visible-devices)");
  } else {
    w.device = "cuda:" + std::to_string(local_rank);
    w.env[kDeviceEnv].set(w.device, w.reason + " (--gpu-binding local-rank: cuda:LOCAL_RANK)");
    if (gpus.from_scheduler_list) {
      std::string list;
      for (const GpuInfo& g : gpus.gpus) list += (list.empty() ? "" : ",") + g.device_token;
      w.env["CUDA_VISIBLE_DEVICES"].set(
          list, "the node's GPUs from " + gpus.source + ", so that cuda:LOCAL_RANK is one of them");
    }
  }
  return w;
}

}  // namespace taehv::sizing
