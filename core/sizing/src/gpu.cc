#include "taehv/sizing/gpu.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>
#include <sstream>

#include "dl.h"
#include "taehv/env.h"
#include "text.h"

namespace taehv::sizing {
namespace {

// NVML ABI subset (nvml.h): every call returns nvmlReturn_t (0 = NVML_SUCCESS); a device is an opaque pointer.
using NvmlReturn = int;
using NvmlDevice = void*;
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr unsigned kNvmlNameBuffer = 96;     // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned kNvmlUuidBuffer = 96;     // >= NVML_DEVICE_UUID_V2_BUFFER_SIZE (96)
constexpr unsigned kNvmlVersionBuffer = 80;  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE

// CUDA driver ABI subset (cuda.h): CUresult 0 = CUDA_SUCCESS, CUdevice is an int.
using CuResult = int;
struct CuUuid {
  unsigned char bytes[16];
};

std::string cudaUuidString(const CuUuid& u) {
  // CUDA_VISIBLE_DEVICES form: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
  char out[64];
  std::snprintf(out, sizeof out, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u.bytes[0],
                u.bytes[1], u.bytes[2], u.bytes[3], u.bytes[4], u.bytes[5], u.bytes[6], u.bytes[7], u.bytes[8],
                u.bytes[9], u.bytes[10], u.bytes[11], u.bytes[12], u.bytes[13], u.bytes[14], u.bytes[15]);
  return out;
}

/// Records why `lib` (named `library`) did not load: a note; a library refused before dlopen is also the inventory's
/// error (a doctor warning, "GPU driver problem" in describe), since it was there and named on purpose.
void noteLoadFailure(GpuInventory& inv, const std::string& library, const std::string& what,
                     const detail::DynamicLibrary& lib) {
  if (lib.refused()) {
    inv.error = lib.error();
    inv.notes.push_back(lib.error());
  } else if (detail::isNotFound(lib.error())) {
    inv.notes.push_back(library + " not found: no " + what + " on this node (" + lib.error() + ")");
  } else {
    inv.notes.push_back(library + " could not be loaded: " + lib.error());
  }
}

// Parses "0-3,5" (SLURM's GPU lists) into indices; false on anything else.
bool parseIndexList(const std::string& text, std::vector<int>& out) {
  for (const std::string& item : split(text, ',')) {
    std::string t = trim(item);
    auto dash = t.find('-');
    int lo = 0, hi = 0;
    if (dash == std::string::npos) {
      if (!parseTrimmedInt(t, lo)) return false;
      hi = lo;
    } else if (!parseTrimmedInt(t.substr(0, dash), lo) || !parseTrimmedInt(t.substr(dash + 1), hi) || hi < lo) {
      return false;
    }
    if (lo < 0) return false;
    for (int i = lo; i <= hi; ++i) out.push_back(i);
  }
  return true;
}

}  // namespace

GpuInventory NvmlGpuProbe::probe() const {
  GpuInventory inv;
  inv.source = "none";
  detail::DynamicLibrary lib(library_, "NVML library");
  if (!lib.loaded()) {
    noteLoadFailure(inv, library_, "NVIDIA driver (NVML)", lib);
    return inv;
  }
  auto init = lib.symbol<NvmlReturn (*)()>("nvmlInit_v2");
  auto shutdown = lib.symbol<NvmlReturn (*)()>("nvmlShutdown");
  auto get_count = lib.symbol<NvmlReturn (*)(unsigned*)>("nvmlDeviceGetCount_v2");
  auto get_handle = lib.symbol<NvmlReturn (*)(unsigned, NvmlDevice*)>("nvmlDeviceGetHandleByIndex_v2");
  auto get_name = lib.symbol<NvmlReturn (*)(NvmlDevice, char*, unsigned)>("nvmlDeviceGetName");
  auto get_uuid = lib.symbol<NvmlReturn (*)(NvmlDevice, char*, unsigned)>("nvmlDeviceGetUUID");
  auto get_memory = lib.symbol<NvmlReturn (*)(NvmlDevice, NvmlMemory*)>("nvmlDeviceGetMemoryInfo");
  auto driver_version = lib.symbol<NvmlReturn (*)(char*, unsigned)>("nvmlSystemGetDriverVersion");
  auto error_string = lib.symbol<const char* (*)(NvmlReturn)>("nvmlErrorString");
  if (init == nullptr || get_count == nullptr || get_handle == nullptr) {
    inv.error = library_ +
                " is not a usable NVML: nvmlInit_v2/nvmlDeviceGetCount_v2/"
                "nvmlDeviceGetHandleByIndex_v2 missing";
    inv.notes.push_back(inv.error);
    return inv;
  }
  auto describe = [&](NvmlReturn r) {
    const char* s = error_string != nullptr ? error_string(r) : nullptr;
    return "error " + std::to_string(r) + (s != nullptr ? std::string(" (") + s + ")" : std::string());
  };
  if (NvmlReturn r = init(); r != 0) {
    inv.error = library_ + ": nvmlInit_v2 failed, " + describe(r) + "; is the NVIDIA kernel driver loaded?";
    inv.notes.push_back(inv.error);
    return inv;
  }
  std::string version;
  if (driver_version != nullptr) {
    char buf[kNvmlVersionBuffer] = {};
    if (driver_version(buf, sizeof buf) == 0) version = buf;
  }
  unsigned count = 0;
  if (NvmlReturn r = get_count(&count); r != 0) {
    inv.error = library_ + ": nvmlDeviceGetCount_v2 failed, " + describe(r);
    inv.notes.push_back(inv.error);
    if (shutdown != nullptr) shutdown();
    return inv;
  }
  for (unsigned i = 0; i < count; ++i) {
    GpuInfo gpu;
    gpu.ordinal = static_cast<int>(i);
    gpu.device_token = std::to_string(i);
    NvmlDevice dev = nullptr;
    if (NvmlReturn r = get_handle(i, &dev); r != 0) {
      // The device exists but cannot be queried (e.g. lost or no permission); CUDA still counts it.
      inv.notes.push_back("GPU " + std::to_string(i) + ": nvmlDeviceGetHandleByIndex_v2 failed, " + describe(r));
      inv.gpus.push_back(gpu);
      continue;
    }
    if (get_name != nullptr) {
      char buf[kNvmlNameBuffer] = {};
      if (get_name(dev, buf, sizeof buf) == 0) gpu.name = buf;
    }
    if (get_uuid != nullptr) {
      char buf[kNvmlUuidBuffer] = {};
      if (get_uuid(dev, buf, sizeof buf) == 0) gpu.uuid = buf;
    }
    if (get_memory != nullptr) {
      NvmlMemory mem{};
      if (get_memory(dev, &mem) == 0) gpu.memory_bytes = mem.total;
    }
    inv.gpus.push_back(gpu);
  }
  if (shutdown != nullptr) shutdown();
  inv.source = "NVML (" + library_ + (version.empty() ? "" : ", driver " + version) + ")";
  return inv;
}

GpuInventory CudaDriverGpuProbe::probe() const {
  GpuInventory inv;
  inv.source = "none";
  detail::DynamicLibrary lib(library_, "CUDA driver library");
  if (!lib.loaded()) {
    noteLoadFailure(inv, library_, "CUDA driver", lib);
    return inv;
  }
  auto init = lib.symbol<CuResult (*)(unsigned)>("cuInit");
  auto get_count = lib.symbol<CuResult (*)(int*)>("cuDeviceGetCount");
  auto get_device = lib.symbol<CuResult (*)(int*, int)>("cuDeviceGet");
  auto get_name = lib.symbol<CuResult (*)(char*, int, int)>("cuDeviceGetName");
  auto total_mem = lib.symbol<CuResult (*)(std::size_t*, int)>("cuDeviceTotalMem_v2");
  auto get_uuid = lib.symbol<CuResult (*)(CuUuid*, int)>("cuDeviceGetUuid_v2");
  if (get_uuid == nullptr) get_uuid = lib.symbol<CuResult (*)(CuUuid*, int)>("cuDeviceGetUuid");
  auto driver_version = lib.symbol<CuResult (*)(int*)>("cuDriverGetVersion");
  auto error_string = lib.symbol<CuResult (*)(CuResult, const char**)>("cuGetErrorString");
  if (init == nullptr || get_count == nullptr || get_device == nullptr) {
    inv.error = library_ + " is not a usable CUDA driver: cuInit/cuDeviceGetCount/cuDeviceGet missing";
    inv.notes.push_back(inv.error);
    return inv;
  }
  auto describe = [&](CuResult r) {
    const char* s = nullptr;
    if (error_string != nullptr && error_string(r, &s) != 0) s = nullptr;
    std::string text = "error " + std::to_string(r);
    if (s != nullptr) text += std::string(" (") + s + ")";
    if (r == 34) text += " (CUDA_ERROR_STUB_LIBRARY: the toolkit's stub libcuda, not a driver)";
    return text;
  };
  if (CuResult r = init(0); r != 0) {
    if (r == 100) {  // CUDA_ERROR_NO_DEVICE: a driver without GPUs, or CUDA_VISIBLE_DEVICES hides them all.
      inv.notes.push_back(library_ + ": cuInit reports no CUDA device");
      inv.source = "CUDA driver (" + library_ + ")";
      inv.filtered_by_process_env = true;
      return inv;
    }
    inv.error = library_ + ": cuInit failed, " + describe(r);
    inv.notes.push_back(inv.error);
    return inv;
  }
  int version = 0;
  if (driver_version != nullptr) driver_version(&version);
  int count = 0;
  if (CuResult r = get_count(&count); r != 0) {
    inv.error = library_ + ": cuDeviceGetCount failed, " + describe(r);
    inv.notes.push_back(inv.error);
    return inv;
  }
  for (int i = 0; i < count; ++i) {
    GpuInfo gpu;
    gpu.ordinal = i;
    gpu.device_token = std::to_string(i);
    int dev = 0;
    if (get_device(&dev, i) == 0) {
      if (get_name != nullptr) {
        char buf[256] = {};
        if (get_name(buf, sizeof buf, dev) == 0) gpu.name = buf;
      }
      if (total_mem != nullptr) {
        std::size_t bytes = 0;
        if (total_mem(&bytes, dev) == 0) gpu.memory_bytes = bytes;
      }
      if (get_uuid != nullptr) {
        CuUuid u{};
        if (get_uuid(&u, dev) == 0) gpu.uuid = cudaUuidString(u);
      }
    }
    inv.gpus.push_back(gpu);
  }
  inv.filtered_by_process_env = true;
  inv.source = "CUDA driver (" + library_ +
               (version > 0 ? ", CUDA " + std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10)
                            : std::string()) +
               ")";
  return inv;
}

