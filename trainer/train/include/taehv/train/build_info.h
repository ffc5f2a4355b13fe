// What this taehv-train was built with: the libtorch, CUDA and NCCL versions (`taehv-train --version`).
#pragma once

#include <string>

namespace taehv::train {

struct BuildInfo {
  std::string libtorch;  ///< e.g. "2.13.0"
  std::string cuda;      ///< the CUDA toolkit the CUDA libtorch was built against, e.g. "13.0"; "none" on CPU builds
  std::string nccl;      ///< the NCCL whose nccl.h the NCCL backend was compiled with, e.g. "2.30.7"; "none" without
};

BuildInfo buildInfo();

/// The `--version` text: one "name version" line each for taehv-train, libtorch, CUDA and NCCL.
std::string versionText();

}  // namespace taehv::train
