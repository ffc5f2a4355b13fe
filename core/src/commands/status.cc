// taehv-run status FILE: the job status file a running taehv-run keeps (<log-dir>/status.json; progress.h) as a
// table, one row per rank.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "commands/commands.h"
#include "taehv/files/input_file.h"
#include "taehv/process/progress.h"

namespace taehv {
namespace {

/// `value` seconds with one decimal.
std::string seconds(const nlohmann::json& value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", value.get<double>());
  return buf;
}

/// `text` padded to `width` columns.
std::string column(std::string text, std::size_t width) {
  if (text.size() < width) text.resize(width, ' ');
  return text + " ";
}

/// The table of a status document; throws nlohmann's errors on a missing or mistyped key.
std::string statusTable(const nlohmann::json& doc) {
  std::string out = "generation " + std::to_string(doc.at("generation").get<int>()) + ", hang timeout " +
                    seconds(doc.at("hang_timeout_s")) + " s";
  const nlohmann::json& hang = doc.at("last_hang");
  if (!hang.is_null()) out += ", last hang: " + hang.get<std::string>();
  out += "\n" + column("RANK", 5) + column("PID", 8) + column("STEP", 8) + column("SECTION", 17) +
         column("STEP_S", 7) + column("SILENT_S", 9) + "BOUND_S\n";
  for (const nlohmann::json& r : doc.at("ranks")) {
    const bool reported = r.at("reported").get<bool>();
    const double bound = r.at("bound_s").get<double>();
    out += column(std::to_string(r.at("rank").get<int>()), 5) + column(std::to_string(r.at("pid").get<int>()), 8) +
           column(reported ? std::to_string(r.at("step").get<std::int64_t>()) : "-", 8) +
           column(reported ? r.at("section").get<std::string>() : "(no report)", 17) +
           column(seconds(r.at("last_step_s")), 7) + column(seconds(r.at("silent_s")), 9) +
           (bound > 0 ? seconds(r.at("bound_s")) : std::string("-")) + "\n";
  }
  return out;
}

}  // namespace

int runStatus(Cli& cli) {
  const std::vector<std::string>& args = cli.args();
  if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << "usage: taehv-run status FILE\n\nprint the job status file of a running taehv-run (FILE: "
                 "<log-dir>/status.json, as describe shows) as a table: each rank's step, section, last step time, "
                 "seconds since its last progress report and its hang bound.\n";
    return 0;
  }
  if (args.size() != 1 || args[0].empty() || args[0][0] == '-') {
    cli.log(LogLevel::kError, "status takes one argument, the status file: taehv-run status <log-dir>/status.json");
    return kUsageError;
  }
  const Checked<std::string> text = files::readInputFile(args[0], "status file", files::Role::kInput);
  if (!text.ok()) {
    cli.log(LogLevel::kError, text.error);
    return kUsageError;
  }
  try {
    const nlohmann::json doc = nlohmann::json::parse(text.value);
    if (doc.at("format").get<int>() != process::kStatusFormat) {
      cli.log(LogLevel::kError, "status file " + args[0] + ": format " + doc.at("format").dump() + ", this taehv-run "
                                "reads format " + std::to_string(process::kStatusFormat));
      return kUsageError;
    }
    std::cout << statusTable(doc);
  } catch (const nlohmann::json::exception& e) {
    cli.log(LogLevel::kError, "status file " + args[0] + " is not a taehv-run status file: " + e.what());
    return kUsageError;
  }
  return 0;
}

}  // namespace taehv
