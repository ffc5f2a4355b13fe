// Reading an environment snapshot (taehv::Env, the name -> value map the host hands plugins and tests fake): the one
// environment reader of taehv-run and its plugins, in-tree and out-of-tree (installed beside taehv/plugin_api.h;
// std only, header-only, nothing of it crosses the plugin ABI). Nothing here calls getenv(): callers pass the
// snapshot (a program's main takes it once with processEnvironment()), so a test decides what a function sees.
//
// Typed reads go through a parse.h parser; text it refuses is an error that names the variable and its text:
// "NAME='TEXT' is not <what the caller expects>".
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "taehv/checked.h"
#include "taehv/plugin_api.h"

extern "C" char** environ;  // POSIX: this process's environment

namespace taehv {

/// This process's environment, read once into a snapshot: what a program's main (taehv-run, taehv-train) hands
/// the code that reads variables. Plugins never call it: the host gives them HostContext::env.
inline Env processEnvironment() {
  Env env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const std::size_t eq = text.find('=');
    if (eq != std::string_view::npos) env.emplace(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
  }
  return env;
}

/// The text of `name` in `env`, or nullptr when it is unset. An empty value is a value here (envValue says
/// otherwise); the pointer lives as long as `env` does.
inline const std::string* findEnv(const Env& env, const std::string& name) {
  const auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

/// The text of `name`, or nullopt when it is unset or empty (platforms export empty variables to mean "none").
inline std::optional<std::string> envValue(const Env& env, const std::string& name) {
  const std::string* text = findEnv(env, name);
  if (text == nullptr || text->empty()) return std::nullopt;
  return *text;
}

/// One variable as found: its name and its text.
struct EnvEntry {
  std::string name;
  std::string text;
};

/// The first of `names` that is set (an empty value counts as set), or nullopt when none is. For a value a platform
/// gives under several names in order of preference (SLURM_STEP_NODELIST, then SLURM_JOB_NODELIST).
inline std::optional<EnvEntry> firstEnv(const Env& env, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (const std::string* text = findEnv(env, name)) return EnvEntry{name, *text};
  }
  return std::nullopt;
}

/// Whether an empty value reads as unset (platforms that export "" for "none") or as text to parse (and refuse).
enum class EmptyEnv { kUnset, kText };

/// Reads `name` with `parse`, a parse.h parser (text -> std::optional<T>). The value is nullopt when the variable is
/// unset (or empty, with EmptyEnv::kUnset); text `parse` refuses is the error "NAME='TEXT' is not " + `expected`, where
/// `expected` says what it should be and how to fix it, e.g. "a whole number; fix or unset it".
template <typename Parse, typename T = typename std::invoke_result_t<Parse, std::string_view>::value_type>
Checked<std::optional<T>> readEnv(const Env& env, const std::string& name, Parse&& parse, const std::string& expected,
                                  EmptyEnv empty = EmptyEnv::kUnset) {
  const std::string* text = findEnv(env, name);
  if (text == nullptr || (text->empty() && empty == EmptyEnv::kUnset)) return {};
  std::optional<T> value = std::forward<Parse>(parse)(std::string_view(*text));
  if (!value) return {name + "='" + *text + "' is not " + expected};
  return {"", std::move(value)};
}

/// readEnv for a plan's field: the value with its provenance "env NAME", unset when the variable is.
template <typename Parse, typename T = typename std::invoke_result_t<Parse, std::string_view>::value_type>
Checked<Sourced<T>> readSourcedEnv(const Env& env, const std::string& name, Parse&& parse, const std::string& expected,
                                   EmptyEnv empty = EmptyEnv::kUnset) {
  Checked<std::optional<T>> read = readEnv(env, name, std::forward<Parse>(parse), expected, empty);
  Checked<Sourced<T>> out{std::move(read.error), {}};
  if (read.value) out.value.set(std::move(*read.value), "env " + name);
  return out;
}

}  // namespace taehv
