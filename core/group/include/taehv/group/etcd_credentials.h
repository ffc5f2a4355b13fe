// Where etcd's own user and password come from: the environment or a file, never the command line (ps shows it).
#pragma once

#include "taehv/checked.h"
#include "taehv/env.h"
#include "taehv/group/etcd_client.h"

namespace taehv::group {

inline constexpr const char* kEtcdUserEnv = "TAEHV_ETCD_USER";
inline constexpr const char* kEtcdPasswordEnv = "TAEHV_ETCD_PASSWORD";
/// A file whose first line is the password (mode 0600 advised), instead of kEtcdPasswordEnv.
inline constexpr const char* kEtcdPasswordFileEnv = "TAEHV_ETCD_PASSWORD_FILE";

/// The credentials in `env`: none when kEtcdUserEnv is unset; else the password from kEtcdPasswordEnv or the file
/// kEtcdPasswordFileEnv names (exactly one of them). Fails with one line: a user without a password, both given,
/// an unreadable or empty file.
Checked<EtcdCredentials> etcdCredentialsFromEnv(const Env& env);

}  // namespace taehv::group
