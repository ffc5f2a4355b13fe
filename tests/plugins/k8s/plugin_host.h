// Test helper: loads a built backend plugin (.so) the way taehv-run does (dlopen, info first, then the v1
// factory) and runs its commands with stdout captured. Shared by the k8s and pai plugin tests.
#pragma once

#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "taehv/plugin_api.h"

namespace taehv::testing {

/// A loaded plugin; never unloaded (as in taehv-run).
struct LoadedPlugin {
  const taehv_plugin_info_t* info = nullptr;
  std::unique_ptr<Backend> backend;
  std::string error;
};

inline std::string pluginPath(const std::string& name) {
  const char* dir = std::getenv("TAEHV_PLUGIN_DIR");
  return std::string(dir ? dir : ".") + "/taehv_plugin_" + name + ".so";
}

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

/// Runs backend->runCommand with stdout redirected to a temporary file.
inline CommandOutput runPluginCommand(Backend& backend, const Env& env, const std::string& command,
                                      const std::vector<std::string>& args) {
  CommandOutput result;
  HostContext host;
  host.env = env;
  host.log = [&](LogLevel, const std::string& m) { result.logs.push_back(m); };
  char tmpl[] = "/tmp/taehv-plugin-out-XXXXXX";
  int fd = mkstemp(tmpl);
  std::fflush(stdout);
  int saved = dup(1);
  dup2(fd, 1);
  result.rc = backend.runCommand(host, command, args);
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

}  // namespace taehv::testing
