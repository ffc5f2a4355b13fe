// The host's one option layer for what backends declare (taehv/plugin_api.h: OptionSpec, CommandSpec), on
// Boost.Program_options with the rules of taehv-run's own options: `--name=value` and `--name value`, a second
// occurrence refused unless the option is repeatable, no abbreviations, an unknown name answered with
// core/suggest's close names only, and `--help`/`-h` printed from the declaration. Nothing here crosses the plugin
// boundary: a backend gets the parsed values (OptionValues, CommandArgs).
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <vector>

#include "taehv/checked.h"
#include "taehv/plugin_api.h"

namespace taehv {

/// Exit code for usage, configuration and plugin errors.
inline constexpr int kUsageError = 2;

/// The parser style of every taehv-run command line: Boost's default without guessing (an abbreviation of a long
/// name is an unknown option, never a silent match).
int commandLineStyle();

/// Adds `specs` to `desc`: a switch for an empty value_name, one text value, or a list of them for a repeatable
/// option; `help_suffix` follows each help text (e.g. " [ssh]").
void addOptionSpecs(boost::program_options::options_description& desc, const std::vector<OptionSpec>& specs,
                    const std::string& help_suffix = "");

/// The values of one option stored by a parser of addOptionSpecs' options: its texts, or {"true"} for a switch
/// (`is_switch`: its OptionSpec has no value_name).
std::vector<std::string> optionTexts(const boost::program_options::variable_value& value, bool is_switch);

/// "unknown option 'TYPED'" and, when some of `desc`'s long names are close to it, " (did you mean '--x'?)".
std::string unknownOption(const std::string& typed, const boost::program_options::options_description& desc);

/// What parsing a sub-command's arguments gave.
struct ParsedCommand {
  CommandArgs args;
  bool help = false;  ///< --help or -h was among the options: print commandHelp() instead of running the command
};

/// Parses `args`, everything after a backend sub-command's name (`--` and the command included), by `spec`.
/// The error is one line without the command's name, e.g. "unknown option '--nodez' (did you mean '--nodes'?)".
Checked<ParsedCommand> parseCommandArgs(const CommandSpec& spec, const std::vector<std::string>& args);

/// The `--help` text of `spec`, a sub-command of backend `backend`: usage line, summary, options, spec.help.
std::string commandHelp(const std::string& backend, const CommandSpec& spec);

/// Runs backend sub-command `spec` as taehv-run does: parses `args` (as parseCommandArgs); on --help prints
/// commandHelp() to stdout and returns 0; on an error logs "BACKEND COMMAND: ERROR; see taehv-run --backend
/// BACKEND COMMAND --help" through host.log and returns kUsageError; else returns backend.runCommand()'s code.
int runBackendCommand(Backend& backend, const std::string& backend_name, const CommandSpec& spec,
                      const HostContext& host, const std::vector<std::string>& args);

}  // namespace taehv
