// Numbers, durations and network endpoints from text (flags, environment variables, hostfiles, job specs, configs): the one set of
// parsers for taehv-run, taehv-train and the plugins, in-tree and out-of-tree (installed beside taehv/plugin_api.h; std only,
// header-only, nothing of it crosses the plugin ABI).
//
// Strict on purpose: the whole text is the number. No spaces, no trailing text, no overflow; a value outside
// [min, max] is no value. Callers turn nullopt into a message that names the variable or flag and its text;
// parseHostPort, which can be wrong in several ways, says which itself.
#pragma once

#include <cctype>
#include <charconv>
#include <chrono>
#include <climits>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "taehv/checked.h"

namespace taehv {

/// Decimal digits only (no sign, no spaces), with a value in [min, max]; nullopt otherwise. min and max must
/// be >= 0. For counts, ranks, slots: "12" -> 12; "", "+1", "-1", "1x", " 1" -> nullopt.
template <typename T = int>
std::optional<T> parseCount(std::string_view text, T min = 0, T max = std::numeric_limits<T>::max()) {
  static_assert(std::is_integral_v<T>, "parseCount parses integers");
  if (text.empty()) return std::nullopt;
  T value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const T digit = static_cast<T>(c - '0');
    if (value > max / 10 || (value == max / 10 && digit > max % 10)) return std::nullopt;  // above max
    value = static_cast<T>(value * 10 + digit);
  }
  if (value < min) return std::nullopt;
  return value;
}

/// Hexadecimal digits only (0-9, a-f, A-F; no "0x", no sign, no spaces), with a value in [0, max]; nullopt
/// otherwise. For the kernel's tables (/proc/net/route prints addresses as "0100A8C0"): "FF" -> 255.
template <typename T = unsigned long>
std::optional<T> parseHex(std::string_view text, T max = std::numeric_limits<T>::max()) {
  static_assert(std::is_integral_v<T> && std::is_unsigned_v<T>, "parseHex parses unsigned integers");
  if (text.empty()) return std::nullopt;
  T value = 0;
  for (char c : text) {
    T digit = 0;
    if (c >= '0' && c <= '9') {
      digit = static_cast<T>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = static_cast<T>(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      digit = static_cast<T>(c - 'A' + 10);
    } else {
      return std::nullopt;
    }
    if (value > (max - digit) / 16) return std::nullopt;  // above max
    value = static_cast<T>(value * 16 + digit);
  }
  return value;
}

/// A TCP port: digits, 1..65535.
inline std::optional<int> parsePort(std::string_view text) { return parseCount<int>(text, 1, 65535); }

/// Whole seconds: digits, with a value in [min, max] seconds.
inline std::optional<std::chrono::seconds> parseSeconds(std::string_view text, long long min = 1,
                                                        long long max = std::numeric_limits<int>::max()) {
  const std::optional<long long> value = parseCount<long long>(text, min, max);
  if (!value) return std::nullopt;
  return std::chrono::seconds(*value);
}

/// torchrun's --nnodes: "N" (a fixed size, MIN = MAX = N) or "MIN:MAX" (elastic: the job runs on any number of
/// nodes from MIN to MAX), each in 1..max and MIN <= MAX. nullopt when the text is not one of those forms.
inline std::optional<std::pair<int, int>> parseNodeRange(std::string_view text, int max = INT_MAX) {
  const std::size_t colon = text.find(':');
  if (colon == std::string_view::npos) {
    const auto n = parseCount<int>(text, 1, max);
    if (!n) return std::nullopt;
    return std::pair<int, int>{*n, *n};
  }
  const auto lo = parseCount<int>(text.substr(0, colon), 1, max);
  const auto hi = parseCount<int>(text.substr(colon + 1), 1, max);
  if (!lo || !hi || *lo > *hi) return std::nullopt;
  return std::pair<int, int>{*lo, *hi};
}

/// Per-node counts in SLURM's compressed form, runs of equal counts as N(xK): {2, 2, 2, 1} -> "2(x3),1". How every
/// message and `describe` writes a list of per-node process counts (SLURM_STEP_TASKS_PER_NODE reads the same way).
inline std::string formatCounts(const std::vector<int>& counts) {
  std::string out;
  for (std::size_t i = 0; i < counts.size();) {
    std::size_t j = i;
    while (j < counts.size() && counts[j] == counts[i]) ++j;
    if (!out.empty()) out.push_back(',');
    out += std::to_string(counts[i]);
    if (j - i > 1) out += "(x" + std::to_string(j - i) + ")";
    i = j;
  }
  return out;
}

// ---- Signed integers and real numbers ----

/// An optional '+' or '-', then decimal digits, with a value in [min, max] of the signed type T; nullopt otherwise.
/// parseInteger<int64_t>("-3") -> -3; "", "1.0", "1e3", " 1", "9223372036854775808" -> nullopt.
template <typename T = long long>
std::optional<T> parseInteger(std::string_view text, T min = std::numeric_limits<T>::min(),
                              T max = std::numeric_limits<T>::max()) {
  static_assert(std::is_integral_v<T> && std::is_signed_v<T>, "parseInteger parses signed integers");
  using Magnitude = std::make_unsigned_t<T>;
  const bool negative = !text.empty() && text.front() == '-';
  if (!text.empty() && (text.front() == '-' || text.front() == '+')) text.remove_prefix(1);
  const Magnitude largest = static_cast<Magnitude>(std::numeric_limits<T>::max());
  const std::optional<Magnitude> magnitude = parseCount<Magnitude>(text, 0, negative ? largest + 1 : largest);
  if (!magnitude) return std::nullopt;
  // -(m - 1) - 1 rather than -m: the magnitude of the lowest value does not fit in T.
  const T value = !negative || *magnitude == 0 ? static_cast<T>(*magnitude)
                                               : static_cast<T>(-static_cast<T>(*magnitude - 1) - 1);
  if (value < min || value > max) return std::nullopt;
  return value;
}

/// parseInteger for an int: "12" -> 12, "-3" -> -3; "", "1x", " 1", "99999999999" -> nullopt.
inline std::optional<int> parseInt(std::string_view text, int min = INT_MIN, int max = INT_MAX) {
  return parseInteger<int>(text, min, max);
}

/// A finite decimal number, the whole text: an optional sign, digits with an optional '.', an optional exponent
/// ("0.5", "-3", "+2", ".5", "1e-4", "3E+2"), with a value in [min, max]; nullopt otherwise ("", " 1", "1x", "inf",
/// "nan", "0x10", "1e999"). Locale-independent.
inline std::optional<double> parseNumber(std::string_view text, double min = std::numeric_limits<double>::lowest(),
                                         double max = std::numeric_limits<double>::max()) {
  // std::from_chars takes no '+' and reads "inf" and "nan": allow the one, refuse the others by their letters.
  const bool plus = !text.empty() && text.front() == '+';
  if (plus) text.remove_prefix(1);
  if (text.empty() || !(std::isdigit(static_cast<unsigned char>(text.front())) || text.front() == '.' ||
                        (text.front() == '-' && !plus))) {
    return std::nullopt;
  }
  for (char c : text) {
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E')) {
      return std::nullopt;
    }
  }
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) return std::nullopt;
  if (value < min || value > max) return std::nullopt;
  return value;
}

