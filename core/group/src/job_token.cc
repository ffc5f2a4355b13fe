#include "taehv/group/job_token.h"

#include <sys/stat.h>

#include "taehv/env.h"
#include "taehv/files/input_file.h"
#include "taehv/group/session.h"

namespace taehv::group {
namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  std::size_t b = 0;
  while (b < s.size() && (s[b] == ' ' || s[b] == '\t')) ++b;
  return s.substr(b);
}

std::string tooShort(const std::string& where, std::size_t n) {
  return where + " holds a token of " + std::to_string(n) + " characters; use at least " +
         std::to_string(kMinTokenChars) + " random characters (e.g. `openssl rand -hex 32`)";
}

}  // namespace

Checked<JobToken> resolveJobToken(const Env& env, const std::string& token_file, const JobFacts& facts) {
  Checked<JobToken> result;
  JobToken& token = result.value;
  if (!token_file.empty()) {
    const Checked<std::string> text = files::readInputFile(token_file, "--job-token-file", files::Role::kInput);
    if (!text.ok()) return {text.error};
    const std::string line = trim(text.value.substr(0, text.value.find('\n')));
    if (line.size() < kMinTokenChars) return {tooShort("--job-token-file " + token_file, line.size())};
    token.source = TokenSource::kFile;
    token.secret = line;
    token.description = "--job-token-file " + token_file;
    struct stat st {};
    if (::stat(token_file.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
      token.description += " (warning: readable by group/others; chmod 600 it)";
    }
    return result;
  }
  // Set but empty is a token of 0 characters, refused like a short one: falling back to the derived key would let
  // anyone who sees the job's command line join it, while the user meant to give a secret.
  if (const std::string* given = findEnv(env, kJobTokenEnv)) {
    const std::string secret = trim(*given);
    if (secret.size() < kMinTokenChars) return {tooShort(std::string("env ") + kJobTokenEnv, secret.size())};
    token.source = TokenSource::kEnv;
    token.secret = secret;
    token.description = std::string("env ") + kJobTokenEnv;
    return result;
  }
  token.source = TokenSource::kDerived;
  token.secret = "derived|" + facts.run_id + "|" + facts.master_addr + "|" + std::to_string(facts.master_port) + "|" +
                 std::to_string(facts.nnodes);
  token.description = std::string("none given: derived from the run id, master address/port and node count, which "
                                  "anyone who sees the job's command line knows (keeps jobs apart, does not keep "
                                  "strangers out); set ") +
                      kJobTokenEnv + " or --job-token-file";
  return result;
}

std::string generateJobToken() {
  static const char* kHex = "0123456789abcdef";
  const std::string bytes = randomBytes(32);
  std::string out;
  out.reserve(64);
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

}  // namespace taehv::group
