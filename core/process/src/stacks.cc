// Stack capture for the hang diagnosis. See stacks.h.
#include "stacks.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "taehv/process/run.h"

namespace taehv::process {
namespace {

/// Frames named in a hang summary.
constexpr std::size_t kSummaryFrames = 4;

/// The processes of process group `pgid`, the leader first (from /proc/<pid>/stat).
std::vector<int> groupMembers(int pgid) {
  std::vector<int> members{pgid};
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return members;
  while (dirent* entry = ::readdir(proc)) {
    const std::string name = entry->d_name;
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    std::ifstream stat("/proc/" + name + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto paren = text.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(text.substr(paren + 1));
    std::string state;
    int ppid = 0, group = 0;
    if (!(rest >> state >> ppid >> group) || group != pgid) continue;
    const int pid = std::stoi(name);
    if (pid != pgid) members.push_back(pid);
  }
  ::closedir(proc);
  return members;
}

/// The program of `pid` (/proc/<pid>/exe), or "".
std::string executableOf(int pid) {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec);
  return ec ? std::string() : exe.string();
}

/// argv[0] of `pid` as an absolute path (/proc/<pid>/cmdline, relative ones from its cwd), or "".
std::string argv0Of(int pid) {
  std::ifstream cmdline("/proc/" + std::to_string(pid) + "/cmdline");
  std::string argv0;
  if (!std::getline(cmdline, argv0, '\0') || argv0.find('/') == std::string::npos) return "";
  if (argv0[0] == '/') return argv0;
  std::error_code ec;
  const auto cwd = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/cwd", ec);
  return ec ? std::string() : (cwd / argv0).string();
}

/// py-spy for a Python interpreter: beside the python it was started as (a venv's bin/, whose python is a link),
/// beside the interpreter itself, else on PATH; "" when none.
std::string pySpyFor(int pid, const std::map<std::string, std::string>& env) {
  for (const std::string& python : {argv0Of(pid), executableOf(pid)}) {
    if (python.empty()) continue;
    const std::string beside = (std::filesystem::path(python).parent_path() / "py-spy").string();
    if (::access(beside.c_str(), X_OK) == 0) return beside;
  }
  return findProgram("py-spy", env);
}

/// The command that dumps `pid`'s threads: py-spy for a Python interpreter, else eu-stack, else gdb in batch mode;
/// empty when none is installed.
std::vector<std::string> dumpCommand(int pid, const std::map<std::string, std::string>& env) {
  const std::string p = std::to_string(pid);
  if (std::filesystem::path(executableOf(pid)).filename().string().rfind("python", 0) == 0) {
    if (const std::string py_spy = pySpyFor(pid, env); !py_spy.empty()) return {py_spy, "dump", "--pid", p};
  }
  if (const std::string eu = findProgram("eu-stack", env); !eu.empty()) return {eu, "-p", p};
  if (const std::string gdb = findProgram("gdb", env); !gdb.empty()) {
    return {gdb, "-batch", "-nx", "-p", p, "-ex", "thread apply all bt"};
  }
  return {};
}

std::string joined(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += (out.empty() ? "" : " ") + a;
  return out;
}

/// A frame line's function name: "#1  0x0000 name(args)" (eu-stack), "#1  0x0000 in name (args) at f" (gdb),
/// "    name (file.py:12)" (py-spy).
std::string frameName(const std::string& line) {
  std::istringstream words(line);
  std::string word, rest;
  while (words >> word) {
    if (word[0] == '#' || word.rfind("0x", 0) == 0 || word == "in") continue;
    std::getline(words, rest);
    rest = word + rest;
    break;
  }
  if (const auto space = rest.find(" ("); space != std::string::npos) return rest.substr(0, space);  // gdb, py-spy
  if (rest.empty() || rest.back() != ')') return rest;
  int depth = 0;  // eu-stack: drop the final balanced "(args)", keep "(anonymous namespace)" inside the name
  for (std::size_t i = rest.size(); i-- > 0;) {
    depth += rest[i] == ')' ? 1 : rest[i] == '(' ? -1 : 0;
    if (depth == 0) return rest.substr(0, i);
  }
  return rest;
}

}  // namespace

std::string topFrames(const std::string& dump, std::size_t count) {
  std::istringstream lines(dump);
  std::string line, out;
  bool in_thread = false;
  std::size_t taken = 0;
  while (taken < count && std::getline(lines, line)) {
    if (!in_thread) {
      in_thread = line.rfind("TID ", 0) == 0 || line.rfind("Thread ", 0) == 0;
      continue;
    }
    const bool frame = line.rfind("#", 0) == 0 || line.rfind("    ", 0) == 0;
    if (!frame) {
      if (taken > 0) break;  // the next thread
      continue;
    }
    const std::string name = frameName(line);
    if (name.empty()) continue;
    out += (out.empty() ? "" : " < ") + name;
    ++taken;
  }
  return out;
}

std::vector<RankStacks> captureStacks(const std::vector<StackTarget>& targets, std::chrono::milliseconds timeout) {
  std::vector<RunRequest> requests;
  std::vector<std::pair<std::size_t, std::string>> owners;  // target index, header
  std::vector<RankStacks> out(targets.size());
  for (std::size_t t = 0; t < targets.size(); ++t) {
    out[t].rank = targets[t].rank;
    for (int pid : groupMembers(targets[t].pid)) {
      std::vector<std::string> argv = dumpCommand(pid, targets[t].env);
      const std::string header = "# rank " + std::to_string(targets[t].rank) + " pid " + std::to_string(pid) + " (" +
                                 executableOf(pid) + "): ";
      if (argv.empty()) {
        out[t].text += header + "no stack tool found (install elfutils for eu-stack, or gdb; py-spy for Python)\n";
        continue;
      }
      RunRequest request;
      request.argv = argv;
      request.env = targets[t].env;
      requests.push_back(std::move(request));
      owners.emplace_back(t, header + joined(argv) + "\n");
    }
  }
  const std::vector<RunResult> results = runPrograms(requests, timeout);
  for (std::size_t i = 0; i < results.size(); ++i) {
    RankStacks& s = out[owners[i].first];
    const RunResult& r = results[i];
    s.text += owners[i].second + r.out + r.err;
    if (r.timed_out) s.text += "(the tool did not finish within the capture timeout)\n";
    if (!r.spawn_error.empty()) s.text += r.spawn_error + "\n";
    if (s.top_frames.empty()) s.top_frames = topFrames(r.out, kSummaryFrames);
    s.text += "\n";
  }
  return out;
}

}  // namespace taehv::process
