// libFuzzer target: any bytes as a taehv-train YAML config give a config or ConfigError (from the merge or from
// validate()); never a crash, another exception (yaml-cpp's own, std::out_of_range, ...) or undefined behaviour.
// A config that validates must print as YAML that reads back to the same text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "taehv/train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using taehv::train::Config;
  using taehv::train::ConfigError;
  Config config;
  try {
    config.mergeYamlText(std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
    config.validate();
  } catch (const ConfigError&) {
    return 0;
  }
  const std::string yaml = config.toYaml();
  Config again;
  try {
    again.mergeYamlText(yaml, "round trip");
  } catch (const ConfigError&) {
    std::abort();  // the effective config must always load back
  }
  if (again.toYaml() != yaml) std::abort();
  return 0;
}
