#include "taehv/sizing/profiles.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <optional>
#include <regex>
#include <sstream>

#include "taehv/files/input_file.h"
#include "taehv/parse.h"

namespace taehv::sizing {
namespace fs = std::filesystem;

namespace {

const std::regex& profileNamePattern() {
  static const std::regex pattern(R"(^(.*)-([0-9]+)x([0-9]+)\.ya?ml$)");
  return pattern;
}

bool isProfileName(const std::string& file) { return std::regex_match(file, profileNamePattern()); }

std::string shape(int nodes, int per_node) { return std::to_string(nodes) + "x" + std::to_string(per_node); }

double roundLr(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", value);
  return parseNumber(buf).value_or(value);
}

}  // namespace

std::string formatLr(double value) {
  char buf[64];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, value);
    if (parseNumber(buf) == value) break;
  }
  return buf;
}

Checked<TrainProfile> loadProfile(const std::string& path) {
  Checked<TrainProfile> result;
  TrainProfile& p = result.value;
  std::string& error = result.error;
  p.path = path;
  const std::string file = fs::path(path).filename().string();
  std::smatch m;
  if (!std::regex_match(file, m, profileNamePattern())) {
    error = path + ": not a profile name; name it <anything>-<NODES>x<GPUS_PER_NODE>.yaml, e.g. h100-2x8.yaml";
    return result;
  }
  p.name = fs::path(path).stem().string();
  // Digits by the pattern. A count past an int, or a world size (their product) past one, is refused with the counts
  // as the name writes them (a count read as 0 or -1 named a profile the user never wrote).
  const std::optional<int> nodes = parseCount(m[2].str(), 1), per_node = parseCount(m[3].str(), 1);
  if (!nodes || !per_node || static_cast<long long>(*nodes) * *per_node > std::numeric_limits<int>::max()) {
    error = path + ": the name says " + m[2].str() + "x" + m[3].str() + " (NODESxGPUS_PER_NODE); both counts must " +
            "be at least 1 and their product, the world size, at most " +
            std::to_string(std::numeric_limits<int>::max());
    return result;
  }
  p.nodes = *nodes;
  p.gpus_per_node = *per_node;
  const Checked<std::string> text = files::readInputFile(path, "--config profile", files::Role::kInput);
  if (!text.ok()) {
    error = text.error;
    return result;
  }
  YAML::Node root;
  try {
    root = YAML::Load(text.value);
  } catch (const YAML::Exception& e) {
    error = path + ": not valid YAML: " + e.what();
    return result;
  }
  const YAML::Node train = root.IsMap() ? root["train"] : YAML::Node();
  if (!train || !train.IsMap()) {
    error = path + ": no 'train:' section; a profile sets at least train.lr";
    return result;
  }
  try {
    if (!train["lr"]) {
      error = path + ": no train.lr; a profile must set the learning rate of its effective batch";
      return result;
    }
    p.lr = train["lr"].as<double>();
    if (train["batch_per_rank"]) p.batch_per_rank = train["batch_per_rank"].as<int>();
    if (train["grad_accum"]) p.grad_accum = train["grad_accum"].as<int>();
    if (root["output"] && root["output"]["dir"]) p.output_dir = root["output"]["dir"].as<std::string>();
    if (root["data"] && root["data"]["source"]) p.data_source = root["data"]["source"].as<std::string>();
  } catch (const YAML::Exception& e) {
    error = path + ": train.lr / train.batch_per_rank / train.grad_accum must be numbers, output.dir and " +
            "data.source strings (" + e.what() + ")";
    return result;
  }
  if (!(p.lr > 0) || p.batch_per_rank < 1 || p.grad_accum < 1) {
    error = path + ": needs train.lr > 0, train.batch_per_rank >= 1 and train.grad_accum >= 1";
  }
  return result;
}

Checked<std::vector<TrainProfile>> loadProfiles(const std::string& dir) {
  Checked<std::vector<TrainProfile>> result;
  std::vector<TrainProfile>& out = result.value;
  std::string& error = result.error;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    error = "--config " + dir + ": not a directory; give a folder of profiles such as examples/configs";
    return result;
  }
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string file = entry.path().filename().string();
    if (entry.is_regular_file(ec) && isProfileName(file)) files.push_back(entry.path().string());
  }
  if (ec) {
    error = "--config " + dir + ": cannot list it (" + ec.message() + ")";
    return result;
  }
  std::sort(files.begin(), files.end());
  for (const std::string& f : files) {
    Checked<TrainProfile> p = loadProfile(f);
    if (!p.ok()) return {p.error, {}};
    out.push_back(p.value);
  }
  if (out.empty()) {
    error = "--config " + dir + ": no profile in it; profiles are named <anything>-<NODES>x<GPUS_PER_NODE>.yaml";
    return result;
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const TrainProfile& a, const TrainProfile& b) { return a.worldSize() < b.worldSize(); });
  return result;
}

Checked<ProfileChoice> chooseProfile(const std::string& dir, int nnodes, int nproc_per_node) {
  Checked<std::vector<TrainProfile>> loaded = loadProfiles(dir);
  if (!loaded.ok()) return {loaded.error, {}};
  const std::vector<TrainProfile>& profiles = loaded.value;
  Checked<ProfileChoice> result;
  ProfileChoice& c = result.value;
  const int world = nnodes * nproc_per_node;
  const std::string job = std::to_string(world) + " workers (" + shape(nnodes, nproc_per_node) + ")";

  const TrainProfile* exact = nullptr;
  for (const TrainProfile& p : profiles) {
    if (p.worldSize() != world) continue;
    if (exact == nullptr || (p.nodes == nnodes && exact->nodes != nnodes)) exact = &p;
  }
  if (exact != nullptr) {
    c.config_path = exact->path;
    c.profile = *exact;
    c.reason = "profile " + exact->name + " matches the world size: " + job + "; effective batch " +
               std::to_string(exact->effectiveBatch()) + " = " + std::to_string(world) + " x " +
               std::to_string(exact->batch_per_rank) + " per rank x " + std::to_string(exact->grad_accum) +
               " accumulation, lr " + formatLr(exact->lr);
    if (exact->nodes != nnodes) {
      c.reason += " (the profile is laid out " + shape(exact->nodes, exact->gpus_per_node) +
                  "; only the world size matters to the trainer)";
    }
    return result;
  }

  const TrainProfile& base = profiles.front();
  TrainProfile d = base;
  d.nodes = nnodes;
  d.gpus_per_node = nproc_per_node;
  // Rounded to 6 significant digits: 1e-4 x 48/128 is 3.75e-05, not 3.7500000000000003e-05.
  d.lr = roundLr(base.lr * static_cast<double>(d.effectiveBatch()) / static_cast<double>(base.effectiveBatch()));
  std::string available;
  for (const TrainProfile& p : profiles) available += (available.empty() ? "" : ", ") + std::to_string(p.worldSize());
  c.derived = true;
  c.config_path = base.path;
  c.profile = d;
  c.overrides.emplace_back(kLrKey, formatLr(d.lr));
  c.reason = "no profile for " + job + " in " + dir + " (profiles exist for " + available +
             " workers); derived from the base profile " + base.name + " (the smallest): batch " +
             std::to_string(d.batch_per_rank) + " per rank x " + std::to_string(d.grad_accum) +
             " accumulation kept, effective batch " + std::to_string(base.effectiveBatch()) + " -> " +
             std::to_string(d.effectiveBatch()) + ", lr scaled linearly " + formatLr(base.lr) + " -> " + formatLr(d.lr);
  return result;
}

}  // namespace taehv::sizing
