// GPU detection without libtorch: NVML (libnvidia-ml.so.1) or the CUDA driver API (libcuda.so.1), both loaded
// with dlopen at run time and never linked, so taehv-run starts on nodes that have neither (CPU-only nodes, where
// workers run on the CPU with Gloo).
//
// Contract:
//  - A probe never throws and never aborts: a missing library, a stub driver or a driver error all give an
//    inventory with no GPUs and a note saying why (the note is what `taehv-run describe`/`doctor` print).
//  - NVML lists the physical GPUs and ignores CUDA_VISIBLE_DEVICES; visibleGpus() then applies it (and the
//    scheduler's GPU lists) the way the CUDA runtime does. The CUDA driver API applies this process's
//    CUDA_VISIBLE_DEVICES itself during cuInit, which the inventory records (filtered_by_process_env).
//  - GpuProbe is an interface so tests and callers can substitute a source of GPUs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "taehv/plugin_api.h"

namespace taehv::sizing {

/// Default sonames. TAEHV_NVML_LIBRARY / TAEHV_CUDA_DRIVER_LIBRARY (environment) override them, for drivers
/// installed outside the loader's search path.
inline constexpr const char* kNvmlLibrary = "libnvidia-ml.so.1";
inline constexpr const char* kCudaDriverLibrary = "libcuda.so.1";
inline constexpr const char* kNvmlLibraryEnv = "TAEHV_NVML_LIBRARY";
inline constexpr const char* kCudaDriverLibraryEnv = "TAEHV_CUDA_DRIVER_LIBRARY";

/// One GPU as a probe or CUDA_VISIBLE_DEVICES sees it.
struct GpuInfo {
  int ordinal = 0;                 ///< index in the probe's enumeration (physical index for NVML)
  std::string uuid;                ///< "GPU-8c1f..." / "MIG-..."; empty when unknown
  std::string name;                ///< e.g. "NVIDIA H100 80GB HBM3"; empty when unknown
  std::uint64_t memory_bytes = 0;  ///< total device memory in bytes; 0 when unknown
  /// The CUDA_VISIBLE_DEVICES value that makes a process see exactly this GPU (an index or a UUID).
  std::string device_token;
};

/// What a probe found on this node.
struct GpuInventory {
  std::vector<GpuInfo> gpus;
  /// Where the list came from, e.g. "NVML (libnvidia-ml.so.1, driver 535.104.05)"; "none" when no probe worked.
  std::string source;
  /// True when the probe already applied this process's CUDA_VISIBLE_DEVICES (CUDA driver API).
  bool filtered_by_process_env = false;
  /// A library was found but failed (driver/kernel mismatch, stub library, ...): worth a doctor warning.
  std::string error;
  /// Why each library was skipped, in order tried ("libnvidia-ml.so.1 not found: ...").
  std::vector<std::string> notes;
};

/// A source of GPUs.
class GpuProbe {
 public:
  virtual ~GpuProbe() = default;
  /// Enumerates GPUs. Never throws.
  virtual GpuInventory probe() const = 0;
};

/// NVML through dlopen(library).
class NvmlGpuProbe final : public GpuProbe {
 public:
  explicit NvmlGpuProbe(std::string library = kNvmlLibrary) : library_(std::move(library)) {}
  GpuInventory probe() const override;

 private:
  std::string library_;
};

/// The CUDA driver API through dlopen(library).
class CudaDriverGpuProbe final : public GpuProbe {
 public:
  explicit CudaDriverGpuProbe(std::string library = kCudaDriverLibrary) : library_(std::move(library)) {}
  GpuInventory probe() const override;

 private:
  std::string library_;
};

/// Tries each probe in order; the first that loads its library and initialises wins. Notes of the
/// probes tried before it are kept.
class FirstWorkingGpuProbe final : public GpuProbe {
 public:
  explicit FirstWorkingGpuProbe(std::vector<std::unique_ptr<GpuProbe>> probes) : probes_(std::move(probes)) {}
  GpuInventory probe() const override;

 private:
  std::vector<std::unique_ptr<GpuProbe>> probes_;
};

/// NVML, then the CUDA driver, with the library paths taken from `env` (see kNvmlLibraryEnv).
std::unique_ptr<GpuProbe> makeSystemGpuProbe(const Env& env);

/// The GPUs this node's workers may use.
struct VisibleGpus {
  std::vector<GpuInfo> gpus;
  /// How the list was decided, e.g. "CUDA_VISIBLE_DEVICES=2,3 over NVML (8 GPUs)".
  std::string source;
  /// Entries CUDA would ignore (unknown index or UUID, duplicates, entries after the first invalid one).
  std::vector<std::string> warnings;
  /// The list came from a scheduler variable, not CUDA_VISIBLE_DEVICES: workers must be given it explicitly.
  bool from_scheduler_list = false;
};

/// Applies CUDA_VISIBLE_DEVICES (indices, GPU-/MIG- UUIDs or UUID prefixes, CUDA's stop-at-first-invalid rule),
/// or when it is unset the scheduler's list of physical indices (NodePlan::gpu_indices, e.g. from SLURM's
/// SLURM_STEP_GPUS: a backend's plan says it, sizing knows no scheduler), to the inventory. An empty
/// CUDA_VISIBLE_DEVICES means no GPU.
VisibleGpus visibleGpus(const GpuInventory& inventory, const Env& env,
                        const Sourced<std::string>& scheduler_indices = {});

/// "80 GiB" style, for tables.
std::string formatBytes(std::uint64_t bytes);

}  // namespace taehv::sizing
