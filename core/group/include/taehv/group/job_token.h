// The per-job secret the node group authenticates with (PROTOCOL.md, "Authentication"): where it comes from and
// the job key made from it.
#pragma once

#include <string>

#include "taehv/plugin_api.h"

namespace taehv::group {

/// The variable that carries the token (the SSH fan-out, the sbatch script and a Kubernetes Secret set it).
inline constexpr const char* kJobTokenEnv = "TAEHV_JOB_TOKEN";
/// Shortest token accepted (characters): a short one would be guessed.
inline constexpr std::size_t kMinTokenChars = 16;

/// Where the token came from. Decide on this, not on the description.
enum class TokenSource {
  kEnv,      ///< TAEHV_JOB_TOKEN
  kFile,     ///< --job-token-file
  kDerived,  ///< none given: derived from values every node of the job knows (weaker)
};

struct JobToken {
  TokenSource source = TokenSource::kDerived;
  std::string secret;       ///< the token itself (never logged, never printed)
  std::string description;  ///< for describe: where it came from and, for kDerived, why it is weaker
};

/// Facts of the job a derived token is made of.
struct JobFacts {
  std::string run_id;
  std::string master_addr;
  int master_port = 0;
  int nnodes = 0;
};

/// The token: `token_file` (first line) if given, else TAEHV_JOB_TOKEN of `env` when it is set (an empty value too),
/// else derived from `facts`. Fails with one line saying what is wrong (unreadable file, token shorter than
/// kMinTokenChars, an empty one included) and how to fix it.
Checked<JobToken> resolveJobToken(const Env& env, const std::string& token_file, const JobFacts& facts);

/// A new random token (64 hex characters, 32 bytes from OpenSSL's CSPRNG) for a job taehv-run starts.
std::string generateJobToken();

}  // namespace taehv::group
