#include "taehv/ssh/hostfile.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <sstream>

#include "taehv/ssh/shell_words.h"
#include "taehv/parse.h"

namespace taehv::ssh {
namespace {

std::string trim(const std::string& s) {
  std::size_t b = 0;
  std::size_t e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  parts.push_back(cur);
  return parts;
}

constexpr int kMaxSlots = 1 << 16;

}  // namespace

HostsResult parseHostfile(const std::string& text, const std::string& origin) {
  HostsResult result;
  std::set<std::string> seen;
  std::istringstream in(text);
  std::string raw;
  int line_no = 0;
  auto fail = [&](const std::string& why) {
    result.error = origin + ":" + std::to_string(line_no) + ": " + why;
    result.value.clear();
    return result;
  };
  while (std::getline(in, raw)) {
    ++line_no;
    std::string line = raw;
    if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    line = trim(line);
    if (line.empty()) continue;
    std::istringstream words(line);
    std::string host;
    std::string slots_word;
    std::string extra;
    words >> host >> slots_word >> extra;
    if (slots_word.empty()) {
      return fail("expected 'HOST slots=N', got '" + line + "' (add slots=N: the number of processes on that host)");
    }
    if (!extra.empty() || slots_word.rfind("slots=", 0) != 0) {
      return fail("expected 'HOST slots=N', got '" + line + "'");
    }
    if (const std::string why = hostNameError(host); !why.empty()) return fail(why);
    const std::optional<int> parsed_slots = parseCount(slots_word.substr(6), 1, kMaxSlots);
    if (!parsed_slots) {
      return fail("slots must be a whole number from 1 to " + std::to_string(kMaxSlots) + ", got '" + slots_word +
                  "'");
    }
    if (!seen.insert(host).second) return fail("host '" + host + "' is listed twice; list each host once");
    const int slots = *parsed_slots;
    HostEntry entry;
    entry.host = host;
    entry.slots_in_file = slots;
    entry.line = line_no;
    for (int i = 0; i < slots; ++i) entry.slots.push_back(i);
    result.value.push_back(std::move(entry));
  }
  if (result.value.empty()) {
    result.error = origin + ": no hosts (write one 'HOST slots=N' line per host)";
  }
  return result;
}

HostsResult filterHosts(const std::vector<HostEntry>& hosts, const std::string& include, const std::string& exclude) {
  HostsResult result;
  if (!include.empty() && !exclude.empty()) {
    result.error = "--include and --exclude cannot be used together; use one of them";
    return result;
  }
  if (include.empty() && exclude.empty()) {
    result.value = hosts;
    return result;
  }
  const bool including = !include.empty();
  const std::string& spec = including ? include : exclude;
  const char* flag = including ? "--include" : "--exclude";

  std::map<std::string, const HostEntry*> by_name;
  for (const auto& h : hosts) by_name[h.host] = &h;
  // host -> slots kept
  std::map<std::string, std::set<int>> kept;
  if (!including) {
    for (const auto& h : hosts) kept[h.host].insert(h.slots.begin(), h.slots.end());
  }

  for (const std::string& node : split(spec, '@')) {
    const std::vector<std::string> parts = split(node, ':');
    const std::string& name = parts[0];
    if (name.empty()) {
      result.error = std::string(flag) + " '" + spec + "': empty host name (syntax: HOST[:SLOT,...][@HOST...])";
      return result;
    }
    if (parts.size() > 2) {
      result.error = std::string(flag) + " '" + node + "': more than one ':' (syntax: HOST[:SLOT,...])";
      return result;
    }
    const auto it = by_name.find(name);
    if (it == by_name.end()) {
      result.error = std::string(flag) + ": host '" + name + "' is not in the hostfile";
      return result;
    }
    const HostEntry& entry = *it->second;
    if (parts.size() == 1) {
      if (including) {
        kept[name].insert(entry.slots.begin(), entry.slots.end());
      } else {
        kept[name].clear();
      }
      continue;
    }
    for (const std::string& slot_text : split(parts[1], ',')) {
      const std::optional<int> parsed_slot = parseCount(slot_text, 0, kMaxSlots);
      if (!parsed_slot) {
        result.error = std::string(flag) + " '" + node + "': slot '" + slot_text + "' is not a number";
        return result;
      }
      const int slot = *parsed_slot;
      if (std::find(entry.slots.begin(), entry.slots.end(), slot) == entry.slots.end()) {
        result.error = std::string(flag) + " '" + node + "': host '" + name + "' has slots 0.." +
                       std::to_string(entry.slots_in_file - 1) + ", not " + std::to_string(slot);
        return result;
      }
      if (including) {
        kept[name].insert(slot);
      } else {
        kept[name].erase(slot);
      }
    }
  }
  for (const auto& h : hosts) {
    const auto it = kept.find(h.host);
    if (it == kept.end() || it->second.empty()) continue;
    HostEntry e = h;
    e.slots.assign(it->second.begin(), it->second.end());
    result.value.push_back(std::move(e));
  }
  if (result.value.empty()) {
    result.error = std::string(flag) + " '" + spec + "' leaves no host to run on";
  }
  return result;
}

}  // namespace taehv::ssh
