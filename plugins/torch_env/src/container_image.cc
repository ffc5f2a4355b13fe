#include "taehv/torch_env/container_image.h"

#include <regex>

namespace taehv::torch_env {

Status checkImageReference(const std::string& image) {
  static const std::regex kReference(
      R"(^([A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]+)?/)?)"      // registry
      R"([a-z0-9]+([._-]+[a-z0-9]+)*(/[a-z0-9]+([._-]+[a-z0-9]+)*)*)"  // path
      R"((:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?)"                        // tag
      R"((@[a-z0-9]+([+._-][a-z0-9]+)*:[a-fA-F0-9]{32,})?$)");          // digest
  if (image.size() > 512 || !std::regex_match(image, kReference)) {
    return {"--image '" + image + "' is not a container image reference like registry.example.com/team/taehv:0.1.0 "
            "(lower-case path, optional :TAG and @sha256:DIGEST; no spaces or shell characters)"};
  }
  return {};
}

}  // namespace taehv::torch_env
