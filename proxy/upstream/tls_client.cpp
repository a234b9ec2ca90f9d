#include "proxy/upstream/tls_client.hpp"

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <stdexcept>

namespace rebound::upstream {
namespace {

/// Index of the tls_client pointer in each SSL_CTX's ex_data, for the session callback.
int client_index() {
  static int const index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

std::string file_problem(const std::string& what, const std::string& path, const boost::system::system_error& e) {
  return what + " \"" + path + "\" cannot be used: " + e.code().message();
}

}  // namespace

tls_client::tls_client(const config::tls_settings& settings, const std::string& origin_host)
    : ctx_(net::ssl::context::tls_client), name_(settings.server_name.empty() ? origin_host : settings.server_name) {
  error_code ec;
  net::ip::make_address(name_, ec);
  name_is_ip_ = !ec;
  identity_ = "tls=" + name_ + ";ca=" + settings.ca_file + ";cert=" + settings.client_cert;
  SSL_CTX_set_min_proto_version(ctx_.native_handle(), TLS1_2_VERSION);
  ctx_.set_options(net::ssl::context::default_workarounds | net::ssl::context::no_compression);
  ctx_.set_verify_mode(net::ssl::verify_peer);
  try {
    if (settings.ca_file.empty())
      ctx_.set_default_verify_paths();
    else
      ctx_.load_verify_file(settings.ca_file);
  } catch (const boost::system::system_error& e) {
    throw std::runtime_error(file_problem("tls.ca_file", settings.ca_file, e));
  }
  if (!settings.client_cert.empty()) {
    try {
      ctx_.use_certificate_chain_file(settings.client_cert);
    } catch (const boost::system::system_error& e) {
      throw std::runtime_error(file_problem("tls.client_cert", settings.client_cert, e));
    }
    try {
      ctx_.use_private_key_file(settings.client_key, net::ssl::context::pem);
    } catch (const boost::system::system_error& e) {
      throw std::runtime_error(file_problem("tls.client_key", settings.client_key, e));
    }
    if (SSL_CTX_check_private_key(ctx_.native_handle()) != 1)
      throw std::runtime_error("tls.client_key \"" + settings.client_key + "\" does not belong to tls.client_cert");
  }
  // Client-side session cache: OpenSSL hands each new session (a TLS 1.3 ticket arrives
  // after the handshake) to on_new_session, which keeps the newest for the next connection.
  SSL_CTX_set_ex_data(ctx_.native_handle(), client_index(), this);
  SSL_CTX_set_session_cache_mode(ctx_.native_handle(), SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(ctx_.native_handle(), &tls_client::on_new_session);
}

tls_client::~tls_client() {
  if (session_) SSL_SESSION_free(session_);
}

int tls_client::on_new_session(SSL* ssl, SSL_SESSION* session) {
  auto* self = static_cast<tls_client*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), client_index()));
  if (!self) return 0;
  // A copy: OpenSSL marks a connection's own session not resumable when the connection is
  // freed without a TLS shutdown (as a pooled connection that times out is), and the copy
  // stays usable for the next connection.
  SSL_SESSION* copy = SSL_SESSION_dup(session);
  if (!copy) return 0;
  std::lock_guard lock(self->session_mutex_);
  if (self->session_) SSL_SESSION_free(self->session_);
  self->session_ = copy;
  return 0;  // OpenSSL keeps its own reference to `session`
}

net::awaitable<handshake_result> tls_client::handshake(beast::tcp_stream& tcp,
                                                       std::chrono::steady_clock::time_point deadline,
                                                       std::string_view alpn) {
  handshake_result out;
  auto stream = std::make_unique<tls_stream>(std::move(tcp), ctx_);
  SSL* ssl = stream->native_handle();
  if (name_is_ip_) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name_.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl, name_.c_str());  // SNI: only for names (RFC 6066 forbids literals)
    SSL_set1_host(ssl, name_.c_str());
  }
  {
    std::lock_guard lock(session_mutex_);
    if (session_) SSL_set_session(ssl, session_);
  }
  if (!alpn.empty()) {
    // ALPN's wire format: each protocol name behind its one-byte length.
    std::string protos(1, static_cast<char>(alpn.size()));
    protos.append(alpn);
    SSL_set_alpn_protos(ssl, reinterpret_cast<const unsigned char*>(protos.data()),
                        static_cast<unsigned>(protos.size()));
  }
  stream->next_layer().expires_at(deadline);
  auto [ec] = co_await stream->async_handshake(net::ssl::stream_base::client, use_tuple);
  if (!ec && !alpn.empty()) {
    const unsigned char* selected = nullptr;
    unsigned selected_len = 0;
    SSL_get0_alpn_selected(ssl, &selected, &selected_len);
    if (std::string_view(reinterpret_cast<const char*>(selected), selected ? selected_len : 0) != alpn) {
      out.error = http::error_type::upstream_protocol_error;
      out.message = "upstream did not negotiate " + std::string(alpn);
      co_return out;
    }
  }
  if (!ec) {
    stream->next_layer().expires_never();
    out.conn.emplace(std::move(stream));
    co_return out;
  }
  auto const verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) {
    out.error = http::error_type::tls_certificate;
    out.message = "certificate of " + name_ + " not accepted: " + X509_verify_cert_error_string(verify);
  } else if (ec == beast::error::timeout) {
    out.error = http::error_type::tls_handshake_timeout;
    out.message = "TLS handshake with " + name_ + " timed out";
  } else if (ec == net::error::connection_reset || ec == net::error::eof || ec == net::ssl::error::stream_truncated) {
    out.error = http::error_type::connect_reset;
    out.message = "TLS handshake with " + name_ + ": the server closed the connection";
  } else {
    out.error = http::error_type::upstream_protocol_error;
    out.message = "TLS handshake with " + name_ + " failed: " + ec.message();
  }
  co_return out;
}

}  // namespace rebound::upstream
