#include "error_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "signal_name.h"
#include "taehv/files/input_file.h"
#include "taehv/utf8.h"

namespace taehv::process {

std::string errorFileJson(const SupervisorResult& result, std::time_t now) {
  using nlohmann::json;
  json extra;
  extra["timestamp"] = std::to_string(static_cast<long long>(now));
  std::string message;
  int code = result.exit_code;
  if (result.interrupt_signal != 0) {
    message = "SignalException: Process " + std::to_string(::getpid()) + " got signal: " +
              std::to_string(result.interrupt_signal);
    extra["py_callstack"] = "";
  } else if (result.first_failure) {
    const ChildExit& f = *result.first_failure;
    message = "ChildFailedError: rank " + std::to_string(f.rank) + " (" + f.label + ") on host " +
              (f.host.empty() ? std::string("localhost") : f.host) + " " +
              (f.signal != 0 ? "died by signal " + signalName(f.signal) : "exited with code " + std::to_string(f.exit_code));
    std::string tail;
    for (const std::string& line : f.stderr_tail) tail += line + "\n";
    extra["py_callstack"] = tail;
    extra["rank"] = f.rank;
    extra["label"] = f.label;
    extra["host"] = f.host;
    if (f.signal != 0) extra["signal"] = signalName(f.signal);
  } else {
    message = "ChildFailedError: exit code " + std::to_string(code);
    extra["py_callstack"] = "";
  }
  json doc;
  doc["message"]["message"] = message;
  doc["message"]["extraInfo"] = extra;
  doc["message"]["errorCode"] = code;
  // A worker's stderr is anybody's bytes (a Latin-1 file name, a binary's output): replaced, and said in the file.
  Utf8Repair repair;
  std::string text = dumpValidUtf8(doc, -1, &repair);
  if (!repair.any()) return text;
  doc["message"]["extraInfo"]["utf8_note"] = repair.sentence("this error file");
  return dumpValidUtf8(doc);
}

std::string childErrorFileJson(const std::string& path, std::time_t not_before, int error_code) {
  if (path.empty()) return "";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0 || st.st_mtime < not_before) {
    return "";
  }
  // The child's file, not the user's: bounded, and not an input (it may be the very file written next).
  const Checked<std::string> text =
      files::readInputFile(path, "the worker's TORCHELASTIC_ERROR_FILE", files::Role::kOther);
  if (!text.ok()) return "";
  nlohmann::json doc = nlohmann::json::parse(text.value, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("message")) return "";
  if (doc["message"].is_object() && error_code != 0) doc["message"]["errorCode"] = error_code;
  return dumpValidUtf8(doc);  // parse() took UTF-8 only; the one way out all the same
}

}  // namespace taehv::process
