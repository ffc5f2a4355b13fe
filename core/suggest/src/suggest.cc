#include "taehv/suggest.h"

#include <algorithm>
#include <utility>

namespace taehv {

int editDistance(const std::string& a, const std::string& b) {
  std::vector<int> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (std::size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (std::size_t j = 1; j <= b.size(); ++j) {
      int above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::vector<std::string> closestNames(const std::string& typed, const std::vector<std::string>& known) {
  const int limit = std::max<int>(2, static_cast<int>(typed.size()) / 3);
  std::vector<std::pair<int, std::string>> scored;
  for (const auto& name : known) {
    if (name == typed) continue;
    int d = editDistance(typed, name);
    if (!typed.empty() && name.compare(0, typed.size(), typed) == 0) d = std::min(d, 1);
    if (d <= limit) scored.emplace_back(d, name);
  }
  std::stable_sort(scored.begin(), scored.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> out;
  for (const auto& [d, name] : scored) {
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  return out;
}

std::string didYouMean(const std::string& typed, const std::vector<std::string>& known) {
  auto close = closestNames(typed, known);
  if (close.empty()) return "";
  std::string out = " (did you mean '" + close[0] + "'";
  if (close.size() > 1) out += " or '" + close[1] + "'";
  return out + "?)";
}

}  // namespace taehv
