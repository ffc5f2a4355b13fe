// Splits a byte stream into whole lines, for the output relay.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace taehv::process {

/// Accumulates bytes read from one child stream and hands out whole lines (without the '\n').
/// A line longer than max_line bytes is handed out in pieces of max_line bytes, so one child that never
/// writes a newline cannot make the supervisor's memory grow without bound. Not thread-safe.
class LineBuffer {
 public:
  /// Default cap on one line: 1 MiB.
  static constexpr std::size_t kDefaultMaxLine = std::size_t{1} << 20;

  explicit LineBuffer(std::size_t max_line = kDefaultMaxLine) : max_line_(max_line) {}

  /// Appends data and calls on_line(std::string_view) once per complete line, in order.
  template <typename OnLine>
  void feed(std::string_view data, OnLine&& on_line) {
    while (!data.empty()) {
      const std::size_t nl = data.find('\n');
      const std::size_t take = nl == std::string_view::npos ? data.size() : nl;
      std::string_view piece = data.substr(0, take);
      // Respect the cap even inside one read.
      while (pending_.size() + piece.size() > max_line_) {
        const std::size_t room = max_line_ - pending_.size();
        pending_.append(piece.substr(0, room));
        on_line(std::string_view(pending_));
        pending_.clear();
        piece.remove_prefix(room);
      }
      if (nl == std::string_view::npos) {
        pending_.append(piece);
        return;
      }
      if (pending_.empty()) {
        on_line(piece);  // common case: no copy
      } else {
        pending_.append(piece);
        on_line(std::string_view(pending_));
        pending_.clear();
      }
      data.remove_prefix(take + 1);
    }
  }

  /// Hands out the unterminated last line, if any (end of stream).
  template <typename OnLine>
  void flush(OnLine&& on_line) {
    if (!pending_.empty()) {
      on_line(std::string_view(pending_));
      pending_.clear();
    }
  }

 private:
  std::size_t max_line_;
  std::string pending_;
};

}  // namespace taehv::process
