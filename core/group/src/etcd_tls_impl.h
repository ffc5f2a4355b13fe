// What etcd_tls.cc and etcd_client.cc share of TLS to etcd: the OpenSSL context behind EtcdTls, and what one
// connection learns during its handshake.
#pragma once

#include <boost/asio/ssl/context.hpp>

#include "taehv/group/etcd_tls.h"

namespace taehv::group {

struct EtcdTls::Impl {
  /// mutable: Asio wants a non-const context to create a connection from; its settings never change after load.
  mutable boost::asio::ssl::context context{boost::asio::ssl::context::tls_client};
};

/// One TLS connection's facts, hung on its SSL object for the context's callbacks to fill (setHandshakeFacts).
struct EtcdTlsHandshakeFacts {
  bool client_cert_asked = false;  ///< the member sent a CertificateRequest (it runs with --client-cert-auth)
};

/// Hangs `facts` on `connection` for the callbacks (in an ex_data slot of ours: Asio keeps its verify callback in
/// the app data slot and deletes what it finds there).
void setHandshakeFacts(SSL* connection, EtcdTlsHandshakeFacts* facts);

}  // namespace taehv::group
