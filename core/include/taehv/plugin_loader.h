// Finding and loading backend plugins (Boost.DLL). Plugins are loaded from the main thread, once, and never
// unloaded: Backend objects they create live as long as the process.
//
// A plugin is a file named taehv_plugin_<name>.so in one folder of the search path, in this order (the first
// file of a name wins): --plugin-dir folders, TAEHV_PLUGIN_PATH (colon-separated), then the plugin folder of
// the install or build tree (<dir of taehv-run>/../<libdir>/taehv/plugins, libdir as GNUInstallDirs says).
//
// Loading checks, each failure one line naming the file and what to do:
//   folder or file that anyone but root and the running user can change (writable by its group or by everyone, or
//   owned by another user: loadable.h) -> refused; not a regular file (a FIFO: checked before anything opens it);
//   not an ELF shared library of this machine, or one whose headers point
//   past the end of the file (cut short: checked before dlopen, which would die of SIGBUS); dlopen failure (missing
//   dependency); missing taehv_plugin_info; api_version != kPluginApiVersion (checked before anything else is
//   touched); missing factory; factory returned null or threw.
//
// Every call into a loaded plugin goes through LoadedPlugin::backend, which runs it under guardPluginCall: an
// exception a plugin lets out becomes a PluginFault naming the plugin, its file and the method, which
// runTaehvRun reports as one error line with exit code 2.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "taehv/descriptor.h"
#include "taehv/plugin_api.h"

namespace taehv {

/// One folder of the plugin search path.
struct PluginDir {
  std::string path;
  std::string origin;     ///< "--plugin-dir", "TAEHV_PLUGIN_PATH" or "install"
  bool required = false;  ///< a missing required folder is an error (the user named it)
};

/// A plugin file found on the search path, not loaded yet.
struct PluginFile {
  std::string name;  ///< from the file name: taehv_plugin_<name>.so
  std::string path;
};

/// A plugin let an exception out of one of its methods (a bug in the plugin). what(): one line naming the
/// plugin's file and name, the method and the exception's message.
class PluginFault : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A loaded plugin. `backend` is owned by the process (never freed, never unloaded); it is the host's guard
/// around the plugin's own backend: each call that throws throws PluginFault instead.
struct LoadedPlugin {
  std::string name;
  std::string plugin_version;
  std::string description;
  std::uint32_t api_version = 0;
  std::string path;
  Backend* backend = nullptr;
};

/// The search path for taehv-run at `self_path` with --plugin-dir folders `flag_dirs` and environment `env`.
std::vector<PluginDir> pluginSearchPath(const std::string& self_path, const std::vector<std::string>& flag_dirs,
                                        const Env& env);

/// The plugin files on `dirs` (first of each name wins), or the errors that forbid using the path at all
/// (a folder others can change, a --plugin-dir that does not exist).
struct Discovery {
  std::vector<PluginFile> files;
  std::vector<std::string> errors;
};
Discovery discoverPlugins(const std::vector<PluginDir>& dirs);

/// Loads the plugin at `path`: checks the file, opens it with Boost.DLL, reads taehv_plugin_info and its API
/// version, and only then calls the factory.
Checked<LoadedPlugin> loadPlugin(const std::string& path);

}  // namespace taehv
