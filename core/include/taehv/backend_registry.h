// The backend plugins of one taehv-run invocation: which are loaded (all for --backend auto, the named one for
// --backend NAME, none for local), why others could not be, which backend options each declares, and which one
// recognises the environment (auto-detection).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "taehv/plugin_api.h"
#include "taehv/plugin_loader.h"

namespace taehv {

/// What auto-detection decided.
struct BackendChoice {
  LoadedPlugin* plugin = nullptr;  ///< nullptr: no backend claims the environment (local mode)
  std::string detection;           ///< why detection chose `plugin`; "" when none was chosen
  std::string passed_over;         ///< the backend that was recognised but set aside by manual mode; "" if none
};

/// Loads plugins once and keeps them loaded for the life of the registry (and, as libraries are never
/// unloaded, of the process). Not thread-safe: used from the main thread only.
class BackendRegistry {
 public:
  /// Loads the plugins for `backend` ("auto": every plugin found, "local": none, else the one named) from the
  /// search path of `self_path`, `plugin_dirs` and `env`. Returns false when the named backend could not be
  /// loaded (errors() says why); the errors of other plugins found on the way are listed but not fatal.
  [[nodiscard]] bool load(const std::string& backend, const std::string& self_path,
                          const std::vector<std::string>& plugin_dirs, const Env& env, const HostContext& host);

  /// The plugins loaded by load(), in discovery order.
  std::vector<LoadedPlugin>& plugins() { return plugins_; }
  const std::vector<LoadedPlugin>& plugins() const { return plugins_; }
  /// Why plugins could not be found or loaded, in discovery order.
  const std::vector<std::string>& errors() const { return errors_; }
  /// Backend option name -> the loaded plugins that declare it.
  const std::map<std::string, std::vector<std::string>>& optionOwners() const { return option_owners_; }

  /// Asks every loaded plugin whether it recognises the environment and picks the most confident one. With
  /// `manual` (explicit --nnodes/--node-rank), the winner is only noted in `passed_over`, not chosen. Fails when
  /// the two most confident backends tie.
  Checked<BackendChoice> detect(const HostContext& host, bool manual);

  /// Every plugin on the search path, loaded once whatever load() chose (errors listed, not fatal). The
  /// pointers stay valid for the life of the registry.
  std::vector<LoadedPlugin*> allPlugins(const std::string& backend, const std::string& self_path,
                                        const std::vector<std::string>& plugin_dirs, const Env& env,
                                        std::vector<std::string>& errors);

 private:
  std::vector<LoadedPlugin> plugins_;                              // loaded for this invocation's backend
  std::vector<std::string> errors_;                                // why some could not be loaded
  std::map<std::string, std::vector<std::string>> option_owners_;  // backend option -> plugins declaring it
  bool listed_ = false;                                            // listing_ filled by allPlugins()
  std::vector<LoadedPlugin> listing_;                              // every plugin, for `taehv-run plugins`
  std::vector<std::string> listing_errors_;
};

}  // namespace taehv
