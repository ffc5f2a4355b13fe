#include "taehv/sizing/sizing.h"

#include <memory>

namespace taehv::sizing {

NodeSizing sizeNode(const NodeSizingInput& in) {
  NodeSizing s;
  s.binding = in.binding;
  std::unique_ptr<GpuProbe> system;
  const GpuProbe* probe = in.probe;
  if (probe == nullptr) {
    system = makeSystemGpuProbe(in.env);
    probe = system.get();
  }
  s.inventory = probe->probe();
  s.visible = visibleGpus(s.inventory, in.env, in.scheduler_gpu_indices);

  NprocInput n;
  n.requested = in.nproc_requested;
  n.visible_gpus = static_cast<int>(s.visible.gpus.size());
  n.gpu_source = s.visible.source;
  n.nnodes = in.nnodes;
  n.scheduler_gpus = in.scheduler_gpus;
  n.binding = in.binding;
  n.single_worker = in.single_worker;
  n.cpu_cores = in.cpu_cores;
  n.oversubscribe = in.oversubscribe;
  s.nproc = decideNprocPerNode(n);

  // Computed even when the decision failed, so the doctor can still check the interfaces.
  TuningInput t;
  t.nnodes = in.nnodes;
  t.master_addr = in.master_addr;
  t.use_gpus = s.nproc.ok() ? s.nproc.use_gpus : !s.visible.gpus.empty();
  t.env = in.env;
  s.tuning = computeTuning(t, in.policy);
  return s;
}

std::map<std::string, Sourced<std::string>> NodeSizing::workerEnv(int local_rank) const {
  return workerGpu(visible, local_rank, nproc.use_gpus, binding).env;
}

std::vector<std::string> NodeSizing::notes() const {
  std::vector<std::string> out;
  std::string gpus = "GPUs: " + std::to_string(visible.gpus.size()) + " visible (" + visible.source + ")";
  if (visible.gpus.empty() && !inventory.notes.empty()) {
    gpus += "; ";
    for (std::size_t i = 0; i < inventory.notes.size(); ++i) gpus += (i ? "; " : "") + inventory.notes[i];
  }
  out.push_back(gpus);
  if (!inventory.error.empty() && visible.gpus.empty()) out.push_back("GPU driver problem: " + inventory.error);
  for (const auto& w : visible.warnings) out.push_back(w);
  for (const auto& n : nproc.notes) out.push_back(n);
  if (nproc.ok()) {
    out.push_back(std::string("workers use ") + (nproc.use_gpus
                                                     ? "GPUs (NCCL), --gpu-binding " + gpuBindingName(binding)
                                                     : std::string("the CPU (Gloo)")));
  }
  for (const auto& n : tuning.notes) out.push_back(n);
  return out;
}

}  // namespace taehv::sizing
