#include "taehv/group/etcd_tls.h"

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "etcd_tls_impl.h"
#include "taehv/files/input_file.h"

namespace taehv::group {
namespace {

namespace ssl = boost::asio::ssl;

/// An encrypted key would make OpenSSL ask for a passphrase on the terminal: a node that hangs. Refuse instead.
int noPassphrase(char*, int, int, void*) { return 0; }

/// Our ex_data slot on every SSL object (taken once, thread-safe as a static's initialisation is).
int factsIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

/// OpenSSL calls it on the client exactly when the member sent a CertificateRequest (its --client-cert-auth).
int noteCertificateRequest(SSL* connection, void*) {
  if (auto* facts = static_cast<EtcdTlsHandshakeFacts*>(SSL_get_ex_data(connection, factsIndex()))) {
    facts->client_cert_asked = true;
  }
  return 1;
}

/// A PEM file's text, wiped from memory when it goes (the key's is a secret).
struct PemText {
  std::string text;
  ~PemText() { OPENSSL_cleanse(text.data(), text.size()); }
};

Checked<void> readPem(const std::string& path, const char* variable, PemText& out) {
  Checked<std::string> text = files::readInputFile(path, variable, files::Role::kInput);
  if (!text.ok()) return {text.error};
  out.text = std::move(text.value);
  return {};
}

std::string subjectOf(X509* certificate) {
  BIO* bio = BIO_new(BIO_s_mem());
  X509_NAME_print_ex(bio, X509_get_subject_name(certificate), 0, XN_FLAG_ONELINE & ~ASN1_STRFLGS_ESC_MSB);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<std::size_t>(size));
  BIO_free(bio);
  return out;
}

Status loadCa(ssl::context& context, const std::string& path) {
  if (path.empty()) {
    boost::system::error_code ec;
    context.set_default_verify_paths(ec);
    if (ec) return {"cannot read the system's trust store (" + ec.message() + "); set " + kEtcdCaCertEnv};
    return {};
  }
  PemText pem;
  if (Status s = readPem(path, kEtcdCaCertEnv, pem); !s.ok()) return s;
  boost::system::error_code ec;
  context.add_certificate_authority(boost::asio::buffer(pem.text), ec);
  if (ec) {
    return {files::fileLabel(kEtcdCaCertEnv, path) + ": no PEM certificate in it (" + ec.message() +
            "); give the CA certificate that signed etcd's --cert-file (etcd's --trusted-ca-file, as a rule)"};
  }
  return {};
}

/// The client certificate (with its chain) and its key, checked to belong together; its subject in `subject`.
Status loadClientCertificate(ssl::context& context, const EtcdTlsSettings& s, std::string& subject) {
  PemText cert, key;
  if (Status r = readPem(s.cert_file, kEtcdCertEnv, cert); !r.ok()) return r;
  if (Status r = readPem(s.key_file, kEtcdKeyEnv, key); !r.ok()) return r;
  boost::system::error_code ec;
  context.use_certificate_chain(boost::asio::buffer(cert.text), ec);
  if (ec) {
    return {files::fileLabel(kEtcdCertEnv, s.cert_file) + ": not a PEM certificate (" + ec.message() +
            "); give this node's client certificate, issued by the CA etcd trusts (its --trusted-ca-file)"};
  }
  SSL_CTX* ctx = context.native_handle();
  X509* certificate = SSL_CTX_get0_certificate(ctx);
  subject = subjectOf(certificate);
  if (X509_cmp_current_time(X509_get0_notAfter(certificate)) < 0) {
    return {files::fileLabel(kEtcdCertEnv, s.cert_file) + ": the certificate (" + subject +
            ") has expired; issue a new one"};
  }
  if (key.text.find("ENCRYPTED") != std::string::npos) {
    return {files::fileLabel(kEtcdKeyEnv, s.key_file) + ": the key is encrypted (it needs a passphrase, which a "
            "launcher cannot type); give it unencrypted, readable by this user only: openssl pkey -in KEY -out "
            "KEY.plain && chmod 600 KEY.plain"};
  }
  BIO* bio = BIO_new_mem_buf(key.text.data(), static_cast<int>(key.text.size()));
  EVP_PKEY* pkey = PEM_read_bio_PrivateKey(bio, nullptr, noPassphrase, nullptr);
  BIO_free(bio);
  if (pkey == nullptr) {
    return {files::fileLabel(kEtcdKeyEnv, s.key_file) + ": not a PEM private key; give the key of " + kEtcdCertEnv +
            " " + s.cert_file};
  }
  const bool matches = SSL_CTX_use_PrivateKey(ctx, pkey) == 1 && SSL_CTX_check_private_key(ctx) == 1;
  EVP_PKEY_free(pkey);
  if (!matches) {
    return {files::fileLabel(kEtcdKeyEnv, s.key_file) + " is not the key of " + kEtcdCertEnv + " " + s.cert_file +
            " (" + subject + "); give the key that certificate was issued for"};
  }
  return {};
}

}  // namespace

