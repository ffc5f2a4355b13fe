#include "taehv/slurm/hostlist.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <optional>

#include "taehv/parse.h"

namespace taehv::slurm {
namespace {

/// Separators between hosts outside brackets (SLURM's hostlist uses the same set).
bool isSeparator(char c) { return c == ',' || c == ' ' || c == '\t' || c == '\n'; }
bool isDigit(char c) { return c >= '0' && c <= '9'; }

/// Largest number a range may name: 18 decimal digits always fit in 64 bits.
constexpr std::size_t kMaxDigits = 18;

struct Range {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  int width = 0;  ///< zero-padded width: the length of LO as written
};

/// One bracket group: the ranges it lists, in the order written.
struct Group {
  std::vector<Range> ranges;
  std::size_t count = 0;  ///< hosts the group stands for
};

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

void appendNumber(std::string& out, std::uint64_t n, int width) {
  char digits[24];
  int len = 0;
  do {
    digits[len++] = static_cast<char>('0' + n % 10);
    n /= 10;
  } while (n != 0);
  for (int i = len; i < width; ++i) out.push_back('0');
  while (len > 0) out.push_back(digits[--len]);
}

/// A decimal number of at most kMaxDigits digits (leading zeros count: they are the width); nullopt otherwise.
std::optional<std::uint64_t> parseNumber(std::string_view s) {
  if (s.size() > kMaxDigits) return std::nullopt;
  return parseCount<std::uint64_t>(s);
}

/// Parses the inside of one bracket group ("1-3,7").
Checked<Group> parseGroup(std::string_view body) {
  Checked<Group> result;
  Group& group = result.value;
  if (body.empty()) return {"empty brackets '[]': write at least one number or range, e.g. n[1-3]"};
  std::size_t start = 0;
  while (start <= body.size()) {
    std::size_t comma = body.find(',', start);
    if (comma == std::string_view::npos) comma = body.size();
    std::string_view item = body.substr(start, comma - start);
    if (item.empty()) return {"empty range in " + quoted("[" + std::string(body) + "]") + " (stray comma)"};
    std::size_t dash = item.find('-');
    std::string_view lo_text = item.substr(0, dash);
    std::string_view hi_text = dash == std::string_view::npos ? lo_text : item.substr(dash + 1);
    const std::optional<std::uint64_t> lo = parseNumber(lo_text);
    const std::optional<std::uint64_t> hi = parseNumber(hi_text);
    if (!lo || !hi) return {"range " + quoted(item) + " is not N or LO-HI with decimal numbers of at most 18 digits"};
    if (*lo > *hi) return {"range " + quoted(item) + " goes backwards: write the low number first"};
    if (*hi - *lo >= kMaxHostsPerRange) {
      return {"range " + quoted(item) + " holds more than " + std::to_string(kMaxHostsPerRange) +
              " hosts (SLURM's limit per range)"};
    }
    const Range r{*lo, *hi, static_cast<int>(lo_text.size())};
    group.ranges.push_back(r);
    group.count += static_cast<std::size_t>(r.hi - r.lo + 1);
    start = comma + 1;
  }
  return result;
}

/// Expands one token (no separators outside brackets) and appends its hosts to `hosts`.
Status expandToken(std::string_view token, std::vector<std::string>& hosts) {
  // Split into literal texts and groups: texts[0] group[0] texts[1] group[1] ... texts[n].
  std::vector<std::string_view> texts;
  std::vector<Group> groups;
  std::size_t pos = 0;
  std::size_t text_start = 0;
  while (pos < token.size()) {
    char c = token[pos];
    if (c == ']') return {"']' without a matching '['"};
    if (c != '[') {
      ++pos;
      continue;
    }
    std::size_t close = token.find_first_of("[]", pos + 1);
    if (close == std::string_view::npos || token[close] == '[') {
      if (close != std::string_view::npos) return {"'[' inside brackets: groups cannot nest"};
      return {"'[' is never closed: add the ']' (e.g. n[1-3])"};
    }
    texts.push_back(token.substr(text_start, pos - text_start));
    Checked<Group> group = parseGroup(token.substr(pos + 1, close - pos - 1));
    if (!group.ok()) return {group.error};
    groups.push_back(std::move(group.value));
    pos = close + 1;
    text_start = pos;
  }
  texts.push_back(token.substr(text_start));
  if (groups.empty()) {
    hosts.emplace_back(token);
    return {};
  }
  if (!texts.back().empty()) {
    return {"text " + quoted(texts.back()) +
            " after the last ']': SLURM allows a bracket group only at the end of a name or before another group"};
  }
  std::size_t total = 1;
  for (const Group& g : groups) {
    if (total > kMaxHostsPerList / g.count) {
      return {"expands to more than " + std::to_string(kMaxHostsPerList) + " hosts"};
    }
    total *= g.count;
  }
  if (hosts.size() + total > kMaxHostsPerList) {
    return {"expands to more than " + std::to_string(kMaxHostsPerList) + " hosts"};
  }
  // SLURM's order (hostlist.c, _push_range_list): the last group varies fastest; the others are expanded
  // right to left by recursion, so the second-to-last group varies slowest and the first one next to the
  // last. For two groups this is plain row-major order. `order` lists groups from slowest to fastest.
  std::vector<std::size_t> order;
  for (std::size_t i = groups.size() - 1; i-- > 0;) order.push_back(i);
  order.push_back(groups.size() - 1);
  // Odometer: pick[i] = (range index, number) of group i.
  std::vector<std::pair<std::size_t, std::uint64_t>> pick(groups.size());
  for (std::size_t i = 0; i < groups.size(); ++i) pick[i] = {0, groups[i].ranges[0].lo};
  std::string name;
  for (std::size_t n = 0; n < total; ++n) {
    name.clear();
    for (std::size_t i = 0; i < groups.size(); ++i) {
      name.append(texts[i]);
      appendNumber(name, pick[i].second, groups[i].ranges[pick[i].first].width);
    }
    hosts.push_back(name);
    for (std::size_t k = order.size(); k-- > 0;) {
      auto& [ri, num] = pick[order[k]];
      const std::vector<Range>& ranges = groups[order[k]].ranges;
      if (num < ranges[ri].hi) {
        ++num;
        break;
      }
      ri = ri + 1 < ranges.size() ? ri + 1 : 0;
      num = ranges[ri].lo;
      if (ri != 0) break;  // this group moved on; the slower ones stay
    }
  }
  return {};
}

// ---- compression: SLURM's hostrange merging (hostlist.c: hostlist_push_range, _width_equiv) ----

/// A run of hosts prefix + [lo..hi] at one width, or a single name without a numeric suffix.
struct HostRange {
  std::string prefix;
  bool numbered = false;
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  int width = 0;
};

/// Splits a host name into prefix and trailing decimal number, as SLURM does.
HostRange splitHost(const std::string& host) {
  HostRange r;
  std::size_t end = host.size();
  std::size_t start = end;
  while (start > 0 && isDigit(host[start - 1])) --start;
  const std::optional<std::uint64_t> num = parseNumber(std::string_view(host).substr(start));
  if (!num) {
    r.prefix = host;
    return r;
  }
  r.prefix = host.substr(0, start);
  r.numbered = true;
  r.lo = r.hi = *num;
  r.width = static_cast<int>(end - start);
  return r;
}

/// Zeros printed in front of n at width w.
int zeroPad(std::uint64_t n, int w) {
  int digits = 1;
  for (std::uint64_t v = n; v >= 10; v /= 10) ++digits;
  return w > digits ? w - digits : 0;
}

/// True when n at width *wn and m at width *wm can share one width (printing each unchanged); then both
/// widths are set to it. Mirrors SLURM's _width_equiv so compressed output matches `scontrol show hostlist`.
bool widthEquivalent(std::uint64_t n, int* wn, std::uint64_t m, int* wm) {
  if (*wn == *wm) return true;
  bool n_same = zeroPad(n, *wn) == zeroPad(n, *wm);
  bool m_same = zeroPad(m, *wm) == zeroPad(m, *wn);
  if (!n_same && !m_same) return false;
  if (!n_same) {
    *wm = *wn;
  } else {
    *wn = *wm;
  }
  return true;
}

void appendNumbers(std::string& out, const HostRange& r) {
  appendNumber(out, r.lo, r.width);
  if (r.hi > r.lo) {
    out.push_back('-');
    appendNumber(out, r.hi, r.width);
  }
}

bool sameBracket(const HostRange& a, const HostRange& b) { return a.numbered && b.numbered && a.prefix == b.prefix; }

}  // namespace

HostlistResult expandHostlist(std::string_view list) {
  HostlistResult result;
  auto fail = [&](const std::string& why) {
    result.value.clear();
    result.error = "hostlist " + quoted(list) + ": " + why;
    return result;
  };
  std::size_t pos = 0;
  while (pos < list.size()) {
    while (pos < list.size() && isSeparator(list[pos])) ++pos;
    if (pos == list.size()) break;
    std::size_t start = pos;
    bool in_bracket = false;
    for (; pos < list.size(); ++pos) {
      char c = list[pos];
      if (c == '[') {
        if (in_bracket) break;  // reported by expandToken
        in_bracket = true;
      } else if (c == ']') {
        in_bracket = false;
      } else if (in_bracket && c != ',' && isSeparator(c)) {
        return fail("whitespace inside brackets: write ranges without spaces, e.g. n[1-3,7]");
      } else if (!in_bracket && isSeparator(c)) {
        break;
      }
    }
    while (pos < list.size() && !isSeparator(list[pos])) ++pos;  // after a nested '[': keep the whole token
    if (Status s = expandToken(list.substr(start, pos - start), result.value); !s.ok()) return fail(s.error);
  }
  if (result.value.empty()) return fail("no host names: give e.g. n[1-4] or n1,n2");
  for (const std::string& host : result.value) {
    // Host names reach ssh, sbatch scripts and MASTER_ADDR: only the characters a host name can have.
    const auto bad = std::find_if(host.begin(), host.end(), [](char c) {
      return !(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.');
    });
    if (bad != host.end()) {
      return fail("host name " + quoted(host) + " has the character " + quoted(std::string_view(&*bad, 1)) +
                  ": host names are letters, digits, '-', '_' and '.'");
    }
  }
  return result;
}

std::string compressHostlist(const std::vector<std::string>& hosts) {
  std::vector<HostRange> ranges;
  for (const std::string& host : hosts) {
    HostRange r = splitHost(host);
    if (!ranges.empty()) {
      HostRange& tail = ranges.back();
      if (tail.numbered && r.numbered && tail.prefix == r.prefix && tail.hi + 1 == r.lo &&
          widthEquivalent(tail.lo, &tail.width, r.lo, &r.width)) {
        tail.hi = r.hi;
        continue;
      }
    }
    ranges.push_back(std::move(r));
  }
  std::string out;
  for (std::size_t i = 0; i < ranges.size();) {
    if (i) out.push_back(',');
    const HostRange& first = ranges[i];
    out.append(first.prefix);
    bool bracket = first.hi > first.lo || (i + 1 < ranges.size() && sameBracket(first, ranges[i + 1]));
    if (!first.numbered) {
      ++i;
      continue;
    }
    if (bracket) out.push_back('[');
    appendNumbers(out, first);
    for (++i; i < ranges.size() && sameBracket(ranges[i - 1], ranges[i]); ++i) {
      out.push_back(',');
      appendNumbers(out, ranges[i]);
    }
    if (bracket) out.push_back(']');
  }
  return out;
}

}  // namespace taehv::slurm