// ---- Network endpoints ----

/// A network endpoint as the rendezvous flags write it: "HOST[:PORT]", an IPv6 address in brackets ("[ADDR]:PORT").
struct HostPort {
  std::string host;         ///< a name or an address; an IPv6 address without its brackets
  std::optional<int> port;  ///< nullopt: the text names none (the caller's default applies)
};

/// `text` as HOST[:PORT] (torchrun's parse_rendezvous_endpoint, an etcd client URL without its scheme), the port,
/// when given, digits in [min_port, 65535]. The one HOST:PORT splitter of taehv-run (--rdzv-endpoint, each entry of
/// an etcd endpoint list). A failure is one line: `what` and the text, what is wrong (no host; an IPv6 address
/// without brackets; no ']'; text after ']' that is not ':PORT'; an empty port; a port that is not a number or out
/// of range; a URL's scheme or path), then how to write it, with `example` ("e.g. 10.0.0.1:2379").
inline Checked<HostPort> parseHostPort(std::string_view text, const std::string& what, const std::string& example,
                                       int min_port = 1) {
  const std::string given = what + " '" + std::string(text) + "'";
  const std::string form = "; give HOST:PORT (an IPv6 address as [ADDR]:PORT), e.g. " + example;
  HostPort out;
  std::string_view port;
  bool port_given = false;
  if (text.find("://") != std::string_view::npos) return {given + ": a URL; give no scheme" + form};
  if (!text.empty() && text.front() == '[') {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos) return {given + ": no ']' after the IPv6 address" + form};
    out.host = std::string(text.substr(1, close - 1));
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') return {given + ": expected ':PORT' after ']'" + form};
      port = text.substr(close + 2);
      port_given = true;
    }
  } else {
    const std::size_t colon = text.find(':');
    if (colon != std::string_view::npos && text.find(':', colon + 1) != std::string_view::npos) {
      return {given + ": an IPv6 address needs brackets" + form};
    }
    out.host = std::string(text.substr(0, colon));
    if (colon != std::string_view::npos) {
      port = text.substr(colon + 1);
      port_given = true;
    }
  }
  if (out.host.empty()) return {given + ": no host name" + form};
  if (out.host.find_first_of(" \t/?#@[]") != std::string::npos) {
    return {given + ": '" + out.host + "' is not a host name or address" + form};
  }
  if (port_given) {
    const std::string range = std::to_string(min_port) + "..65535";
    if (port.empty()) return {given + ": empty port after ':'" + form};
    if (port.find_first_not_of("0123456789") != std::string_view::npos) {
      return {given + ": the port '" + std::string(port) + "' is not a number " + range + form};
    }
    out.port = parseCount<int>(port, min_port, 65535);
    if (!out.port) return {given + ": port " + std::string(port) + " is not " + range + form};
  }
  return {"", out};
}

}  // namespace taehv
