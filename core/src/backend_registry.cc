#include "taehv/backend_registry.h"

#include <algorithm>
#include <utility>

#include "taehv/suggest.h"

namespace taehv {
namespace {

/// Loads every plugin `found` into `plugins`; the discovery's errors and each failed load's go into `errors`.
void loadEvery(const Discovery& found, std::vector<LoadedPlugin>& plugins, std::vector<std::string>& errors) {
  errors = found.errors;
  for (const auto& file : found.files) {
    auto loaded = loadPlugin(file.path);
    if (loaded.ok()) {
      plugins.push_back(loaded.value);
    } else {
      errors.push_back(loaded.error);
    }
  }
}

/// Loads the plugins for `backend` into `plugins`, reasons for failures into `errors`; see BackendRegistry::load.
bool loadPlugins(const std::string& backend, const std::vector<PluginDir>& dirs, std::vector<LoadedPlugin>& plugins,
                 std::vector<std::string>& errors) {
  Discovery found = discoverPlugins(dirs);
  if (backend == "auto") {
    loadEvery(found, plugins, errors);
    return true;
  }
  errors = found.errors;
  std::vector<std::string> names = {"auto", "local"};
  for (const auto& file : found.files) {
    names.push_back(file.name);
    if (file.name != backend) continue;
    auto loaded = loadPlugin(file.path);
    if (!loaded.ok()) {
      errors.push_back(loaded.error);
      return false;
    }
    if (loaded.value.name != backend) {
      errors.push_back(file.path + ": the plugin calls itself '" + loaded.value.name +
                       "' but its file is named for '" + backend + "'; rename it to taehv_plugin_" +
                       loaded.value.name + ".so");
      return false;
    }
    plugins.push_back(loaded.value);
    return true;
  }
  std::string searched;
  for (const auto& d : dirs) searched += (searched.empty() ? "" : ":") + d.path;
  errors.push_back("unknown backend '" + backend + "'" + didYouMean(backend, names) + "; no taehv_plugin_" +
                   backend + ".so on the plugin path " + searched +
                   " (see `taehv-run plugins`; add folders with --plugin-dir or TAEHV_PLUGIN_PATH)");
  return false;
}

}  // namespace

bool BackendRegistry::load(const std::string& backend, const std::string& self_path,
                           const std::vector<std::string>& plugin_dirs, const Env& env, const HostContext& host) {
  if (backend == "local") return true;
  auto dirs = pluginSearchPath(self_path, plugin_dirs, env);
  for (const auto& d : dirs) host.log(LogLevel::kDebug, "plugin search path: " + d.path + " (" + d.origin + ")");
  const bool loaded = loadPlugins(backend, dirs, plugins_, errors_);
  for (const auto& plugin : plugins_) {
    for (const OptionSpec& spec : plugin.backend->options()) option_owners_[spec.name].push_back(plugin.name);
  }
  return loaded;
}

Checked<BackendChoice> BackendRegistry::detect(const HostContext& host, bool manual) {
  Checked<BackendChoice> result;
  BackendChoice& choice = result.value;
  std::vector<std::pair<LoadedPlugin*, Detection>> found;
  for (auto& p : plugins_) {
    const Detection d = p.backend->detect(host);
    host.log(LogLevel::kDebug, "detect " + p.name + ": confidence " + std::to_string(d.confidence) + " " + d.reason);
    if (d.confidence > 0) found.emplace_back(&p, d);
  }
  std::stable_sort(found.begin(), found.end(),
                   [](const auto& a, const auto& b) { return a.second.confidence > b.second.confidence; });
  if (manual && !found.empty()) {
    choice.passed_over = "backend " + found[0].first->name + " recognises this environment (" +
                         found[0].second.reason +
                         ") but --nnodes/--node-rank were given: manual mode, the flags and PET_* decide; add "
                         "--backend " +
                         found[0].first->name + " to use it";
    host.log(LogLevel::kDebug, choice.passed_over);
    found.clear();
  }
  if (found.size() > 1 && found[0].second.confidence == found[1].second.confidence) {
    return {"backends '" + found[0].first->name + "' (" + found[0].second.reason + ") and '" +
            found[1].first->name + "' (" + found[1].second.reason + ") both recognise this environment " +
            "with confidence " + std::to_string(found[0].second.confidence) + "; choose one with --backend NAME"};
  }
  if (!found.empty()) {
    choice.plugin = found[0].first;
    choice.detection = choice.plugin->name + " (confidence " + std::to_string(found[0].second.confidence) + ": " +
                       found[0].second.reason + ")";
  }
  return result;
}

std::vector<LoadedPlugin*> BackendRegistry::allPlugins(const std::string& backend, const std::string& self_path,
                                                       const std::vector<std::string>& plugin_dirs, const Env& env,
                                                       std::vector<std::string>& errors) {
  std::vector<LoadedPlugin*> out;
  if (backend == "auto") {
    for (auto& p : plugins_) out.push_back(&p);
    errors = errors_;
    return out;
  }
  // --backend NAME or local loaded one plugin or none; the listing wants them all.
  if (!listed_) {
    listed_ = true;
    loadEvery(discoverPlugins(pluginSearchPath(self_path, plugin_dirs, env)), listing_, listing_errors_);
  }
  errors = listing_errors_;
  for (auto& p : listing_) out.push_back(&p);
  return out;
}

}  // namespace taehv
