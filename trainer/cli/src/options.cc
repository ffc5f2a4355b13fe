#include "taehv/cli/options.h"

#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdlib>

#include "taehv/env.h"
#include "taehv/log.h"
#include "taehv/parse.h"
#include "taehv/suggest.h"

namespace taehv::cli {
namespace po = boost::program_options;
namespace {

/// "--name" for a long name Boost reports with or without its dashes (and without an "=value"); "-x" as it is.
std::string dashed(std::string name) {
  name = name.substr(0, name.find('='));
  if (name.size() == 2 && name[0] == '-' && name[1] != '-') return name;
  const std::size_t start = name.find_first_not_of('-');
  return start == std::string::npos ? name : "--" + name.substr(start);
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

Options& Options::value(const std::string& name) {
  values_.push_back(name);
  return *this;
}

Options& Options::repeatable(const std::string& name) {
  repeatable_.push_back(name);
  return *this;
}

Options& Options::flag(const std::string& name) {
  flags_.push_back(name);
  return *this;
}

std::vector<std::string> Options::names() const {
  std::vector<std::string> out;
  for (const auto* list : {&values_, &repeatable_, &flags_}) {
    for (const auto& name : *list) out.push_back("--" + name);
  }
  out.push_back("--help");
  return out;
}

Args Options::parse(const std::vector<std::string>& args) const {
  po::options_description desc;
  // Every value is taken as text (a command converts it, with its own message); a repeated one is found below.
  for (const auto& name : values_) desc.add_options()(name.c_str(), po::value<std::string>());
  for (const auto& name : repeatable_) desc.add_options()(name.c_str(), po::value<std::string>());
  for (const auto& name : flags_) desc.add_options()(name.c_str(), "");
  desc.add_options()("help,h", "");
  po::parsed_options parsed(&desc);
  try {
    // Boost's unix style without guessing: --stop is not --stop-at-step.
    const int style = po::command_line_style::unix_style & ~po::command_line_style::allow_guessing;
    parsed = po::command_line_parser(args).options(desc).style(style).run();
  } catch (const po::unknown_option& e) {
    const std::string name = dashed(e.get_option_name());
    throw UsageError("unknown option '" + name + "'" + didYouMean(name, names()));
  } catch (const po::invalid_command_line_syntax& e) {
    const std::string name = dashed(e.get_option_name());
    if (e.kind() == po::invalid_command_line_syntax::missing_parameter ||
        e.kind() == po::invalid_command_line_syntax::empty_adjacent_parameter) {
      throw UsageError(name + " needs a value");
    }
    if (e.kind() == po::invalid_command_line_syntax::extra_parameter) throw UsageError(name + " takes no value");
    throw UsageError(std::string(e.what()));
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()));
  }
  Args out;
  for (const po::option& option : parsed.options) {
    if (option.position_key >= 0 || option.string_key.empty()) {
      const std::string token = option.original_tokens.empty() ? std::string() : option.original_tokens.front();
      throw UsageError("unexpected argument '" + token + "' (options start with --)");
    }
    const std::string& name = option.string_key;
    if (contains(flags_, name) || name == "help") {
      if (!out.flags_.insert(name).second) throw UsageError("--" + name + " given twice");
      continue;
    }
    const std::string value = option.value.empty() ? std::string() : option.value.front();
    // "--output --streaming": the next option is no value (Boost takes it as one when it is spelt with dashes).
    if (value.rfind("--", 0) == 0 && contains(names(), dashed(value))) throw UsageError("--" + name + " needs a value");
    auto& values = out.values_[name];
    if (!values.empty() && !contains(repeatable_, name)) throw UsageError("--" + name + " given twice");
    values.push_back(value);
  }
  return out;
}

std::string Args::required(const std::string& name) const {
  const auto it = values_.find(name);
  if (it == values_.end() || it->second.front().empty()) throw UsageError("missing required option --" + name);
  return it->second.front();
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  const auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second.front();
}

std::vector<std::string> Args::values(const std::string& name) const {
  const auto it = values_.find(name);
  return it == values_.end() ? std::vector<std::string>() : it->second;
}

int64_t Args::integer(const std::string& name, int64_t fallback, int64_t min, int64_t max) const {
  const auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  const std::string& text = it->second.front();
  const std::optional<int64_t> value = parseInteger<int64_t>(text, min, max);
  if (!value) {
    throw UsageError("--" + name + " must be an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
                     "], got '" + text + "'");
  }
  return *value;
}

bool wantsHelp(const std::vector<std::string>& args) {
  return std::any_of(args.begin(), args.end(), [](const std::string& a) { return a == "--help" || a == "-h"; });
}

int runCommand(const std::string& usage, const std::vector<std::string>& args, const std::function<int()>& body) {
  if (wantsHelp(args)) {
    log::print(log::Stream::kStdout, usage);
    return 0;
  }
  try {
    return body();
  } catch (const UsageError& e) {
    log::error(e.what());
    log::print(log::Stream::kStderr, usage);
    return 2;
  }
}

namespace {

std::string programUsage(const Program& program) {
  std::string out = "usage: " + program.name + " [SUB-COMMAND] [ARGS...]\n";
  for (const auto& c : program.commands) {
    out += "  " + c.name + std::string(c.name.size() < 9 ? 9 - c.name.size() : 0, ' ') + " " + c.summary + "\n";
  }
  return out + program.footer;
}

}  // namespace

int dispatch(const Program& program, const std::vector<std::string>& args) {
  const log::Place place = log::Place::fromEnvironment(processEnvironment());
  log::setup(program.name, place);
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h" || args[0] == "help")) {
    log::print(log::Stream::kStdout, programUsage(program));
    return 0;
  }
  if (args.size() == 1 && args[0] == "--version" && program.version) {
    log::print(log::Stream::kStdout, program.version());
    return 0;
  }
  const bool named = !args.empty() && args[0].rfind('-', 0) != 0;
  const std::string name = named ? args[0] : program.default_command;
  const std::vector<std::string> rest(args.begin() + (named ? 1 : 0), args.end());
  std::vector<std::string> names;
  for (const auto& c : program.commands) {
    names.push_back(c.name);
    if (c.name != name) continue;
    if (name != program.default_command) log::setup(program.name + " " + name, place);
    return c.run(rest);
  }
  log::error("unknown sub-command '" + name + "'" + didYouMean(name, names));
  log::print(log::Stream::kStderr, programUsage(program));
  return 2;
}

}  // namespace taehv::cli
