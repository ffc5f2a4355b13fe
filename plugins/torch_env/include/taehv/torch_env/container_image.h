// The container image a rendered job runs (k8s render, pai render): checked before it reaches a pod spec.
#pragma once

#include <string>

#include "taehv/checked.h"

namespace taehv::torch_env {

/// Succeeds when `image` is a container image reference as the OCI distribution spec writes them:
/// [REGISTRY[:PORT]/]PATH[:TAG][@ALGO:HEX], PATH lower-case components separated by '/', with '.', '_', '-'
/// inside them, at most 512 characters; else fails with one line naming --image and what a reference looks like.
/// Spaces, quotes and shell characters never pass.
Status checkImageReference(const std::string& image);

}  // namespace taehv::torch_env
