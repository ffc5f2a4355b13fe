#include "taehv/group/etcd_credentials.h"

#include "taehv/files/input_file.h"

namespace taehv::group {

Checked<EtcdCredentials> etcdCredentialsFromEnv(const Env& env) {
  Checked<EtcdCredentials> out;
  const std::string* user = findEnv(env, kEtcdUserEnv);
  const std::string* password = findEnv(env, kEtcdPasswordEnv);
  const std::string* file = findEnv(env, kEtcdPasswordFileEnv);
  if (user == nullptr || user->empty()) {
    if (password != nullptr || file != nullptr) {
      return {std::string(password ? kEtcdPasswordEnv : kEtcdPasswordFileEnv) + " is set but " + kEtcdUserEnv +
              " is not; set both (etcd's user and its password) or neither"};
    }
    return out;
  }
  out.value.user = *user;
  if (password != nullptr && file != nullptr) {
    return {std::string("both ") + kEtcdPasswordEnv + " and " + kEtcdPasswordFileEnv + " are set; keep one"};
  }
  if (password != nullptr) {
    out.value.password = *password;
  } else if (file != nullptr) {
    const Checked<std::string> text = files::readInputFile(*file, kEtcdPasswordFileEnv, files::Role::kInput);
    if (!text.ok()) return {text.error};
    out.value.password = text.value.substr(0, text.value.find('\n'));
  }
  if (out.value.password.empty()) {
    return {std::string(kEtcdUserEnv) + " '" + *user + "' has no password: set " + kEtcdPasswordEnv + " or " +
            kEtcdPasswordFileEnv + " (a file holding it)"};
  }
  return out;
}

}  // namespace taehv::group
