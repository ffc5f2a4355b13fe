#include "taehv/group/node_local_checkpoints.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <set>

#include "taehv/parse.h"

namespace taehv::group {
namespace fs = std::filesystem;

std::vector<std::int64_t> heldCheckpointSteps(const std::string& dir) {
  static const std::string kPrefix = "checkpoint-";
  std::vector<std::int64_t> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::error_code type;
    if (!e.is_directory(type)) continue;
    const std::string name = e.path().filename().string();
    if (name.rfind(kPrefix, 0) != 0) continue;
    const std::optional<std::int64_t> step = parseCount<std::int64_t>(std::string_view(name).substr(kPrefix.size()));
    if (!step) continue;
    if (!fs::is_regular_file(e.path() / "manifest.json", type)) continue;
    steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end(), std::greater<>());
  if (steps.size() > kMaxReportedSteps) steps.resize(kMaxReportedSteps);
  return steps;
}

Checked<std::int64_t> agreeResumeStep(const std::vector<HeldCheckpoints>& members) {
  // A member holding none is a fresh node (a replacement, an emptied disk): its workers receive the agreed
  // checkpoint from a rank that holds it (taehv-train, over the process group), so it does not narrow the choice.
  bool any = false;
  std::set<std::int64_t> common;
  for (const HeldCheckpoints& m : members) {
    if (m.steps.empty()) continue;
    const std::set<std::int64_t> held(m.steps.begin(), m.steps.end());
    if (!any) {
      any = true;
      common = held;
      continue;
    }
    std::set<std::int64_t> both;
    std::set_intersection(common.begin(), common.end(), held.begin(), held.end(), std::inserter(both, both.end()));
    common = std::move(both);
  }
  if (!any) return {"", 0};
  if (!common.empty()) return {"", *common.rbegin()};
  std::string held;
  for (const HeldCheckpoints& m : members) {
    std::vector<std::int64_t> steps = m.steps;
    std::sort(steps.begin(), steps.end());
    std::string list;
    for (std::int64_t s : steps) list += (list.empty() ? "" : ",") + std::to_string(s);
    held += (held.empty() ? "" : "; ") + m.node + ": " + (list.empty() ? "none" : list);
  }
  return {"no checkpoint is held by every node of the formation that holds any, so none can be resumed (" + held +
          "); copy one checkpoint-STEP folder to every node's --node-local-checkpoints folder (or empty the folders "
          "of the nodes that should receive one from the others); nothing was deleted"};
}

}  // namespace taehv::group
