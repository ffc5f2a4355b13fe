// The container image a rendered job runs (k8s render, pai render): checked before it reaches a pod spec.
#pragma once

#include <string>

namespace taehv::torch_env {

/// "" when `image` is a container image reference as the OCI distribution spec writes them:
/// [REGISTRY[:PORT]/]PATH[:TAG][@ALGO:HEX], PATH lower-case components separated by '/', with '.', '_', '-'
/// inside them, at most 512 characters; else one line naming --image and what a reference looks like. Spaces,
/// quotes and shell characters never pass.
std::string imageReferenceError(const std::string& image);

}  // namespace taehv::torch_env
