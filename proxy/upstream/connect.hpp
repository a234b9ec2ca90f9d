#pragma once
/** Resolve and connect to an upstream within a deadline, classifying each failure into
    SPEC section 6's error types (the R-4 classification builds on these). */
#include "proxy/http/error_response.hpp"
#include "proxy/net.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace rebound::upstream {

struct connect_result {
  std::optional<beast::tcp_stream> stream;  ///< set on success
  http::error_type error = http::error_type::connect_refused;
  std::string message;                      ///< why, for the client and the log
};

/// `host` is taken by reference: by-value arguments of a co_awaited call hit a GCC 12
/// double-destruction bug; the caller keeps it alive across the await.
net::awaitable<connect_result> connect_to(const std::string& host, std::uint16_t port,
                                          std::chrono::steady_clock::time_point deadline);

/// The error type for a failed connect (ECONNREFUSED, ECONNRESET, beast timeout, ...).
http::error_type classify_connect_error(const error_code& ec);

}  // namespace rebound::upstream
