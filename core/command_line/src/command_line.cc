// GCC 12 sees a null dereference in Boost's typed_value<std::vector<std::string>>::notify, instantiated here for
// repeatable options; it assigns through a pointer it has just checked. Off for this file only.
#pragma GCC diagnostic ignored "-Wnull-dereference"

#include "taehv/command_line.h"

#include <algorithm>
#include <iostream>
#include <sstream>

#include "taehv/suggest.h"

namespace taehv {
namespace po = boost::program_options;
namespace {

bool isHelp(const std::string& token) { return token == "--help" || token == "-h"; }

std::string usageLine(const std::string& backend, const CommandSpec& spec) {
  std::string line = "usage: taehv-run --backend " + backend + " " + spec.name;
  if (!spec.options.empty()) line += " [options]";
  if (spec.operands == Operands::kWords) {
    line += " [" + (spec.operands_name.empty() ? std::string("WORD...") : spec.operands_name) + "]";
  }
  if (spec.operands == Operands::kCommand) line += " [-- COMMAND...]";
  return line;
}

}  // namespace

int commandLineStyle() { return po::command_line_style::default_style & ~po::command_line_style::allow_guessing; }

void addOptionSpecs(po::options_description& desc, const std::vector<OptionSpec>& specs,
                    const std::string& help_suffix) {
  for (const OptionSpec& spec : specs) {
    const std::string names = spec.short_name ? spec.name + "," + spec.short_name : spec.name;
    const std::string help = spec.help + help_suffix;
    if (spec.value_name.empty()) {
      desc.add_options()(names.c_str(), help.c_str());
    } else if (spec.repeatable) {
      desc.add_options()(names.c_str(),
                         po::value<std::vector<std::string>>()->composing()->value_name(spec.value_name),
                         help.c_str());
    } else {
      desc.add_options()(names.c_str(), po::value<std::string>()->value_name(spec.value_name), help.c_str());
    }
  }
}

std::vector<std::string> optionTexts(const po::variable_value& value, bool is_switch) {
  if (is_switch) return {"true"};  // Boost stores an empty text for an untyped switch
  if (value.value().type() == typeid(std::vector<std::string>)) return value.as<std::vector<std::string>>();
  return {value.as<std::string>()};
}

std::string unknownOption(const std::string& typed, const po::options_description& desc) {
  std::vector<std::string> names;
  for (const auto& d : desc.options()) names.push_back("--" + d->long_name());
  return "unknown option '" + typed + "'" + didYouMean(typed.substr(0, typed.find('=')), names);
}

Checked<ParsedCommand> parseCommandArgs(const CommandSpec& spec, const std::vector<std::string>& args) {
  Checked<ParsedCommand> result;
  CommandArgs& parsed_args = result.value.args;
  const auto separator = std::find(args.begin(), args.end(), "--");
  const std::vector<std::string> tokens(args.begin(), separator);
  if (std::any_of(tokens.begin(), tokens.end(), isHelp)) {
    result.value.help = true;
    return result;
  }
  if (separator != args.end()) {
    if (spec.operands != Operands::kCommand) {
      result.error = "takes no command after --";
      return result;
    }
    parsed_args.command.assign(separator + 1, args.end());
    if (parsed_args.command.empty()) {
      result.error = "nothing after `--`: give the worker command or drop the `--`";
      return result;
    }
  }
  po::options_description desc;
  addOptionSpecs(desc, spec.options);
  desc.add_options()("help,h", "");  // handled above; here for the names an unknown option is compared with
  try {
    const po::parsed_options parsed = po::command_line_parser(tokens).options(desc).style(commandLineStyle()).run();
    for (const auto& option : parsed.options) {
      if (!option.string_key.empty()) continue;
      const std::string& word = option.value.front();
      if (spec.operands != Operands::kWords) {
        result.error = "unexpected argument '" + word + "'" +
                       (spec.operands == Operands::kCommand ? "; put the worker command after --"
                                                            : ": this command takes options only");
        return result;
      }
      parsed_args.words.push_back(word);
    }
    po::variables_map vm;
    po::store(parsed, vm);  // no notify(): nothing is required, nothing stored elsewhere
    for (const OptionSpec& option : spec.options) {
      if (!vm.count(option.name)) continue;
      parsed_args.options[option.name] = optionTexts(vm[option.name], option.value_name.empty());
    }
  } catch (const po::unknown_option& e) {
    result.error = unknownOption(e.get_option_name(), desc);
  } catch (const po::error& e) {
    result.error = e.what();
  }
  return result;
}

std::string commandHelp(const std::string& backend, const CommandSpec& spec) {
  std::ostringstream out;
  out << usageLine(backend, spec) << "\n\n" << spec.summary << ".\n\n";
  po::options_description desc(backend + " " + spec.name + " options");
  addOptionSpecs(desc, spec.options);
  desc.add_options()("help,h", "show this help");
  out << desc;
  if (!spec.help.empty()) out << "\n" << spec.help << (spec.help.back() == '\n' ? "" : "\n");
  return out.str();
}

int runBackendCommand(Backend& backend, const std::string& backend_name, const CommandSpec& spec,
                      const HostContext& host, const std::vector<std::string>& args) {
  const Checked<ParsedCommand> parsed = parseCommandArgs(spec, args);
  if (!parsed.ok()) {
    const std::string where = backend_name + " " + spec.name;
    if (host.log) {
      host.log(LogLevel::kError, where + ": " + parsed.error + "; see taehv-run --backend " + where + " --help");
    }
    return kUsageError;
  }
  if (parsed.value.help) {
    std::cout << commandHelp(backend_name, spec) << std::flush;
    return std::cout ? 0 : 1;
  }
  return backend.runCommand(host, spec.name, parsed.value.args);
}

}  // namespace taehv
