#include "taehv/group/etcd_client.h"

#include "taehv/group/etcd_tls.h"
#include "taehv/parse.h"

#include <openssl/evp.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <nlohmann/json.hpp>
#include <mutex>
#include <type_traits>

#include "etcd_tls_impl.h"

namespace taehv::group {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using Json = nlohmann::json;
using asio::ip::tcp;

/// A 64-bit field, signed (revisions, leases) or unsigned (member and leader IDs): etcd's gateway writes them as
/// strings ("123"), numbers are accepted too. 0 when absent or not a number of that type.
template <typename T>
T jsonNumber(const Json& j, const char* name) {
  static_assert(std::is_same_v<T, std::int64_t> || std::is_same_v<T, std::uint64_t>, "etcd's 64-bit fields");
  const auto it = j.find(name);
  if (it == j.end()) return 0;
  if (std::is_signed_v<T> ? it->is_number_integer() : it->is_number_unsigned()) return it->get<T>();
  if (!it->is_string()) return 0;
  if constexpr (std::is_signed_v<T>) return parseInteger<T>(it->get<std::string>()).value_or(0);
  else return parseCount<T>(it->get<std::string>()).value_or(0);
}
std::int64_t jsonInt(const Json& j, const char* name) { return jsonNumber<std::int64_t>(j, name); }
std::uint64_t jsonUint(const Json& j, const char* name) { return jsonNumber<std::uint64_t>(j, name); }

Checked<Json> parseAnswer(const std::string& body, const std::string& what) {
  Json j = Json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return {"etcd " + what + ": the answer is not JSON (not an etcd v3 gateway?)"};
  if (j.contains("error") || (j.contains("code") && j.contains("message"))) {
    const Json& m = j.contains("message") ? j["message"] : j["error"];
    return {"etcd " + what + ": " + (m.is_string() ? m.get<std::string>() : m.dump())};
  }
  return {"", std::move(j)};
}

EtcdKeyValue toKeyValue(const Json& kv) {
  EtcdKeyValue out;
  out.key = base64Decode(kv.value("key", "")).value_or("");
  out.value = base64Decode(kv.value("value", "")).value_or("");
  out.create_revision = jsonInt(kv, "create_revision");
  out.mod_revision = jsonInt(kv, "mod_revision");
  out.lease = jsonInt(kv, "lease");
  return out;
}

/// Fills `s` from a /v3/maintenance/status answer (or `s.error` from why there is none); false when there is none.
bool readMemberStatus(const Checked<std::string>& body, EtcdMemberStatus& s) {
  Checked<Json> j = body.ok() ? parseAnswer(body.value, "status") : Checked<Json>{body.error};
  if (!j.ok()) {
    s.error = j.error;
    return false;
  }
  s.version = j.value.value("version", "");
  if (j.value.contains("header") && j.value["header"].is_object()) s.member_id = jsonUint(j.value["header"], "member_id");
  // The leader's member ID; absent or 0 while the member knows none (etcd then lists "etcdserver: no leader").
  s.leader = jsonUint(j.value, "leader");
  if (j.value.contains("errors") && j.value["errors"].is_array()) {
    for (const Json& e : j.value["errors"]) {
      s.note += (s.note.empty() ? "" : "; ") + (e.is_string() ? e.get<std::string>() : e.dump());
    }
  }
  return true;
}

using TlsStream = beast::ssl_stream<beast::tcp_stream>;

/// The TCP stream under a plain or a TLS stream (its deadline bounds the TLS layer's reads and writes too).
beast::tcp_stream& tcpOf(beast::tcp_stream& stream) { return stream; }
beast::tcp_stream& tcpOf(TlsStream& stream) { return stream.next_layer(); }

/// The steps of one exchange, in order.
enum class Step { kConnect, kHandshake, kSend, kRead };

/// How messages name a step (indexed by Step).
constexpr const char* kStepText[] = {"connect", "TLS handshake", "send", "read the answer"};
const char* stepText(Step step) { return kStepText[static_cast<int>(step)]; }

/// What one HTTP exchange came to.
struct Exchange {
  bool done = false;           ///< the answer was read
  bool finished = false;       ///< done, or failed: nothing more will happen
  bool opened = false;         ///< the answer's header was read
  beast::error_code failure;   ///< why not, at `step`
  Step step = Step::kConnect;
  std::string local_address;   ///< this end's address once connected
  http::response<http::string_body> response;
};

/// Reads a streamed answer (chunked, one JSON object a line) into `lines`, `idle` at most between reads; an answer
/// that is not chunked (an error) lands in the parser's body.
template <class Stream>
class LineReader {
 public:
  LineReader(Stream& stream, Exchange& x, const std::function<bool(const std::string&)>& on_line,
             std::chrono::milliseconds idle)
      : stream_(stream), x_(x), on_line_(on_line), idle_(idle) {
    parser_.body_limit(boost::none);
    // The parser keeps a reference to the callback: a member, living as long as it.
    on_chunk_ = [this](std::uint64_t, beast::string_view body, beast::error_code&) -> std::size_t {
      pending_.append(body.data(), body.size());
      for (std::size_t nl; !enough_ && (nl = pending_.find('\n')) != std::string::npos;) {
        const std::string line = pending_.substr(0, nl);
        pending_.erase(0, nl + 1);
        if (!line.empty() && !on_line_(line)) enough_ = true;
      }
      return body.size();
    };
    parser_.on_chunk_body(on_chunk_);
  }
  void start() {
    http::async_read_header(stream_, buffer_, parser_, [this](beast::error_code ec, std::size_t) {
      if (ec) return fail(ec);
      x_.opened = true;
      more();
    });
  }
  /// The body of an answer that was not streamed ("" for a stream).
  std::string body() { return parser_.get().body(); }
  http::status status() { return parser_.get().result(); }