void setHandshakeFacts(SSL* connection, EtcdTlsHandshakeFacts* facts) {
  SSL_set_ex_data(connection, factsIndex(), facts);
}

Checked<EtcdTlsSettings> etcdTlsSettingsFromEnv(const Env& env) {
  Checked<EtcdTlsSettings> out;
  const std::pair<const char*, std::string*> fields[] = {{kEtcdCaCertEnv, &out.value.ca_file},
                                                         {kEtcdCertEnv, &out.value.cert_file},
                                                         {kEtcdKeyEnv, &out.value.key_file}};
  for (const auto& [name, field] : fields) {
    const std::string* value = findEnv(env, name);
    if (value == nullptr) continue;
    if (value->empty()) return {std::string(name) + " is set but empty; give a PEM file's path or unset it"};
    *field = *value;
  }
  if (out.value.cert_file.empty() != out.value.key_file.empty()) {
    const bool cert = !out.value.cert_file.empty();
    return {std::string(cert ? kEtcdCertEnv : kEtcdKeyEnv) + " is set but " + (cert ? kEtcdKeyEnv : kEtcdCertEnv) +
            " is not; set both (the client certificate and its private key, PEM) or neither"};
  }
  return out;
}

EtcdTls::EtcdTls() : impl_(std::make_unique<Impl>()) {}
EtcdTls::~EtcdTls() = default;

Checked<std::shared_ptr<const EtcdTls>> EtcdTls::load(const EtcdTlsSettings& settings) {
  std::shared_ptr<EtcdTls> tls(new EtcdTls);
  tls->settings_ = settings;
  ssl::context& context = tls->impl_->context;
  SSL_CTX* ctx = context.native_handle();
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);  // etcd speaks 1.2 and 1.3
  SSL_CTX_set_default_passwd_cb(ctx, noPassphrase);
  SSL_CTX_set_cert_cb(ctx, noteCertificateRequest, nullptr);
  context.set_verify_mode(ssl::verify_peer);
  if (Status s = loadCa(context, settings.ca_file); !s.ok()) return {s.error};
  if (!settings.cert_file.empty()) {
    if (Status s = loadClientCertificate(context, settings, tls->client_subject_); !s.ok()) return {s.error};
  }
  return {"", std::move(tls)};
}

std::string EtcdTls::caText() const {
  return settings_.ca_file.empty() ? std::string("the system trust store (") + kEtcdCaCertEnv + " unset)"
                                   : "CA file " + settings_.ca_file + " (" + kEtcdCaCertEnv + ")";
}

Status useEtcdTls(const Env& env, std::vector<EtcdEndpoint>& endpoints) {
  Checked<EtcdTlsSettings> settings = etcdTlsSettingsFromEnv(env);
  if (!settings.ok()) return {settings.error};
  const bool https = !endpoints.empty() && endpoints.front().https;  // parseEtcdEndpoints: one scheme per list
  if (!https) {
    if (!settings.value.any()) return {};
    const char* given = !settings.value.ca_file.empty() ? kEtcdCaCertEnv : kEtcdCertEnv;
    return {std::string(given) + " is set but the etcd endpoints are http:// (no TLS): write https://HOST:PORT for "
            "every endpoint if etcd serves TLS (its --cert-file), or unset " + given};
  }
  Checked<std::shared_ptr<const EtcdTls>> tls = EtcdTls::load(settings.value);
  if (!tls.ok()) return {tls.error};
  for (EtcdEndpoint& e : endpoints) e.tls = tls.value;
  return {};
}

}  // namespace taehv::group
