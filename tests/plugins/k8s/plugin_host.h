// Test helper: loads a built backend plugin (.so) the way taehv-run does (dlopen, info first, then the factory of
// this API version) and runs its commands as taehv-run does (arguments parsed by the command's declaration,
// taehv/command_line.h) with stdout captured. Shared by the k8s and pai plugin tests.
#pragma once

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "taehv/command_line.h"
#include "taehv/plugin_api.h"

namespace taehv::testing {

/// A loaded plugin; never unloaded (as in taehv-run).
struct LoadedPlugin {
  const taehv_plugin_info_t* info = nullptr;
  std::unique_ptr<Backend> backend;
  std::string error;
};

/// The build tree: TAEHV_BUILD_DIR, else derived from this test's own path (<build>/tests/<test>), so that a
/// test run by hand, or with an incomplete ctest ENVIRONMENT, still finds what it needs.
inline std::string buildDir() {
  if (const char* dir = std::getenv("TAEHV_BUILD_DIR")) return dir;
  char exe[4096] = {};
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  std::string path(exe, n > 0 ? static_cast<size_t>(n) : 0);
  for (int up = 0; up < 2 && path.find('/') != std::string::npos; ++up) path.erase(path.rfind('/'));
  return path;
}

inline std::string pluginDir() {
  const char* dir = std::getenv("TAEHV_PLUGIN_DIR");
  return dir ? std::string(dir) : buildDir() + "/lib/taehv/plugins";
}

/// The source tree: TAEHV_SOURCE_DIR, else the one this test was configured from.
inline std::string sourceDir() {
  if (const char* dir = std::getenv("TAEHV_SOURCE_DIR")) return dir;
#ifdef TAEHV_TEST_SOURCE_DIR
  return TAEHV_TEST_SOURCE_DIR;
#else
  return ".";
#endif
}

inline std::string pluginPath(const std::string& name) { return pluginDir() + "/taehv_plugin_" + name + ".so"; }

inline LoadedPlugin loadPlugin(const std::string& name) {
  LoadedPlugin p;
  const std::string path = pluginPath(name);
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    p.error = dlerror();
    return p;
  }
  auto info_fn = reinterpret_cast<const taehv_plugin_info_t* (*)()>(dlsym(handle, kPluginInfoSymbol));
  auto create_fn = reinterpret_cast<Backend* (*)()>(dlsym(handle, kPluginFactorySymbol));
  if (!info_fn || !create_fn) {
    p.error = path + ": entry symbols missing";
    return p;
  }
  p.info = info_fn();
  if (p.info->api_version != kPluginApiVersion) {
    p.error = path + ": api version " + std::to_string(p.info->api_version);
    return p;
  }
  p.backend.reset(create_fn());
  return p;
}

/// The result of one plugin command.
struct CommandOutput {
  int rc = -1;
  std::string out;                // what it wrote to stdout
  std::vector<std::string> logs;  // what it logged through the host
};

/// The plugins loaded by sharedPlugin(), by name.
inline std::map<std::string, LoadedPlugin>& sharedPlugins() {
  static std::map<std::string, LoadedPlugin> plugins;
  return plugins;
}

/// The plugin `name`, loaded once per test process; nullptr (and `error` set) when it cannot be loaded.
inline Backend* sharedPlugin(const std::string& name, std::string* error = nullptr) {
  auto& plugins = sharedPlugins();
  auto it = plugins.find(name);
  if (it == plugins.end()) it = plugins.emplace(name, loadPlugin(name)).first;
  if (error) *error = it->second.error;
  return it->second.backend.get();
}

/// Runs sub-command `command` of `backend` as taehv-run does (runBackendCommand; a name the backend does not
/// declare goes to runCommand as it is) with stdout redirected to a temporary file. A null backend (plugin not
/// loaded) gives rc -1 and a log line instead of a crash.
inline CommandOutput runPluginCommand(Backend* backend, const Env& env, const std::string& command,
                                      const std::vector<std::string>& args) {
  CommandOutput result;
  if (!backend) {
    result.logs.push_back("plugin not loaded (is TAEHV_PLUGIN_DIR set and the plugin built?)");
    return result;
  }
  HostContext host;
  host.env = env;
  host.log = [&](LogLevel, const std::string& m) { result.logs.push_back(m); };
  char tmpl[] = "/tmp/taehv-plugin-out-XXXXXX";
  int fd = mkstemp(tmpl);
  std::fflush(stdout);
  int saved = dup(1);
  dup2(fd, 1);
  std::string name = "plugin";  // as taehv-run names it in messages: the plugin's name
  for (const auto& [loaded, plugin] : sharedPlugins()) {
    if (plugin.backend.get() == backend) name = loaded;
  }
  const std::vector<CommandSpec> specs = backend->commands();
  const auto spec = std::find_if(specs.begin(), specs.end(), [&](const CommandSpec& c) { return c.name == command; });
  result.rc = spec != specs.end() ? runBackendCommand(*backend, name, *spec, host, args)
                                  : backend->runCommand(host, command, CommandArgs());
  std::fflush(stdout);
  dup2(saved, 1);
  close(saved);
  close(fd);
  std::ifstream in(tmpl);
  std::stringstream ss;
  ss << in.rdbuf();
  result.out = ss.str();
  unlink(tmpl);
  return result;
}

inline std::string joinLogs(const CommandOutput& o) {
  std::string s;
  for (const auto& l : o.logs) s += l + "\n";
  return s;
}

/// A fresh private folder under /tmp.
inline std::string makeTempDir() {
  char tmpl[] = "/tmp/taehv-k8s-test-XXXXXX";
  const char* dir = mkdtemp(tmpl);
  return dir ? dir : "/tmp";
}

inline void writeFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

inline std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace taehv::testing