 private:
  void more() {
    if (enough_ || parser_.is_done()) {
      x_.done = x_.finished = true;
      return;
    }
    tcpOf(stream_).expires_after(idle_);
    http::async_read_some(stream_, buffer_, parser_, [this](beast::error_code ec, std::size_t) {
      if (ec) return fail(ec);
      more();
    });
  }
  void fail(beast::error_code ec) {
    x_.failure = ec;
    x_.finished = true;
  }
  Stream& stream_;
  Exchange& x_;
  const std::function<bool(const std::string&)>& on_line_;
  std::chrono::milliseconds idle_;
  beast::flat_buffer buffer_;
  std::function<std::size_t(std::uint64_t, beast::string_view, beast::error_code&)> on_chunk_;
  http::response_parser<http::string_body> parser_;
  std::string pending_;
  bool enough_ = false;
};

/// Connects to the first of `targets` that takes it, shakes hands (TLS), sends `request` and reads the answer: all
/// within `timeout`, or (`lines`) streamed line by line until it ends, `lines->on_line` has enough, or
/// `lines->stop` is set.
template <class Stream>
void runExchange(asio::io_context& io, Stream& stream, const std::vector<tcp::endpoint>& targets,
                 http::request<http::string_body>& request, std::chrono::steady_clock::time_point deadline,
                 std::chrono::milliseconds timeout, Exchange& x, const std::function<bool(const std::string&)>* on_line,
                 const std::atomic<bool>* stop, std::chrono::milliseconds idle) {
  beast::flat_buffer buffer;
  std::optional<LineReader<Stream>> reader;
  if (on_line) reader.emplace(stream, x, *on_line, idle);
  auto on_read = [&](beast::error_code ec, std::size_t) {
    x.failure = ec;
    x.done = !ec;
    x.finished = true;
  };
  auto on_write = [&](beast::error_code ec, std::size_t) {
    if (ec) {
      x.failure = ec;
      return;
    }
    x.step = Step::kRead;
    if (reader) reader->start();
    else http::async_read(stream, buffer, x.response, on_read);
  };
  auto send = [&] {
    x.step = Step::kSend;
    http::async_write(stream, request, on_write);
  };
  auto on_connect = [&](beast::error_code ec, const tcp::endpoint&) {
    if (ec) {
      x.failure = ec;
      return;
    }
    beast::error_code ignored;
    x.local_address = tcpOf(stream).socket().local_endpoint(ignored).address().to_string();
    if constexpr (std::is_same_v<Stream, TlsStream>) {
      x.step = Step::kHandshake;
      stream.async_handshake(asio::ssl::stream_base::client, [&](beast::error_code hec) {
        if (hec) {
          x.failure = hec;
          return;
        }
        send();
      });
    } else {
      send();
    }
  };
  tcpOf(stream).expires_at(deadline);
  tcpOf(stream).async_connect(targets, on_connect);
  if (!reader) {
    io.run_for(timeout + std::chrono::milliseconds(100));
    return;
  }
  // A stream runs as long as etcd sends; `stop` is looked at between slices. Whatever is pending when it returns
  // is dropped with the stream and the io_context, unrun.
  while (!x.finished && !io.stopped() && !(stop && stop->load())) io.run_for(kEtcdStopCheck);
  if (x.done && !reader->body().empty()) {
    // Not streamed (an error answer with a length): its lines, as a stream's.
    std::string body = reader->body();
    for (std::size_t at = 0; at < body.size();) {
      const std::size_t nl = std::min(body.find('\n', at), body.size());
      if (nl > at && !(*on_line)(body.substr(at, nl - at))) break;
      at = nl + 1;
    }
  }
  if (x.done) x.response.result(reader->status());
}

/// Verification of the member's certificate against the endpoint's host: its address (an IP SAN) or its name (a
/// DNS SAN, also sent as SNI). false when OpenSSL refused the name.
bool expectPeer(SSL* connection, const std::string& host) {
  beast::error_code ec;
  asio::ip::make_address(host, ec);
  if (!ec) return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(connection), host.c_str()) == 1;
  return SSL_set_tlsext_host_name(connection, host.c_str()) == 1 && SSL_set1_host(connection, host.c_str()) == 1;
}