GpuInventory FirstWorkingGpuProbe::probe() const {
  GpuInventory result;
  result.source = "none";
  std::vector<std::string> notes;
  std::string first_error;
  for (const auto& probe : probes_) {
    GpuInventory inv = probe->probe();
    bool worked = inv.source != "none";
    if (worked) {
      notes.insert(notes.end(), inv.notes.begin(), inv.notes.end());
      inv.notes = std::move(notes);
      if (inv.error.empty()) inv.error = first_error;
      return inv;
    }
    notes.insert(notes.end(), inv.notes.begin(), inv.notes.end());
    if (first_error.empty()) first_error = inv.error;
  }
  result.notes = std::move(notes);
  result.error = first_error;
  return result;
}

std::unique_ptr<GpuProbe> makeSystemGpuProbe(const Env& env) {
  auto pick = [&](const char* var, const char* fallback) { return envValue(env, var).value_or(fallback); };
  std::vector<std::unique_ptr<GpuProbe>> probes;
  probes.push_back(std::make_unique<NvmlGpuProbe>(pick(kNvmlLibraryEnv, kNvmlLibrary)));
  probes.push_back(std::make_unique<CudaDriverGpuProbe>(pick(kCudaDriverLibraryEnv, kCudaDriverLibrary)));
  return std::make_unique<FirstWorkingGpuProbe>(std::move(probes));
}

