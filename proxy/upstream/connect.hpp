#pragma once
/** Resolve and connect to an upstream within a deadline, classifying each failure into
    SPEC section 6's error types (the R-4 classification builds on these). */
#include "proxy/wire/error_response.hpp"
#include "proxy/net.hpp"
#include "proxy/upstream/connection.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rebound::upstream {

struct connect_result {
  std::optional<beast::tcp_stream> stream;  ///< set on success
  net::ip::address peer;                    ///< the address it connected to
  http::error_type error = http::error_type::connect_refused;
  std::string message;  ///< why, for the client and the log
  /// A name's addresses whose connect failed (refused, unreachable, or still pending when the
  /// deadline came), for outlier ejection; those given up on because another won are not.
  std::vector<net::ip::address> failed;
};

/** `host` is taken by reference: by-value arguments of a co_awaited call hit a GCC 12
    double-destruction bug; the caller keeps it alive across the await. A name's addresses
    in `avoid` (those its request tried already) are tried after the others. */
net::awaitable<connect_result> connect_to(const std::string& host, std::uint16_t port,
                                          std::chrono::steady_clock::time_point deadline,
                                          const std::vector<net::ip::address>* avoid = nullptr);

class tls_client;

struct open_result {
  std::optional<connection> conn;  ///< set on success
  http::error_type error = http::error_type::connect_refused;
  std::string message;
  std::vector<net::ip::address> failed;  ///< connect_result::failed
};

/// A connection for a request: TCP, then the TLS handshake when `tls` is given (an https
/// origin). One deadline covers both. `alpn`: the protocol TLS must negotiate (HTTP/2's "h2").
net::awaitable<open_result> open_connection(const std::string& host, std::uint16_t port, tls_client* tls,
                                            std::chrono::steady_clock::time_point deadline,
                                            std::string_view alpn = {},
                                            const std::vector<net::ip::address>* avoid = nullptr);

/// The error type for a failed connect (ECONNREFUSED, ECONNRESET, beast timeout, ...).
http::error_type classify_connect_error(const error_code& ec);

}  // namespace rebound::upstream
