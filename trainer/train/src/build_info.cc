#include "taehv/train/build_info.h"

#include <torch/version.h>

#if defined(TAEHV_WITH_NCCL)
#include <nccl.h>
#endif

#ifndef TAEHV_VERSION
#error "TAEHV_VERSION is set by trainer/train/CMakeLists.txt"
#endif

namespace taehv::train {

BuildInfo buildInfo() {
  BuildInfo info;
  info.libtorch = std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
                  std::to_string(TORCH_VERSION_PATCH);
#if defined(TAEHV_CUDA_VERSION)
  info.cuda = TAEHV_CUDA_VERSION;
#else
  info.cuda = "none";
#endif
#if defined(TAEHV_WITH_NCCL)
  info.nccl = std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." + std::to_string(NCCL_PATCH);
#else
  info.nccl = "none";
#endif
  return info;
}

std::string versionText() {
  const BuildInfo info = buildInfo();
  return std::string("taehv-train ") + TAEHV_VERSION + "\nlibtorch " + info.libtorch + "\nCUDA " + info.cuda +
         "\nNCCL " + info.nccl + "\n";
}

}  // namespace taehv::train
