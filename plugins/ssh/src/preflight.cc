#include "taehv/ssh/preflight.h"

#include <cctype>
#include <sstream>

#include "taehv/ssh/fanout.h"
#include "taehv/shell_quote.h"

namespace taehv::ssh {
namespace {

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    out.push_back(line);
  }
  return out;
}

std::string lastNonEmptyLine(const std::string& text) {
  const auto all = lines(text);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (it->find_first_not_of(" \t") != std::string::npos) return *it;
  }
  return {};
}

/// First whitespace-separated token that looks like a version (digit '.' digit ...).
std::string versionToken(const std::string& text) {
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    if (word.size() >= 3 && std::isdigit(static_cast<unsigned char>(word[0])) &&
        word.find('.') != std::string::npos) {
      return word;
    }
  }
  return {};
}

}  // namespace

std::string preflightScript(const std::string& remote_bin, const std::string& cwd) {
  const std::string bin = shellQuote(remote_bin);
  const std::string dir = shellQuote(cwd);
  std::ostringstream s;
  s << "echo 'taehv-preflight: begin'\n"
    << "if [ -f " << bin << " ] && [ -x " << bin << " ]; then\n"
    << "  v=$(" << bin << " --version 2>&1 </dev/null | head -n 1)\n"
    << "  echo \"taehv-preflight: version $v\"\n"
    << "else echo 'taehv-preflight: missing'; fi\n"
    << "if [ -d " << dir << " ]; then echo 'taehv-preflight: cwd ok'; else echo 'taehv-preflight: cwd missing'; fi\n"
    << "echo \"taehv-preflight: addr $(hostname -I 2>/dev/null)\"\n";
  return s.str();
}

HostCheck interpretPreflight(const std::string& host, const Captured& answer, const PreflightRequest& request) {
  HostCheck check;
  check.host = host;
  const auto seconds = std::to_string((request.timeout.count() + 999) / 1000);
  if (!answer.spawn_error.empty()) {
    check.error = "cannot run ssh: " + answer.spawn_error;
    return check;
  }
  if (answer.not_started) {
    check.error = "not checked: the preflight's " + seconds + " s were over before its turn (" +
                  std::to_string(request.max_parallel) +
                  " hosts are checked at once; raise --preflight-timeout or --ssh-parallel)";
    return check;
  }
  if (answer.timed_out) {
    check.error = "no answer within " + seconds +
                  " s (host down or unreachable? raise --preflight-timeout for slow links)";
    return check;
  }
  bool begun = false;
  std::string version_line;
  bool missing = false;
  bool cwd_ok = false;
  bool cwd_seen = false;
  const std::string tag = kPreflightTag;
  for (const auto& line : lines(answer.out)) {
    if (line.rfind(tag, 0) != 0) continue;
    const std::string rest = line.substr(tag.size() + (line.size() > tag.size() ? 1 : 0));
    if (rest == "begin") {
      begun = true;
    } else if (rest == "missing") {
      missing = true;
    } else if (rest.rfind("version", 0) == 0) {
      version_line = rest.size() > 8 ? rest.substr(8) : std::string();
    } else if (rest == "cwd ok" || rest == "cwd missing") {
      cwd_seen = true;
      cwd_ok = rest == "cwd ok";
    } else if (rest.rfind("addr", 0) == 0) {
      std::istringstream words(rest.substr(4));
      std::string a;
      while (words >> a) check.addresses.push_back(a);
    }
  }
  if (answer.exit_code == 255 || !begun) {
    // 255 is ssh's own failure (resolve, connect, authenticate); its reason is the last stderr line.
    std::string why = lastNonEmptyLine(answer.err);
    if (why.empty()) {
      why = answer.signal ? "ssh died of signal " + std::to_string(answer.signal)
                          : "ssh exited with " + std::to_string(answer.exit_code) + " and said nothing";
    }
    check.error = "cannot log in over ssh: " + why;
    return check;
  }
  if (missing) {
    check.error = "taehv-run not found at " + request.remote_bin + " (install it there or pass --remote-bin PATH)";
    return check;
  }
  const std::string remote_version = versionToken(version_line);
  if (remote_version.empty()) {
    check.error = request.remote_bin + " --version did not print a version (it said: '" + version_line + "')";
    return check;
  }
  if (remote_version != request.version) {
    check.error = "taehv-run at " + request.remote_bin + " is version " + remote_version + ", this one is " +
                  request.version + " (install the same version on every host)";
    return check;
  }
  if (!cwd_seen || !cwd_ok) {
    check.error = "working directory " + request.cwd + " does not exist there (create it or pass --remote-cwd DIR)";
    return check;
  }
  return check;
}

PreflightReport runPreflight(CommandRunner& runner, const std::map<std::string, std::string>& env,
                             const PreflightRequest& request) {
  std::vector<std::vector<std::string>> argvs;
  // ConnectTimeout below the deadline, so an unreachable host reports ssh's reason rather than a bare timeout.
  const long long connect_s = std::max<long long>(1, request.timeout.count() / 1000 - 1);
  std::vector<std::string> opts = request.ssh_opts;
  opts.push_back("-o");
  opts.push_back("ConnectTimeout=" + std::to_string(connect_s));
  const std::string command = remoteCommand(preflightScript(request.remote_bin, request.cwd));
  for (std::size_t i = 0; i < request.hosts.size(); ++i) {
    std::vector<std::string> host_opts = opts;
    if (i < request.host_opts.size()) {
      host_opts.insert(host_opts.end(), request.host_opts[i].begin(), request.host_opts[i].end());
    }
    argvs.push_back(sshArgv(request.ssh, host_opts, request.hosts[i], command));
  }
  const auto answers = runner.runAll(argvs, env, request.timeout, request.max_parallel);
  PreflightReport report;
  for (std::size_t i = 0; i < request.hosts.size(); ++i) {
    report.hosts.push_back(interpretPreflight(request.hosts[i], answers[i], request));
  }
  return report;
}

}  // namespace taehv::ssh