VisibleGpus visibleGpus(const GpuInventory& inventory, const Env& env,
                        const Sourced<std::string>& scheduler_indices) {
  VisibleGpus out;
  if (inventory.source == "none") {
    out.source = inventory.error.empty() ? "no NVIDIA driver library found" : "the NVIDIA driver failed";
    return out;
  }
  const std::string over = " over " + inventory.source + " (" + std::to_string(inventory.gpus.size()) + " GPU" +
                           (inventory.gpus.size() == 1 ? "" : "s") + ")";
  const std::string* cvd = findEnv(env, "CUDA_VISIBLE_DEVICES");

  if (inventory.filtered_by_process_env) {
    // cuInit already applied this process's CUDA_VISIBLE_DEVICES: device i is the i-th entry of that list.
    out.gpus = inventory.gpus;
    if (cvd != nullptr) {
      std::vector<std::string> tokens = split(*cvd, ',');
      for (std::size_t i = 0; i < out.gpus.size() && i < tokens.size(); ++i) out.gpus[i].device_token = trim(tokens[i]);
      out.source = "CUDA_VISIBLE_DEVICES=" + *cvd + " (applied by the CUDA driver)" + over;
    } else {
      out.source = "all GPUs" + over;
    }
    return out;
  }

  if (cvd == nullptr && scheduler_indices.has() && !trim(*scheduler_indices.value).empty()) {
    // CUDA_VISIBLE_DEVICES unset: the scheduler's list when it has one, else every GPU.
    const std::string& list = *scheduler_indices.value;
    const std::string what = "the scheduler's GPU list " + list + " (" + scheduler_indices.source + ")";
    std::vector<int> indices;
    if (!parseIndexList(list, indices)) {
      out.warnings.push_back(what + " is not a list of GPU indices; ignored");
    } else {
      for (int index : indices) {
        auto gpu = std::find_if(inventory.gpus.begin(), inventory.gpus.end(),
                                [&](const GpuInfo& g) { return g.ordinal == index; });
        if (gpu == inventory.gpus.end()) {
          out.warnings.push_back(what + " names GPU " + std::to_string(index) + ", which " + inventory.source +
                                 " does not list; ignored");
        } else {
          out.gpus.push_back(*gpu);
        }
      }
      out.source = scheduler_indices.source + "=" + list + over;
      out.from_scheduler_list = true;
      return out;
    }
  }
  if (cvd == nullptr) {
    out.gpus = inventory.gpus;
    out.source = "all GPUs" + over;
    return out;
  }

  // CUDA's rules: comma-separated indices or UUIDs (a unique prefix suffices); the first entry that names no GPU
  // (or repeats one) ends the list and everything after it is ignored.
  out.source = "CUDA_VISIBLE_DEVICES=" + *cvd + over;
  if (trim(*cvd).empty()) return out;
  std::set<std::string> seen;
  std::vector<std::string> tokens = split(*cvd, ',');
  for (std::size_t k = 0; k < tokens.size(); ++k) {
    const std::string token = trim(tokens[k]);
    std::string problem;
    std::optional<GpuInfo> hit;
    int index = 0;
    if (startsWith(token, "MIG-")) {
      // MIG instances are not enumerated by the GPU probe; CUDA resolves them. Each is one device.
      GpuInfo mig;
      mig.ordinal = static_cast<int>(out.gpus.size());
      mig.uuid = token;
      mig.name = "MIG instance";
      mig.device_token = token;
      hit = mig;
    } else if (parseTrimmedInt(token, index)) {
      auto gpu = std::find_if(inventory.gpus.begin(), inventory.gpus.end(),
                              [&](const GpuInfo& g) { return g.ordinal == index; });
      if (gpu == inventory.gpus.end()) {
        problem = "index " + token + " does not exist (" + std::to_string(inventory.gpus.size()) + " GPUs)";
      } else {
        hit = *gpu;
      }
    } else if (startsWith(token, "GPU-")) {
      std::vector<const GpuInfo*> matches;
      for (const GpuInfo& g : inventory.gpus) {
        if (!g.uuid.empty() && startsWith(g.uuid, token)) matches.push_back(&g);
      }
      if (matches.size() == 1) {
        hit = *matches.front();
      } else {
        problem = matches.empty() ? "UUID " + token + " matches no GPU" : "UUID prefix " + token + " is ambiguous";
      }
    } else {
      problem = "'" + token + "' is neither an index nor a GPU-/MIG- UUID";
    }
    if (hit && !seen.insert(hit->uuid.empty() ? "#" + std::to_string(hit->ordinal) : hit->uuid).second) {
      problem = "'" + token + "' repeats a GPU already listed";
      hit.reset();
    }
    if (!hit) {
      std::string ignored;
      for (std::size_t j = k + 1; j < tokens.size(); ++j) ignored += (ignored.empty() ? "" : ",") + trim(tokens[j]);
      out.warnings.push_back("CUDA_VISIBLE_DEVICES entry " + std::to_string(k) + ": " + problem + "; CUDA stops at it" +
                             (ignored.empty() ? "" : " and ignores " + ignored));
      break;
    }
    hit->device_token = token;
    out.gpus.push_back(*hit);
  }
  return out;
}

std::string formatBytes(std::uint64_t bytes) {
  constexpr std::uint64_t kGiB = 1ull << 30, kMiB = 1ull << 20;
  char buf[32];
  if (bytes >= kGiB) {
    std::snprintf(buf, sizeof buf, "%.0f GiB", static_cast<double>(bytes) / static_cast<double>(kGiB));
  } else {
    std::snprintf(buf, sizeof buf, "%.0f MiB", static_cast<double>(bytes) / static_cast<double>(kMiB));
  }
  return buf;
}

}  // namespace taehv::sizing
