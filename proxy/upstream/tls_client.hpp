#pragma once
/** rebound as a TLS client (SPEC section 5, R-9): one per https:// origin.

    Verification cannot be turned off: the chain is checked against the system store or
    `tls.ca_file`, the host name (or IP address) against `tls.server_name` or the origin's
    host, TLS 1.2 at least. The last session the origin gave is offered on the next
    handshake, so a new pooled connection resumes instead of paying a full handshake. Shared
    by every worker: the context is read-only once built, the session slot has a mutex. */
#include "config/config.hpp"
#include "proxy/wire/error_response.hpp"
#include "proxy/upstream/connection.hpp"

#include <boost/asio/ssl/context.hpp>

#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace rebound::upstream {

struct handshake_result {
  std::optional<connection> conn;  ///< set on success
  http::error_type error = http::error_type::tls_certificate;
  std::string message;  ///< why, naming the verification error (never certificate contents)
};

class tls_client {
 public:
  /** Loads the CA bundle and client certificate. Throws std::runtime_error (start-up or
      reload) when a file is not a usable PEM. `origin_host` is the default name to verify. */
  tls_client(const config::tls_settings& settings, const std::string& origin_host);
  ~tls_client();
  tls_client(const tls_client&) = delete;
  tls_client& operator=(const tls_client&) = delete;

  /** Runs the client handshake over `tcp` (moved from) by `deadline`. A verification failure is
      `tls_certificate` (final); running out of time is `tls_handshake_timeout` (retryable,
      R-4); a connection the server drops is `connect_reset`; any other handshake failure
      (no shared protocol version, an alert) is `upstream_protocol_error`, final. With `alpn`
      (one protocol name, e.g. "h2"), ALPN offers it and a server that does not select it is
      `upstream_protocol_error` too. */
  net::awaitable<handshake_result> handshake(beast::tcp_stream& tcp, std::chrono::steady_clock::time_point deadline,
                                             std::string_view alpn = {});

  const std::string& server_name() const { return name_; }
  /** What a connection made by this client was verified against and presents: the name, the
      CA bundle and the client certificate. Part of the pool key, so a connection checked for
      one dependency's trust is never handed to another's. */
  const std::string& identity() const { return identity_; }

 private:
  static int on_new_session(SSL* ssl, SSL_SESSION* session);

  net::ssl::context ctx_;
  std::string name_;
  std::string identity_;
  bool name_is_ip_ = false;
  std::mutex session_mutex_;
  SSL_SESSION* session_ = nullptr;  ///< the newest session the origin issued; owned
};

}  // namespace rebound::upstream
