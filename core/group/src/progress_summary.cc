// Progress summaries and the straggler judgement. See taehv/group/progress_summary.h.
#include "taehv/group/progress_summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace taehv::group {
namespace {

constexpr std::string_view kSummaryTag = "P2 ";
/// Fields per entry in the summary text.
constexpr std::size_t kFields = 9;
/// Largest integer a summary field may carry: far above any step or duration in ms, far below overflow.
constexpr std::int64_t kMaxField = std::int64_t{1} << 62;

std::int64_t millis(double s) { return s <= 0 ? 0 : static_cast<std::int64_t>(std::llround(s * 1000.0)); }

/// `v` with `digits` decimals.
std::string fixed(double v, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

/// A non-negative decimal integer, nothing else; false otherwise.
bool parseInt(std::string_view text, std::int64_t* out) {
  if (text.empty() || text.size() > 19) return false;
  std::int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v > kMaxField) return false;
  *out = v;
  return true;
}

/// A section word: lower-case letters and '_' (the protocol's words), or "" (none yet).
bool isSectionWord(std::string_view text) {
  return text.size() <= 32 &&
         std::all_of(text.begin(), text.end(), [](char c) { return (c >= 'a' && c <= 'z') || c == '_'; });
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

/// "0-2, 4, 6-7" for sorted ids.
std::string idRanges(std::vector<int> ids) {
  std::sort(ids.begin(), ids.end());
  std::string out;
  for (std::size_t i = 0; i < ids.size();) {
    std::size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(ids[i]) + (j > i ? "-" + std::to_string(ids[j]) : "");
    i = j + 1;
  }
  return out;
}

std::vector<int> idsOf(const std::vector<Straggler>& s) {
  std::vector<int> out;
  for (const Straggler& x : s) out.push_back(x.id);
  std::sort(out.begin(), out.end());
  return out;
}

std::string figuresOf(const char* what, const std::vector<Straggler>& s) {
  std::string out;
  for (const Straggler& x : s) {
    out += std::string(out.empty() ? "" : "; ") + what + " " + std::to_string(x.id) + " busy " +
           fixed(x.busy_s, 3) + " s per step (median of " +
           std::to_string(x.steps) + " steps), " + fixed(x.ratio, 2) + "x the others' median " +
           fixed(x.others_median_s, 3) + " s";
  }
  return out;
}

}  // namespace

std::string encodeSummary(const std::vector<RankSummary>& ranks, std::size_t max_bytes) {
  std::string out(kSummaryTag);
  for (const RankSummary& r : ranks) {
    const std::string entry = std::to_string(r.rank) + "," + std::to_string(r.node) + "," + std::to_string(r.step) +
                              "," + (isSectionWord(r.section) ? r.section : std::string()) + "," +
                              std::to_string(millis(r.last_step_s)) + "," + std::to_string(millis(r.age_s)) + "," +
                              std::to_string(millis(r.busy_s)) + "," + std::to_string(std::max(0, r.busy_steps)) +
                              "," + std::to_string(millis(r.view_age_s)) + ";";
    if (out.size() + entry.size() > max_bytes) break;
    out += entry;
  }
  return out;
}

Checked<std::vector<RankSummary>> decodeSummary(std::string_view text) {
  Checked<std::vector<RankSummary>> result;
  if (text.empty()) return result;
  if (text.substr(0, kSummaryTag.size()) != kSummaryTag || text.size() > kMaxSummaryBytes) {
    return {"not a progress summary (want 'P2 ' and at most " + std::to_string(kMaxSummaryBytes) + " bytes)"};
  }
  text.remove_prefix(kSummaryTag.size());
  while (!text.empty()) {
    const std::size_t end = text.find(';');
    if (end == std::string_view::npos) return {"a progress summary entry without its ';'"};
    std::string_view entry = text.substr(0, end);
    text.remove_prefix(end + 1);
    std::vector<std::string_view> fields;
    for (std::size_t at = 0;;) {
      const std::size_t comma = entry.find(',', at);
      fields.push_back(entry.substr(at, comma == std::string_view::npos ? std::string_view::npos : comma - at));
      if (comma == std::string_view::npos) break;
      at = comma + 1;
    }
    std::int64_t v[kFields] = {};
    bool ok = fields.size() == kFields && isSectionWord(fields[3]);
    for (std::size_t i = 0; ok && i < kFields; ++i) ok = i == 3 || parseInt(fields[i], &v[i]);
    if (!ok || v[0] > INT32_MAX || v[1] > INT32_MAX || v[7] > INT32_MAX) {
      return {"a progress summary entry that does not parse: '" + std::string(entry.substr(0, 60)) + "'"};
    }
    RankSummary r;
    r.rank = static_cast<int>(v[0]);
    r.node = static_cast<int>(v[1]);
    r.step = v[2];
    r.section = std::string(fields[3]);
    r.last_step_s = static_cast<double>(v[4]) / 1000.0;
    r.age_s = static_cast<double>(v[5]) / 1000.0;
    r.busy_s = static_cast<double>(v[6]) / 1000.0;
    r.busy_steps = static_cast<int>(v[7]);
    r.view_age_s = static_cast<double>(v[8]) / 1000.0;
    result.value.push_back(std::move(r));
  }
  return result;
}

std::vector<RankSummary> agedSince(std::vector<RankSummary> ranks, std::chrono::steady_clock::time_point at,
                                   std::chrono::steady_clock::time_point now) {
  const double seconds = std::chrono::duration<double>(now - at).count();
  for (RankSummary& r : ranks) {
    r.age_s += seconds;
    r.view_age_s += seconds;
  }
  return ranks;
}

void sortMostBehindFirst(std::vector<RankSummary>& ranks) {
  std::stable_sort(ranks.begin(), ranks.end(), [](const RankSummary& a, const RankSummary& b) {
    if (a.step != b.step) return a.step < b.step;
    return a.age_s > b.age_s;
  });
}

std::string describeSpread(std::vector<RankSummary> ranks) {
  if (ranks.empty()) return "";
  std::map<std::int64_t, std::vector<const RankSummary*>> by_step;
  for (const RankSummary& r : ranks) by_step[r.step].push_back(&r);
  std::string out;
  for (const auto& [step, at] : by_step) {
    // Within a step, ranks are grouped by section; the ranks silent longest are named with their silence.
    std::map<std::string, std::vector<int>> by_section;
    for (const RankSummary* r : at) by_section[r->section.empty() ? "startup" : r->section].push_back(r->rank);
    out += std::string(out.empty() ? "" : "; ") + "step " + std::to_string(step) + ":";
    bool first = true;
    for (const auto& [section, ids] : by_section) {
      out += std::string(first ? " " : ", ") + (ids.size() == 1 ? "rank " : "ranks ") + idRanges(ids) + " in " +
             section;
      first = false;
    }
  }
  const std::int64_t low = by_step.begin()->first, high = by_step.rbegin()->first;
  const RankSummary* silent = &ranks.front();
  for (const RankSummary& r : ranks) {
    if (r.age_s > silent->age_s) silent = &r;
  }
  std::string behind;
  if (high > low) {
    std::vector<int> ids;
    std::vector<int> nodes;
    for (const RankSummary* r : by_step.begin()->second) {
      ids.push_back(r->rank);
      if (std::find(nodes.begin(), nodes.end(), r->node) == nodes.end()) nodes.push_back(r->node);
    }
    behind = "; behind: " + std::string(ids.size() == 1 ? "rank " : "ranks ") + idRanges(ids) + " (" +
             (nodes.size() == 1 ? "node " : "nodes ") + idRanges(nodes) + ") at step " + std::to_string(low) + ", " +
             std::to_string(high - low) + (high - low == 1 ? " step" : " steps") + " behind step " +
             std::to_string(high);
  } else {
    behind = "; every rank at step " + std::to_string(low);
  }
  return out + behind + "; silent longest: rank " + std::to_string(silent->rank) + " (node " +
         std::to_string(silent->node) + ", " + fixed(silent->age_s, 1) + " s)";
}

std::vector<Straggler> findStragglers(const std::vector<BusyFigure>& figures, double factor, int min_steps) {
  std::vector<const BusyFigure*> judged;
  for (const BusyFigure& f : figures) {
    if (f.steps >= min_steps && f.busy_s > 0) judged.push_back(&f);
  }
  std::vector<Straggler> out;
  if (judged.size() < 2) return out;
  for (const BusyFigure* f : judged) {
    std::vector<double> others;
    for (const BusyFigure* o : judged) {
      if (o != f) others.push_back(o->busy_s);
    }
    // The upper median: of an even count the larger middle figure, so a fast rank among few does not pull the
    // others' figure down far enough to make an ordinary rank look slow (0.05, 0.2, 0.2: nobody is a straggler).
    std::sort(others.begin(), others.end());
    const double m = others[others.size() / 2];
    if (m > 0 && f->busy_s > factor * m) out.push_back({f->id, f->busy_s, m, f->busy_s / m, f->steps, f->step});
  }
  std::sort(out.begin(), out.end(), [](const Straggler& a, const Straggler& b) { return a.ratio > b.ratio; });
  return out;
}

std::vector<BusyFigure> nodeFigures(const std::vector<RankSummary>& ranks) {
  std::map<int, std::vector<const RankSummary*>> by_node;
  for (const RankSummary& r : ranks) by_node[r.node].push_back(&r);
  std::vector<BusyFigure> out;
  for (const auto& [node, rs] : by_node) {
    std::vector<double> busy;
    int steps = rs.front()->busy_steps;
    std::int64_t step = rs.front()->step;
    for (const RankSummary* r : rs) {
      busy.push_back(r->busy_s);
      steps = std::min(steps, r->busy_steps);
      step = std::min(step, r->step);
    }
    out.push_back({node, median(std::move(busy)), steps, step});
  }
  return out;
}

std::vector<Straggler> PersistentStragglers::confirm(const std::vector<Straggler>& judged, int steps) {
  std::map<int, std::int64_t> since;
  std::vector<Straggler> out;
  for (const Straggler& s : judged) {
    const auto was = since_.find(s.id);
    const std::int64_t from = was != since_.end() && was->second <= s.step ? was->second : s.step;
    since[s.id] = from;
    if (s.step - from >= steps) out.push_back(s);
  }
  since_ = std::move(since);
  return out;
}

std::string StragglerLog::update(const std::vector<Straggler>& ranks, const std::vector<Straggler>& nodes) {
  std::vector<int> r = idsOf(ranks), n = idsOf(nodes);
  if (r == ranks_ && n == nodes_) return "";
  const bool had = !ranks_.empty() || !nodes_.empty();
  ranks_ = std::move(r);
  nodes_ = std::move(n);
  if (ranks.empty() && nodes.empty()) return had ? "stragglers: none any more (every rank within " +
                                                       fixed(kStragglerFactor, 1) + "x the others' median)"
                                                 : "";
  std::string line = "stragglers (busy time per step, outside the gradient exchange, more than " +
                     fixed(kStragglerFactor, 1) + "x the others' median): " +
                     figuresOf("rank", ranks);
  if (!nodes.empty()) line += std::string(ranks.empty() ? "" : "; ") + figuresOf("node", nodes);
  return line + "; the job goes on";
}

}  // namespace taehv::group
