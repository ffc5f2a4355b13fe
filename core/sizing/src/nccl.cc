#include "taehv/sizing/nccl.h"

#include "dl.h"

namespace taehv::sizing {

std::string ncclVersionText(int code) {
  int major = 0, minor = 0, patch = 0;
  if (code >= 10000) {  // NCCL >= 2.9: X*10000 + Y*100 + Z
    major = code / 10000;
    minor = code % 10000 / 100;
    patch = code % 100;
  } else {  // older: X*1000 + Y*100 + Z
    major = code / 1000;
    minor = code % 1000 / 100;
    patch = code % 100;
  }
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

NcclProbe probeNccl(const std::vector<std::string>& candidates) {
  NcclProbe probe;
  for (const std::string& name : candidates) {
    detail::DynamicLibrary lib(name, "NCCL library");
    if (!lib.loaded()) {
      probe.notes.push_back(lib.refused() ? lib.error() : name + ": " + lib.error());  // refused: starts with the path
      continue;
    }
    // ncclResult_t ncclGetVersion(int* version); ncclSuccess = 0.
    auto get_version = lib.symbol<int (*)(int*)>("ncclGetVersion");
    if (get_version == nullptr) {
      probe.notes.push_back(name + ": loads but has no ncclGetVersion (not NCCL)");
      continue;
    }
    int code = 0;
    if (int rc = get_version(&code); rc != 0 || code <= 0) {
      probe.notes.push_back(name + ": ncclGetVersion failed (ncclResult " + std::to_string(rc) + ")");
      continue;
    }
    probe.found = true;
    probe.library = name;
    probe.version_code = code;
    probe.version = ncclVersionText(code);
    return probe;
  }
  return probe;
}

}  // namespace taehv::sizing