/// A TLS failure in the user's terms: what happened and what to do.
struct TlsFailure {
  std::string error;
  std::string fix;
};

/// The TLS alert a member sent (OpenSSL reports it as reason SSL_AD_REASON_OFFSET + the alert's number); -1: none.
int alertOf(const beast::error_code& ec) {
  if (ec.category() != asio::error::get_ssl_category()) return -1;
  const int reason = ERR_GET_REASON(static_cast<unsigned long>(ec.value()));
  return reason > SSL_AD_REASON_OFFSET && reason < SSL_AD_REASON_OFFSET + 256 ? reason - SSL_AD_REASON_OFFSET : -1;
}

bool isSslReason(const beast::error_code& ec, int reason) {
  return ec.category() == asio::error::get_ssl_category() &&
         ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == reason;
}

/// Why a TLS exchange with `e` failed; nullopt when the failure is not TLS's (refused, reset, timed out).
std::optional<TlsFailure> tlsFailure(const EtcdEndpoint& e, const Exchange& x, const EtcdTlsHandshakeFacts& facts,
                                     long verify_result) {
  const std::string at = "etcd endpoint " + e.text();
  const EtcdTls& tls = *e.tls;
  if (verify_result != X509_V_OK) {
    const std::string reason = X509_verify_cert_error_string(verify_result);
    if (verify_result == X509_V_ERR_HOSTNAME_MISMATCH || verify_result == X509_V_ERR_IP_ADDRESS_MISMATCH) {
      return TlsFailure{at + ": TLS: the member's certificate does not name " + e.host + " (" + reason + ")",
                        "give the endpoint as an address or name the certificate lists, or reissue etcd's "
                        "certificate with subjectAltName IP:" + e.host + " (DNS:NAME for a name)"};
    }
    return TlsFailure{at + ": TLS: certificate verify failed (" + reason + ") against " + tls.caText(),
                      std::string("set ") + kEtcdCaCertEnv + " on every node to the CA certificate that signed "
                      "etcd's --cert-file"};
  }
  const int alert = alertOf(x.failure);
  const bool cert_given = !tls.settings().cert_file.empty();
  constexpr int kCertificateRequired = 116;  // TLS 1.3's alert for a missing client certificate
  if (!cert_given && (facts.client_cert_asked || alert == kCertificateRequired)) {
    return TlsFailure{at + " requires a client certificate (etcd's --client-cert-auth) and this node gives none (" +
                          x.failure.message() + ")",
                      std::string("set ") + kEtcdCertEnv + " and " + kEtcdKeyEnv + " on every node: a certificate "
                      "issued by the CA of etcd's --trusted-ca-file (extendedKeyUsage clientAuth) and its key"};
  }
  const bool closed = x.failure == asio::ssl::error::stream_truncated || x.failure == asio::error::eof ||
                      x.failure == asio::error::connection_reset ||
                      isSslReason(x.failure, SSL_R_UNEXPECTED_EOF_WHILE_READING);
  // TLS 1.3: the member checks the certificate after this side's handshake is done, and may just drop the
  // connection then (etcd 3.4 resets it) instead of sending an alert.
  const bool after_handshake = x.step == Step::kSend || x.step == Step::kRead;
  if (cert_given && (alert > 0 || (facts.client_cert_asked && after_handshake && closed))) {
    return TlsFailure{at + " refused this node's client certificate " + kEtcdCertEnv + " " +
                          tls.settings().cert_file + " (" + tls.clientSubject() + "): " + x.failure.message(),
                      "give a client certificate issued by the CA etcd trusts (its --trusted-ca-file), not expired, "
                      "with extendedKeyUsage clientAuth"};
  }
  const bool plain_answer = isSslReason(x.failure, SSL_R_WRONG_VERSION_NUMBER) ||
                            isSslReason(x.failure, SSL_R_PACKET_LENGTH_TOO_LONG) ||
                            isSslReason(x.failure, SSL_R_HTTP_REQUEST);
  if (x.step == Step::kHandshake && (closed || plain_answer)) {
    return TlsFailure{at + (closed ? " closed the connection during the TLS handshake ("
                                   : " answered the TLS handshake in plain text (") + x.failure.message() + ")",
                      "a member that serves plain http does this: write http://" + e.host + ":" +
                          std::to_string(e.port) + " (every endpoint, and unset " + kEtcdCaCertEnv + ", " +
                          kEtcdCertEnv + ", " + kEtcdKeyEnv + "), or start etcd with --cert-file, --key-file and "
                          "https:// client URLs"};
  }
  if (x.failure.category() == asio::error::get_ssl_category() ||
      x.failure.category() == asio::ssl::error::get_stream_category()) {
    return TlsFailure{at + ": TLS: " + stepText(x.step) + ": " + x.failure.message(), ""};
  }
  return std::nullopt;
}

