// taehv-run plugins: list the backend plugins found on the plugin search path.
#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands/commands.h"
#include "taehv/utf8.h"

namespace taehv {
namespace po = boost::program_options;

int runPlugins(Cli& cli) {
  po::options_description extra("plugins");
  extra.add_options()("json", "print a JSON array (name, plugin_version, api_version, path, description)");
  po::variables_map vm;
  if (auto done = cli.parse(extra, vm)) return *done;
  std::vector<std::string> errors;
  auto plugins = cli.allPlugins(errors);
  if (vm.count("json")) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const LoadedPlugin* p : plugins) {
      out.push_back({{"name", p->name},
                     {"plugin_version", p->plugin_version},
                     {"api_version", p->api_version},
                     {"path", p->path},
                     {"description", p->description}});
    }
    Utf8Repair repair;
    std::cout << dumpValidUtf8(out, 2, &repair) << "\n";
    if (repair.any()) cli.log(LogLevel::kWarn, repair.sentence("plugins --json"));
  } else {
    std::cout << "NAME        VERSION   API  PATH\n";
    for (const LoadedPlugin* p : plugins) {
      std::string name = p->name, version = p->plugin_version;
      name.resize(std::max<std::size_t>(name.size(), 11), ' ');
      version.resize(std::max<std::size_t>(version.size(), 9), ' ');
      std::cout << name << " " << version << " " << p->api_version << "    " << p->path << "\n";
    }
  }
  for (const auto& e : errors) cli.log(LogLevel::kError, e);
  return errors.empty() ? 0 : kUsageError;
}

}  // namespace taehv
