// TLS to etcd (https:// endpoints): the member's certificate verified against a CA and against the host name or
// address the endpoint names, and, for etcd's --client-cert-auth, this node's client certificate. The settings come
// from the environment (etcdctl's names after TAEHV_ETCD_), never from flags: a key's path is not a secret, but the
// settings travel with the password's (etcd_credentials.h). No "insecure" mode: an https endpoint is verified or not
// spoken to.
//
// Contract: load() reads and checks every file before any connection (a missing or unreadable file, a certificate
// without its key, a key that does not belong to the certificate: one line naming the variable and the fix). The
// loaded EtcdTls is immutable and shared by every connection of every client (OpenSSL's SSL_CTX is safe to share
// once configured), so one load serves the node group's thread and doctor alike.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "taehv/checked.h"
#include "taehv/env.h"
#include "taehv/group/etcd_client.h"

namespace taehv::group {

/// The CA bundle (PEM) that signed etcd's --cert-file (etcdctl --cacert); unset: the system's trust store.
inline constexpr const char* kEtcdCaCertEnv = "TAEHV_ETCD_CACERT";
/// This node's client certificate (PEM, etcdctl --cert), for etcd's --client-cert-auth; needs kEtcdKeyEnv.
inline constexpr const char* kEtcdCertEnv = "TAEHV_ETCD_CERT";
/// The client certificate's private key (PEM, unencrypted, etcdctl --key); needs kEtcdCertEnv.
inline constexpr const char* kEtcdKeyEnv = "TAEHV_ETCD_KEY";

/// Where TLS to etcd takes its files from (paths as given; "" where unset).
struct EtcdTlsSettings {
  std::string ca_file;    ///< "": the system's trust store (OpenSSL's default paths)
  std::string cert_file;  ///< "": no client certificate; set exactly when key_file is
  std::string key_file;
  /// Any of the three given.
  bool any() const { return !ca_file.empty() || !cert_file.empty() || !key_file.empty(); }
};

/// The settings in `env`. Fails with one line: a certificate without its key or a key without its certificate,
/// a variable set to "". Reads no file (load() does).
Checked<EtcdTlsSettings> etcdTlsSettingsFromEnv(const Env& env);

class EtcdTls {
 public:
  /// Reads and checks the files `settings` names: the CA bundle holds certificates, the client certificate and key
  /// are PEM, the key is not encrypted (no prompt can hang a node) and belongs to the certificate. One line on
  /// failure, naming the variable and the fix.
  static Checked<std::shared_ptr<const EtcdTls>> load(const EtcdTlsSettings& settings);
  ~EtcdTls();
  EtcdTls(const EtcdTls&) = delete;
  EtcdTls& operator=(const EtcdTls&) = delete;

  const EtcdTlsSettings& settings() const { return settings_; }
  /// What the member's certificate is verified against: "CA file PATH (TAEHV_ETCD_CACERT)" or "the system trust
  /// store (TAEHV_ETCD_CACERT unset)".
  std::string caText() const;
  /// The client certificate's subject as OpenSSL prints it ("CN = taehv-node"); "" without one.
  const std::string& clientSubject() const { return client_subject_; }

  struct Impl;  ///< the OpenSSL context (src/etcd_tls_impl.h, for the client's connections)
  const Impl& impl() const { return *impl_; }

 private:
  EtcdTls();
  EtcdTlsSettings settings_;
  std::string client_subject_;
  std::unique_ptr<Impl> impl_;
};

/// TLS for `endpoints` as the environment sets it: https:// endpoints get the settings loaded once (load() above);
/// http:// ones with any TLS variable set are one line (the variable would silently do nothing). Nothing is read
/// and nothing fails for http:// endpoints without TLS variables.
Status useEtcdTls(const Env& env, std::vector<EtcdEndpoint>& endpoints);

}  // namespace taehv::group