/// The endpoint list as a key: its entries' texts, comma-separated (credentials and TLS settings left out).
std::string listKey(const std::vector<EtcdEndpoint>& endpoints) {
  std::string key;
  for (const EtcdEndpoint& e : endpoints) key += (key.empty() ? "" : ",") + e.text();
  return key;
}

/// Which endpoint of each list answered last, for the whole process: each formation makes a fresh group and so a
/// fresh client, and a client that started at the list's first entry again would wait out the call timeout there
/// first whenever that member is gone (node 0's member, cut off with node 0). Guarded by answeredMutex().
std::map<std::string, std::size_t>& answeredLast() {
  static std::map<std::string, std::size_t> answered;
  return answered;
}
std::mutex& answeredMutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace

std::string etcdPrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(prefix.back());
    if (c < 0xff) {
      ++c;
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

std::string base64Encode(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::optional<std::string> base64Decode(const std::string& text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out(3 * text.size() / 4 + 1, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  if (n < 0) return std::nullopt;
  // EVP_DecodeBlock counts the padding's zero bytes too.
  std::size_t size = static_cast<std::size_t>(n);
  for (std::size_t i = text.size(); i > 0 && text[i - 1] == '=' && size > 0; --i) --size;
  out.resize(size);
  return out;
}

Checked<std::vector<EtcdEndpoint>> parseEtcdEndpoints(const std::string& list) {
  Checked<std::vector<EtcdEndpoint>> out;
  if (list.empty()) return {"--rdzv-endpoint is empty; give HOST:PORT[,HOST:PORT...] of the etcd cluster"};
  std::size_t start = 0;
  for (int n = 1; start <= list.size(); ++n) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    std::string entry = list.substr(start, comma - start);
    start = comma + 1;
    const std::string given = entry;
    if (entry.empty()) {
      return {"--rdzv-endpoint '" + list + "': entry " + std::to_string(n) + " is empty (a stray comma?); give "
              "HOST:PORT[,HOST:PORT...]"};
    }
    const bool https = entry.rfind("https://", 0) == 0;
    if (https) {
      entry = entry.substr(8);
    } else if (entry.rfind("http://", 0) == 0) {
      entry = entry.substr(7);
    }
    if (!out.value.empty() && out.value.front().https != https) {
      return {"--rdzv-endpoint '" + list + "' mixes https:// with http:// or bare entries ('" + given + "'); the "
              "members of one etcd cluster serve one scheme: write https:// before every entry (etcd serves TLS) "
              "or before none"};
    }
    if (!entry.empty() && entry.back() == '/') entry.pop_back();
    const Checked<HostPort> split = parseHostPort(entry, "--rdzv-endpoint entry", "10.0.0.1:2379");
    if (!split.ok()) return {split.error};
    EtcdEndpoint e(split.value.host, split.value.port.value_or(kDefaultEtcdPort));
    e.https = https;
    out.value.push_back(std::move(e));
    if (comma == list.size()) break;
  }
  return out;
}

EtcdClient::EtcdClient(std::vector<EtcdEndpoint> endpoints, std::chrono::milliseconds timeout)
    : endpoints_(std::move(endpoints)), timeout_(timeout), list_key_(listKey(endpoints_)) {
  std::lock_guard<std::mutex> lock(answeredMutex());
  const auto it = answeredLast().find(list_key_);
  if (it != answeredLast().end() && it->second < endpoints_.size()) preferred_ = it->second;
}

void EtcdClient::answeredBy(std::size_t at) {
  preferred_ = at;
  std::lock_guard<std::mutex> lock(answeredMutex());
  answeredLast()[list_key_] = at;
}

Checked<std::string> EtcdClient::authenticate(const EtcdEndpoint& endpoint) {
  const Json request = {{"name", endpoint.credentials.user}, {"password", endpoint.credentials.password}};
  Checked<std::string> body = exchange(endpoint, "/v3/auth/authenticate", request.dump(), "");
  if (!body.ok()) return body;
  Checked<Json> j = parseAnswer(body.value, "authenticate as user '" + endpoint.credentials.user + "' at " +
                                                endpoint.text());
  if (!j.ok()) return {j.error + " (check TAEHV_ETCD_USER and the password)"};
  const std::string token = j.value.value("token", "");
  if (token.empty()) {
    return {"etcd at " + endpoint.text() + " gave no token for user '" + endpoint.credentials.user +
            "' (is authentication enabled there?)"};
  }
  return {"", token};
}

Checked<std::string> EtcdClient::callOne(const EtcdEndpoint& endpoint, const std::string& path,
                                         const std::string& body, const LineStream* lines) {
  // etcd answers these to anyone: no token taken for them, so a wrong password shows as such, not as "unreachable".
  const bool open = path == "/version" || path == "/health" || path == "/v3/maintenance/status";
  if (endpoint.credentials.user.empty() || open) {
    Checked<std::string> answer = exchange(endpoint, path, body, "", lines);
    // etcd's word for a cluster with authentication on and a client without credentials.
    if (answer.ok() && answer.value.find("user name is empty") != std::string::npos) {
      return {"etcd at " + endpoint.text() + " has authentication enabled: set TAEHV_ETCD_USER and "
              "TAEHV_ETCD_PASSWORD (or TAEHV_ETCD_PASSWORD_FILE) on every node"};
    }
    return answer;
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::string& token = tokens_[endpoint.text()];
    if (token.empty()) {
      Checked<std::string> fresh = authenticate(endpoint);
      if (!fresh.ok()) return fresh;
      token = fresh.value;
    }
    // A streamed answer says it in its first line, before anything is handed over.
    bool refused = false;
    LineStream guarded;
    if (lines) {
      guarded = *lines;
      guarded.on_line = [&](const std::string& line) {
        if (line.find("invalid auth token") == std::string::npos) return lines->on_line(line);
        refused = true;
        return false;
      };
    }
    Checked<std::string> answer = exchange(endpoint, path, body, token, lines ? &guarded : nullptr);
    if (!lines) refused = answer.ok() && answer.value.find("invalid auth token") != std::string::npos;
    // A simple token lapses after etcd's --auth-token-ttl (300 s) idle, or when the member restarted: take another.
    if (attempt == 0 && refused) {
      token.clear();
      continue;
    }
    return answer;
  }
  return {"etcd at " + endpoint.text() + ": the fresh auth token was refused too"};
}

Checked<std::string> EtcdClient::exchange(const EtcdEndpoint& endpoint, const std::string& path,
                                          const std::string& body, const std::string& token,
                                          const LineStream* lines) {
  http::request<http::string_body> request{body.empty() ? http::verb::get : http::verb::post, path, 11};
  request.set(http::field::host, endpoint.host);
  request.set(http::field::content_type, "application/json");
  if (!token.empty()) request.set(http::field::authorization, token);
  // gRPC metadata through the gateway: a member cut off from its cluster's leader ends the stream rather than
  // keep a watch that can see nothing new.
  if (lines) request.set("Grpc-Metadata-hasleader", "true");
  request.body() = body;
  request.prepare_payload();
  // A numeric address needs no resolver (getaddrinfo cannot be interrupted, so a name is resolved within the same
  // deadline by a blocking call only when it is a name).
  asio::io_context io;
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  beast::error_code ec;
  const asio::ip::address numeric = asio::ip::make_address(endpoint.host, ec);
  std::vector<tcp::endpoint> targets;
  if (!ec) {
    targets.emplace_back(numeric, static_cast<unsigned short>(endpoint.port));
  } else {
    tcp::resolver resolver(io);
    auto results = resolver.resolve(endpoint.host, std::to_string(endpoint.port), ec);
    if (ec) return {"cannot resolve etcd endpoint " + endpoint.text() + ": " + ec.message()};
    for (const auto& r : results) targets.push_back(r.endpoint());
  }
  Exchange x;
  const auto* on_line = lines ? &lines->on_line : nullptr;
  const auto* stop = lines ? lines->stop : nullptr;
  const auto idle = lines ? lines->idle : timeout_;
  if (!endpoint.https) {
    beast::tcp_stream stream(io);
    runExchange(io, stream, targets, request, deadline, timeout_, x, on_line, stop, idle);
    if (!x.local_address.empty()) local_address_ = x.local_address;
  } else {
    if (!endpoint.tls) return {"etcd endpoint " + endpoint.text() + ": https without TLS settings (useEtcdTls)"};
    TlsStream stream(io, endpoint.tls->impl().context);
    EtcdTlsHandshakeFacts facts;
    SSL* connection = stream.native_handle();
    setHandshakeFacts(connection, &facts);
    if (!expectPeer(connection, endpoint.host)) {
      return {"etcd endpoint " + endpoint.text() + ": cannot set the name to verify (" + endpoint.host + ")"};
    }
    runExchange(io, stream, targets, request, deadline, timeout_, x, on_line, stop, idle);
    if (!x.local_address.empty()) local_address_ = x.local_address;  // reached, whatever TLS says next
    client_cert_asked_ = facts.client_cert_asked;
    if (!x.done && x.failure && x.failure != beast::error::timeout) {
      if (std::optional<TlsFailure> tls = tlsFailure(endpoint, x, facts, SSL_get_verify_result(connection))) {
        if (failure_fix_.empty()) failure_fix_ = tls->fix;
        return {tls->error};
      }
    }
  }
  stream_opened_ = x.opened;
  if (!x.done && stop && stop->load()) return {"", ""};
  if (!x.done && lines && x.opened && x.failure == beast::error::timeout) {
    return {"etcd endpoint " + endpoint.text() + ": the stream " + path + " was silent for " +
            std::to_string(idle.count()) + " ms"};
  }
  if (!x.done) {
    const std::string why = x.failure ? x.failure.message() : "no answer";
    const std::string ms = std::to_string(timeout_.count());
    if (x.failure == beast::error::timeout || !x.failure) {
      return {"etcd endpoint " + endpoint.text() + ": " + stepText(x.step) + " timed out after " + ms + " ms"};
    }
    if (!endpoint.https && x.step == Step::kRead && x.failure == http::error::end_of_stream && failure_fix_.empty()) {
      failure_fix_ = "the member closed the connection without an answer, as one that serves only https does: "
                     "write https://" + endpoint.text() + " (every endpoint) and set " + kEtcdCaCertEnv +
                     " to etcd's CA";
    }
    return {"etcd endpoint " + endpoint.text() + ": " + stepText(x.step) + ": " + why};
  }
  if (x.response.result() == http::status::not_found) {
    return {"etcd endpoint " + endpoint.text() + " has no " + path + " (HTTP 404): not an etcd v3 JSON gateway "
                                                                   "(etcd 3.4 or later)"};
  }
  return {"", std::move(x.response.body())};
}

Checked<std::string> EtcdClient::call(const std::string& path, const std::string& body) {
  if (endpoints_.empty()) return {"no etcd endpoint given"};
  failure_fix_.clear();
  std::string errors;
  for (std::size_t i = 0; i < endpoints_.size(); ++i) {
    const std::size_t at = (preferred_ + i) % endpoints_.size();
    Checked<std::string> answer = callOne(endpoints_[at], path, body);
    if (answer.ok()) {
      answeredBy(at);
      return answer;
    }
    errors += (errors.empty() ? "" : "; ") + answer.error;
  }
  return {errors};
}

Checked<std::string> EtcdClient::version() {
  Checked<std::string> body = call("/version", "");
  if (!body.ok()) return body;
  Checked<Json> j = parseAnswer(body.value, "version");
  if (!j.ok()) return {j.error};
  if (!j.value.contains("etcdserver") || !j.value["etcdserver"].is_string()) {
    return {"etcd version: the answer names no etcdserver version (not etcd?)"};
  }
  return {"", j.value["etcdserver"].get<std::string>()};
}

Checked<EtcdMemberStatus> EtcdClient::memberStatus() {
  Checked<std::string> body = call("/v3/maintenance/status", "{}");
  Checked<EtcdMemberStatus> out;
  if (!readMemberStatus(body, out.value)) return {out.value.error};
  if (out.value.version.empty()) return {"etcd status: the answer names no version (not an etcd v3 gateway?)"};
  return out;
}

Checked<bool> EtcdClient::health() {
  Checked<std::string> body = call("/health", "");
  if (!body.ok()) return {body.error};
  const Json j = Json::parse(body.value, nullptr, false);
  // etcd writes {"health":"true"} (3.4) or {"health":"true","reason":""} (3.5).
  if (j.is_discarded() || !j.is_object() || !j.contains("health")) {
    return {"etcd health: the answer is not etcd's {\"health\": ...} (not an etcd?)"};
  }
  const Json& h = j["health"];
  return {"", (h.is_string() && h.get<std::string>() == "true") || (h.is_boolean() && h.get<bool>())};
}

Checked<EtcdRange> EtcdClient::range(const std::string& key, const std::string& range_end) {
  const Json request = {{"key", base64Encode(key)}, {"range_end", base64Encode(range_end)}};
  Checked<std::string> body = call("/v3/kv/range", request.dump());
  if (!body.ok()) return {body.error};
  Checked<Json> j = parseAnswer(body.value, "range " + key);
  if (!j.ok()) return {j.error};
  Checked<EtcdRange> out;
  if (j.value.contains("header") && j.value["header"].is_object()) out.value.revision = jsonInt(j.value["header"], "revision");
  if (j.value.contains("kvs") && j.value["kvs"].is_array()) {
    for (const Json& kv : j.value["kvs"]) out.value.kvs.push_back(toKeyValue(kv));
  }
  return out;
}

Checked<std::vector<EtcdKeyValue>> EtcdClient::rangePrefix(const std::string& prefix) {
  Checked<EtcdRange> r = range(prefix, etcdPrefixEnd(prefix));
  if (!r.ok()) return {r.error};
  return {"", std::move(r.value.kvs)};
}

Checked<std::optional<EtcdKeyValue>> EtcdClient::get(const std::string& key) {
  const Json request = {{"key", base64Encode(key)}};
  Checked<std::string> body = call("/v3/kv/range", request.dump());
  if (!body.ok()) return {body.error};
  Checked<Json> j = parseAnswer(body.value, "get " + key);
  if (!j.ok()) return {j.error};
  Checked<std::optional<EtcdKeyValue>> out;
  if (j.value.contains("kvs") && j.value["kvs"].is_array() && !j.value["kvs"].empty()) {
    out.value = toKeyValue(j.value["kvs"][0]);
  }
  return out;
}

Status EtcdClient::put(const std::string& key, const std::string& value, std::int64_t lease) {
  Json request = {{"key", base64Encode(key)}, {"value", base64Encode(value)}};
  if (lease != 0) request["lease"] = std::to_string(lease);
  Checked<std::string> body = call("/v3/kv/put", request.dump());
  if (!body.ok()) return {body.error};
  Checked<Json> j = parseAnswer(body.value, "put " + key);
  return {j.error};
}

Checked<bool> EtcdClient::putIfModRevision(const std::string& key, const std::string& value,
                                           std::int64_t mod_revision, std::int64_t lease) {
  Json put = {{"key", base64Encode(key)}, {"value", base64Encode(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  return txnIfModRevision(key, mod_revision, Json{{"request_put", put}}.dump());
}

Checked<bool> EtcdClient::removeIfModRevision(const std::string& key, std::int64_t mod_revision) {
  return txnIfModRevision(key, mod_revision, Json{{"request_delete_range", {{"key", base64Encode(key)}}}}.dump());
}

Checked<bool> EtcdClient::txnIfModRevision(const std::string& key, std::int64_t mod_revision,
                                           const std::string& then) {
  const Json request = {
      {"compare", Json::array({{{"key", base64Encode(key)}, {"target", "MOD"}, {"result", "EQUAL"},
                                {"mod_revision", std::to_string(mod_revision)}}})},
      {"success", Json::array({Json::parse(then)})}};
  Checked<std::string> body = call("/v3/kv/txn", request.dump());
  if (!body.ok()) return {body.error};
  Checked<Json> j = parseAnswer(body.value, "txn " + key);
  if (!j.ok()) return {j.error};
  return {"", j.value.value("succeeded", false)};
}

Checked<std::int64_t> EtcdClient::leaseGrant(std::chrono::seconds ttl) {
  const Json request = {{"TTL", std::to_string(ttl.count())}};
  Checked<std::string> body = call("/v3/lease/grant", request.dump());
  if (!body.ok()) return {body.error};
  Checked<Json> j = parseAnswer(body.value, "lease grant");
  if (!j.ok()) return {j.error};
  const std::int64_t id = jsonInt(j.value, "ID");
  if (id == 0) return {"etcd lease grant: no lease ID in the answer" + (j.value.contains("error") ? "" : std::string())};
  return {"", id};
}

Checked<std::int64_t> EtcdClient::leaseKeepAlive(std::int64_t lease) {
  const Json request = {{"ID", std::to_string(lease)}};
  Checked<std::string> body = call("/v3/lease/keepalive", request.dump());
  if (!body.ok()) return {body.error};
  // The gateway streams: one {"result": {...}} object per renewal, here one.
  const std::string first = body.value.substr(0, body.value.find('\n'));
  Checked<Json> j = parseAnswer(first, "lease keepalive");
  if (!j.ok()) return {j.error};
  if (!j.value.contains("result")) return {"etcd lease keepalive: no result in the answer"};
  return {"", jsonInt(j.value["result"], "TTL")};
}

std::vector<EtcdMemberStatus> EtcdClient::statuses() {
  std::vector<EtcdMemberStatus> out;
  for (const EtcdEndpoint& endpoint : endpoints_) {
    EtcdMemberStatus s;
    s.endpoint = endpoint;
    readMemberStatus(callOne(endpoint, "/v3/maintenance/status", "{}"), s);
    out.push_back(std::move(s));
  }
  return out;
}

Status EtcdClient::leaseRevoke(std::int64_t lease) {
  const Json request = {{"ID", std::to_string(lease)}};
  Checked<std::string> body = call("/v3/lease/revoke", request.dump());
  if (!body.ok()) return {body.error};
  Checked<Json> j = parseAnswer(body.value, "lease revoke");
  return {j.error};
}

}  // namespace taehv::group

namespace taehv::group {

Status EtcdClient::watch(const std::string& key, const std::string& range_end, EtcdWatchEnd& resume,
                         const std::function<void(std::vector<EtcdWatchEvent>)>& on_events,
                         const std::atomic<bool>& stop, std::chrono::milliseconds idle) {
  if (endpoints_.empty()) return {"no etcd endpoint given"};
  const Json request = {{"create_request",
                         {{"key", base64Encode(key)}, {"range_end", base64Encode(range_end)},
                          {"start_revision", std::to_string(resume.next_revision)}, {"progress_notify", true}}}};
  std::string refusal;  // etcd's own word, when it ended the stream
  LineStream lines;
  lines.stop = &stop;
  lines.idle = idle;
  lines.on_line = [&](const std::string& line) {
    Checked<Json> j = parseAnswer(line, "watch " + key);
    if (!j.ok() || !j.value.contains("result") || !j.value["result"].is_object()) {
      refusal = j.ok() ? "etcd watch " + key + ": an answer without a result" : j.error;
      return false;
    }
    const Json& r = j.value["result"];
    if (const std::int64_t compacted = jsonInt(r, "compact_revision"); compacted > 0) {
      resume.compacted = true;
      return false;
    }
    if (r.value("canceled", false)) {
      refusal = "etcd watch " + key + " canceled: " + r.value("cancel_reason", std::string("no reason given"));
      return false;
    }
    std::vector<EtcdWatchEvent> events;
    if (r.contains("events") && r["events"].is_array()) {
      for (const Json& e : r["events"]) {
        if (!e.is_object() || !e.contains("kv")) continue;
        EtcdWatchEvent event;
        event.deleted = e.value("type", std::string("PUT")) == "DELETE";
        event.kv = toKeyValue(e["kv"]);
        resume.next_revision = std::max(resume.next_revision, event.kv.mod_revision + 1);
        events.push_back(std::move(event));
      }
    }
    if (!events.empty()) {
      on_events(std::move(events));
    } else if (!r.value("created", false) && r.contains("header") && r["header"].is_object()) {
      // A progress note: every change up to its revision has been sent.
      resume.next_revision = std::max(resume.next_revision, jsonInt(r["header"], "revision") + 1);
    }
    return true;
  };
  failure_fix_.clear();
  std::string errors;
  for (std::size_t i = 0; i < endpoints_.size(); ++i) {
    const std::size_t at = (preferred_ + i) % endpoints_.size();
    refusal.clear();
    Checked<std::string> answer = callOne(endpoints_[at], "/v3/watch", request.dump(), &lines);
    if (answer.ok() && refusal.empty()) {
      answeredBy(at);
      return {};
    }
    const std::string error = answer.ok() ? refusal : answer.error;
    if (stream_opened_ || stop.load()) {
      // It served the stream, then broke (the member stopped, lost its leader): the next one first next time.
      preferred_ = (at + 1) % endpoints_.size();
      return {error};
    }
    errors += (errors.empty() ? "" : "; ") + error;
  }
  return {errors};
}

}  // namespace taehv::group
