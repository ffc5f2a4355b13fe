#include "taehv/torch_env/container_image.h"

#include <regex>

#include "taehv/utf8.h"

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

std::vector<OptionSpec> renderJobOptions(const std::string& nodes_help, const std::string& gpus_help,
                                         const std::string& name_help) {
  return {{"nodes", "N", nodes_help + " (required)"},
          {"gpus-per-node", "G", gpus_help + " (required)"},
          {"image", "IMAGE", "container image with taehv-run installed (required)"},
          {"name", "NAME", name_help + " (default taehv-train)"}};
}

Status readJobText(const CommandArgs& args, std::initializer_list<std::pair<const char*, std::string*>> targets,
                   std::vector<std::string>& command) {
  const std::string fix = "a rendered job is UTF-8 text (YAML, JSON): give it in UTF-8";
  for (const auto& [name, target] : targets) {
    const std::string* value = optionValue(args.options, name);
    if (value == nullptr) continue;
    if (Status utf8 = requireUtf8(*value, std::string("--") + name, fix); !utf8.ok()) return utf8;
    *target = *value;
  }
  for (std::size_t i = 0; i < args.command.size(); ++i) {
    if (Status utf8 = requireUtf8(args.command[i], "the command's word " + std::to_string(i + 1), fix); !utf8.ok()) {
      return utf8;
    }
  }
  command = args.command;
  return {};
}

}  // namespace taehv::torch_env
