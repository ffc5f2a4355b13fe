#include "taehv/log.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <memory>
#include <mutex>

#include "taehv/env.h"
#include "taehv/parse.h"

namespace taehv::log {
namespace {

struct Loggers {
  std::shared_ptr<spdlog::logger> messages;  ///< stderr, the pattern; spdlog's default logger
  std::shared_ptr<spdlog::logger> out;       ///< stdout, as is
  std::shared_ptr<spdlog::logger> err;       ///< stderr, as is
  bool verbose = false;
};

std::mutex g_mutex;
Loggers g_loggers;  // guarded by g_mutex; each logger is thread-safe (_mt sinks) once taken out

/// A logger on one of the standard streams writing each text exactly as given: no prefix, no newline added.
std::shared_ptr<spdlog::logger> plainLogger(const char* name, spdlog::sink_ptr sink) {
  sink->set_formatter(std::make_unique<spdlog::pattern_formatter>("%v", spdlog::pattern_time_type::local, ""));
  auto logger = std::make_shared<spdlog::logger>(name, std::move(sink));
  logger->set_level(spdlog::level::trace);
  return logger;
}

/// Installs the loggers for `program` at `place` (the caller holds g_mutex).
void install(const std::string& program, const Place& place) {
  std::string pattern = prefix(program, place);
  std::string escaped;
  for (char c : pattern) escaped += c == '%' ? std::string("%%") : std::string(1, c);
  auto messages = std::make_shared<spdlog::logger>(program, std::make_shared<spdlog::sinks::stderr_sink_mt>());
  messages->set_pattern(escaped + "%l: %v");
  messages->set_level(g_loggers.verbose ? spdlog::level::debug : spdlog::level::info);
  spdlog::set_default_logger(messages);
  g_loggers.messages = std::move(messages);
  if (!g_loggers.out) g_loggers.out = plainLogger("stdout", std::make_shared<spdlog::sinks::stdout_sink_mt>());
  if (!g_loggers.err) g_loggers.err = plainLogger("stderr", std::make_shared<spdlog::sinks::stderr_sink_mt>());
}

Loggers loggers() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_loggers.messages) install(program_invocation_short_name, Place::fromEnvironment(processEnvironment()));
  return g_loggers;
}

spdlog::level::level_enum spdlogLevel(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return spdlog::level::debug;
    case LogLevel::kInfo: return spdlog::level::info;
    case LogLevel::kWarn: return spdlog::level::warn;
    case LogLevel::kError: break;
  }
  return spdlog::level::err;
}

}  // namespace

Place Place::fromEnvironment(const Env& env) {
  const auto read = [&](const char* name) -> std::optional<int> {
    const std::string* value = findEnv(env, name);
    return value == nullptr ? std::nullopt : parseCount<int>(*value);
  };
  return Place{read("GROUP_RANK"), read("RANK"), read("LOCAL_RANK")};
}

std::string prefix(const std::string& program, const Place& place) {
  std::string where;
  const auto add = [&](const char* what, const std::optional<int>& value) {
    if (value) where += (where.empty() ? "" : " ") + std::string(what) + " " + std::to_string(*value);
  };
  add("node", place.node);
  add("rank", place.rank);
  add("local", place.local_rank);
  return (where.empty() ? "" : "[" + where + "] ") + program + ": ";
}

std::string format(const char* format, ...) {
  std::va_list args;
  va_start(args, format);
  std::va_list again;
  va_copy(again, args);
  const int size = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string out(size > 0 ? static_cast<std::size_t>(size) : 0, '\0');
  if (size > 0) std::vsnprintf(out.data(), out.size() + 1, format, again);
  va_end(again);
  return out;
}

void setup(const std::string& program, const Place& place) {
  std::lock_guard<std::mutex> lock(g_mutex);
  install(program, place);
}

void setVerbose(bool on) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_loggers.verbose = on;
  if (g_loggers.messages) g_loggers.messages->set_level(on ? spdlog::level::debug : spdlog::level::info);
}

void write(LogLevel level, const std::string& message) {
  loggers().messages->log(spdlog::source_loc{}, spdlogLevel(level), spdlog::string_view_t(message));
}

void print(Stream stream, const std::string& text) {
  const Loggers l = loggers();
  (stream == Stream::kStdout ? l.out : l.err)->log(spdlog::source_loc{}, spdlog::level::info,
                                                   spdlog::string_view_t(text));
}

}  // namespace taehv::log
