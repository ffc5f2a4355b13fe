#include "taehv/plugin_loader.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <boost/dll/shared_library.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "taehv/elf_check.h"
#include "taehv/env.h"
#include "taehv/files/input_file.h"

namespace taehv {
namespace fs = std::filesystem;
namespace {

constexpr const char* kPrefix = "taehv_plugin_";
constexpr const char* kSuffix = ".so";

std::string octalMode(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

/// Libraries stay loaded for the life of the process: never destroyed, so never unloaded.
std::vector<boost::dll::shared_library>& keptLibraries() {
  static auto* libs = new std::vector<boost::dll::shared_library>();
  return *libs;
}

/// The host's side of the plugin boundary: every call runs under guardPluginCall, and an exception becomes a
/// PluginFault that names the plugin.
class HostGuardedBackend final : public Backend {
 public:
  HostGuardedBackend(Backend* plugin, std::string name, std::string path)
      : plugin_(plugin), name_(std::move(name)), path_(std::move(path)) {}

  Detection detect(const HostContext& host) const override {
    return guardPluginCall([&] { return plugin_->detect(host); }, fault<Detection>("detect"));
  }
  PlanResult plan(const HostContext& host, const PlanRequest& request) const override {
    return guardPluginCall([&] { return plugin_->plan(host, request); }, fault<PlanResult>("plan"));
  }
  std::vector<OptionSpec> options() const override {
    return guardPluginCall([&] { return plugin_->options(); }, fault<std::vector<OptionSpec>>("options"));
  }
  std::vector<CommandSpec> commands() const override {
    return guardPluginCall([&] { return plugin_->commands(); }, fault<std::vector<CommandSpec>>("commands"));
  }
  int runCommand(const HostContext& host, const std::string& name, const CommandArgs& args) override {
    return guardPluginCall([&] { return plugin_->runCommand(host, name, args); }, fault<int>("runCommand"));
  }
  bool takesOverLaunch(const HostContext& host, const PlanRequest& request) const override {
    return guardPluginCall([&] { return plugin_->takesOverLaunch(host, request); }, fault<bool>("takesOverLaunch"));
  }
  int launch(const HostContext& host, const JobRequest& job) override {
    return guardPluginCall([&] { return plugin_->launch(host, job); }, fault<int>("launch"));
  }

 private:
  template <typename T>
  std::function<T(const std::string&)> fault(const char* method) const {
    return [this, method](const std::string& what) -> T {
      throw PluginFault(path_ + ": backend '" + name_ + "' let an exception out of " + method + "() (" + what +
                        "); a plugin must not throw: fix the plugin or remove it from the plugin folder");
    };
  }

  Backend* plugin_;
  std::string name_;
  std::string path_;
};

}  // namespace

std::vector<PluginDir> pluginSearchPath(const std::string& self_path, const std::vector<std::string>& flag_dirs,
                                        const Env& env) {
  std::vector<PluginDir> dirs;
  for (const auto& d : flag_dirs) dirs.push_back({d, "--plugin-dir", true});
  if (const std::string* path = findEnv(env, "TAEHV_PLUGIN_PATH")) {
    std::stringstream in(*path);
    std::string part;
    while (std::getline(in, part, ':')) {
      if (!part.empty()) dirs.push_back({part, "TAEHV_PLUGIN_PATH", false});
    }
  }
  // The build tree mirrors the install tree (bin/ and lib/taehv/plugins), so one rule serves both.
  if (!self_path.empty()) {
    fs::path install = fs::path(self_path).parent_path().parent_path() / TAEHV_PLUGIN_SUBDIR;
    dirs.push_back({install.lexically_normal().string(), "install", false});
  }
  return dirs;
}

Discovery discoverPlugins(const std::vector<PluginDir>& dirs) {
  Discovery out;
  std::set<std::string> seen;
  for (const auto& dir : dirs) {
    struct stat st {};
    if (::stat(dir.path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      if (dir.required) {
        out.errors.push_back(dir.path + ": plugin folder given by " + dir.origin +
                             " does not exist or is not a folder; fix the path");
      }
      continue;
    }
    if (st.st_mode & S_IWOTH) {
      out.errors.push_back(dir.path + ": plugin folder (from " + dir.origin + ") is writable by everyone (mode " +
                           octalMode(st.st_mode) + "); refusing to load code from it: run chmod o-w '" + dir.path +
                           "'");
      continue;
    }
    std::error_code ec;
    std::vector<fs::path> entries;
    for (const auto& entry : fs::directory_iterator(dir.path, ec)) entries.push_back(entry.path());
    std::sort(entries.begin(), entries.end());
    for (const auto& path : entries) {
      std::string file = path.filename().string();
      const std::size_t prefix = std::strlen(kPrefix), suffix = std::strlen(kSuffix);
      if (file.size() <= prefix + suffix || file.compare(0, prefix, kPrefix) != 0 ||
          file.compare(file.size() - suffix, suffix, kSuffix) != 0) {
        continue;
      }
      std::string name = file.substr(prefix, file.size() - prefix - suffix);
      if (!seen.insert(name).second) continue;  // an earlier folder of the path shadows this one
      out.files.push_back({name, path.string()});
    }
  }
  return out;
}

Checked<LoadedPlugin> loadPlugin(const std::string& path) {
  Checked<LoadedPlugin> result;
  // Its type before anything opens it (input_file.h): a FIFO named like a plugin would block the open for ever.
  if (Status regular = files::checkInputFile(path, "plugin file", files::Role::kOther); !regular.ok()) {
    result.error = regular.error + " (or remove it from the plugin folder)";
    return result;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    result.error = path + ": cannot read plugin file (" + std::strerror(errno) + ")";
    return result;
  }
  if (st.st_mode & S_IWOTH) {
    result.error = path + ": plugin file is writable by everyone (mode " + octalMode(st.st_mode) +
                   "); refusing to load it: run chmod o-w '" + path + "'";
    return result;
  }
  // Before dlopen maps anything: a file cut short would otherwise end the process with SIGBUS (elf_check.h).
  // A file truncated between this check and dlopen is not covered; the folder and file checks above keep
  // others from doing that, and a plugin is not rewritten while taehv-run starts.
  if (Status elf = checkElfSharedObject(path); !elf.ok()) {
    result.error = path + ": not a shared library taehv-run can load (" + elf.error +
                   "); remove it from the plugin folder or rebuild the plugin with taehv_add_plugin()";
    return result;
  }

  boost::dll::fs::error_code ec;
  boost::dll::shared_library lib(path, ec, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  if (ec || !lib.is_loaded()) {
    const char* why = ::dlerror();
    result.error = path + ": cannot be loaded as a shared library (" + (why ? why : ec.message()) +
                   "); check `ldd " + path + "` and rebuild the plugin for this system";
    return result;
  }
  if (!lib.has(kPluginInfoSymbol)) {
    result.error = path + ": missing symbol '" + kPluginInfoSymbol +
                   "'; not a taehv-run plugin, or built without TAEHV_DEFINE_PLUGIN";
    return result;
  }
  // The info layout is frozen across API versions; read the version before touching anything else.
  const taehv_plugin_info_t* info = lib.get<const taehv_plugin_info_t*()>(kPluginInfoSymbol)();
  if (info == nullptr) {
    result.error = path + ": taehv_plugin_info() returned null; this is a bug in the plugin";
    return result;
  }
  if (info->api_version != kPluginApiVersion) {
    result.error = path + ": plugin API version mismatch (found " + std::to_string(info->api_version) +
                   ", supported " + std::to_string(kPluginApiVersion) +
                   "); rebuild the plugin against this taehv-run's taehv/plugin_api.h";
    return result;
  }
  if (!lib.has(kPluginFactorySymbol)) {
    result.error = path + ": missing symbol '" + kPluginFactorySymbol +
                   "'; rebuild the plugin with TAEHV_DEFINE_PLUGIN from taehv/plugin_api.h";
    return result;
  }
  LoadedPlugin& plugin = result.value;
  plugin.name = info->name ? info->name : "";
  plugin.plugin_version = info->plugin_version ? info->plugin_version : "";
  plugin.description = info->description ? info->description : "";
  plugin.api_version = info->api_version;
  plugin.path = path;
  if (plugin.name.empty()) {
    result.error = path + ": the plugin has an empty name in taehv_plugin_info; this is a bug in the plugin";
    return result;
  }
  // From the factory call on, the library holds code of objects that may exist: it is never unloaded.
  auto* factory = lib.get<Backend*()>(kPluginFactorySymbol);
  keptLibraries().push_back(std::move(lib));
  std::optional<std::string> thrown;
  Backend* backend = guardPluginCall([&] { return factory(); }, [&](const std::string& what) -> Backend* {
    thrown = what;
    return nullptr;
  });
  if (thrown) {
    result.error = path + ": the plugin's factory threw (" + *thrown + "); a plugin must not throw: fix the plugin";
    return result;
  }
  if (backend == nullptr) {
    result.error = path + ": the plugin's factory returned no backend; see the plugin's own messages above";
    return result;
  }
  plugin.backend = new HostGuardedBackend(backend, plugin.name, path);  // lives as long as the process
  return result;
}

}  // namespace taehv
