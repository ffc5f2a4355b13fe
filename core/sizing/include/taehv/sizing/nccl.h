// Finding NCCL the way a CUDA libtorch will at run time: dlopen(libnccl.so.2) and ncclGetVersion. NCCL loads and
// reports its version without a GPU, so this works on any node.
#pragma once

#include <string>
#include <vector>

namespace taehv::sizing {

/// Default soname; TAEHV_NCCL_LIBRARY (environment) overrides it in makeNcclCandidates().
inline constexpr const char* kNcclLibrary = "libnccl.so.2";
inline constexpr const char* kNcclLibraryEnv = "TAEHV_NCCL_LIBRARY";

struct NcclProbe {
  bool found = false;              ///< some candidate loaded and answered ncclGetVersion
  std::string library;             ///< the candidate that answered
  int version_code = 0;            ///< NCCL_VERSION_CODE, e.g. 22809
  std::string version;             ///< "2.28.9"
  std::vector<std::string> notes;  ///< per candidate tried: why it did not answer
};

/// Tries each candidate (a soname or a path) in order.
NcclProbe probeNccl(const std::vector<std::string>& candidates);

/// "2.28.9" from NCCL's version code (major*10000 + minor*100 + patch since 2.9; major*1000 + ... before).
std::string ncclVersionText(int code);

}  // namespace taehv::sizing
