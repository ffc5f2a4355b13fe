// taehv-train's one option layer: every sub-command declares its options here and parses its arguments through
// it (Boost.Program_options underneath), so that one set of rules holds for all of them:
//   --name=value and --name value (a value is not empty and not one of the command's options); a flag takes no
//   value;
//   an option given twice is refused unless it is declared repeatable (--set), whose values keep their order;
//   an unknown option names the known ones close to it (taehv/suggest.h), and nothing when none is close;
//   every argument is an option (no positional arguments; prefixes of names are not guessed);
//   --help or -h anywhere prints the sub-command's usage on stdout and exits 0.
// No libtorch here: the layer and its tests build in seconds.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace taehv::cli {

/// Bad command line or bad input: printed as one message (then the usage), exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Args;

/// The options of one sub-command.
class Options {
 public:
  /// --name VALUE (once).
  Options& value(const std::string& name);
  /// --name VALUE, as often as given; Args::values keeps the order.
  Options& repeatable(const std::string& name);
  /// --name, no value.
  Options& flag(const std::string& name);

  /// `args` (the arguments after the sub-command's name) by the rules above. Throws UsageError: "unknown option
  /// '--x' (did you mean '--y'?)", "--x given twice", "--x needs a value", "--x takes no value", "unexpected
  /// argument 'x' (options start with --)".
  Args parse(const std::vector<std::string>& args) const;

  /// Every declared name, with its dashes ("--weights"), help included.
  std::vector<std::string> names() const;

 private:
  std::vector<std::string> values_, repeatable_, flags_;
};

/// The options a command line gave.
class Args {
 public:
  bool flag(const std::string& name) const { return flags_.count(name) > 0; }
  bool has(const std::string& name) const { return values_.count(name) > 0; }

  /// The value of --name; UsageError "missing required option --name" when it is absent or empty.
  std::string required(const std::string& name) const;
  /// The value of --name, or `fallback`.
  std::string get(const std::string& name, const std::string& fallback) const;
  /// Every value of a repeatable --name, in command-line order (empty when absent).
  std::vector<std::string> values(const std::string& name) const;
  /// --name as a whole number in [min, max], or `fallback` when absent; UsageError "--name must be an integer in
  /// [min, max], got 'text'" otherwise.
  int64_t integer(const std::string& name, int64_t fallback, int64_t min, int64_t max) const;

 private:
  friend class Options;
  std::map<std::string, std::vector<std::string>> values_;
  std::set<std::string> flags_;
};

/// True when `args` holds --help or -h: help wins over any other mistake on the line.
bool wantsHelp(const std::vector<std::string>& args);

/// The boundary every sub-command shares: with --help or -h among `args`, prints `usage` on stdout and gives 0
/// without running `body`; else gives what `body` returns, except that a UsageError it throws is one message (the
/// logger's, taehv/log.h) followed by `usage` on stderr, status 2. Other exceptions pass through to the command's
/// own boundary.
int runCommand(const std::string& usage, const std::vector<std::string>& args, const std::function<int()>& body);

/// One entry of a program's sub-command table.
struct SubCommand {
  std::string name;
  std::function<int(const std::vector<std::string>& args)> run;  ///< the arguments after the name; exit status
  std::string summary;  ///< one line for the program's usage
};

/// A program made of sub-commands (ninja's tool table, git's commands).
struct Program {
  std::string name;                  ///< "taehv-train"
  std::vector<SubCommand> commands;  ///< in the order the usage lists them
  std::string default_command;       ///< run when the first argument is an option, or there is none
  std::string footer;                ///< the usage's last lines
  std::function<std::string()> version;  ///< --version's text
};

/// Runs the sub-command `args` names: `--help`, `-h` or `help` first prints the program's usage (status 0);
/// `--version` alone prints program.version(); no sub-command (nothing, or an option first) runs the default one
/// with every argument; an unknown name is one message naming the close sub-commands, the usage on stderr and
/// status 2. Messages from then on name the program and the sub-command ("taehv-train eval: ..."; the default
/// sub-command's are the program's).
int dispatch(const Program& program, const std::vector<std::string>& args);

}  // namespace taehv::cli
