#pragma once
/** One request to a URL rebound calls for itself, not for a client: an OAuth2 token endpoint,
    a trace collector. A connection of its own (TLS, verified, when the URL is https://),
    closed after the answer; one deadline covers it all; the answer's body is bounded. */
#include "config/config.hpp"
#include "proxy/wire/head_fields.hpp"
#include "proxy/net.hpp"

#include <boost/beast/http/string_body.hpp>

#include <chrono>
#include <cstddef>
#include <string>

namespace rebound::upstream {

class tls_client;

struct service_answer {
  unsigned status = 0;  ///< 0 when no answer came
  std::string body;
  std::string error;  ///< why no answer came (never a secret), empty when one did
};

/** Sends `req` to `url` (its target, Host and Connection: close are set here; the caller sets
    the method, the other fields and the body). `tls` must be given for an https:// URL.
    `url` and `req` are taken by reference: by-value arguments of a co_awaited call hit a GCC
    12 double-destruction bug; the caller keeps both alive across the await. */
net::awaitable<service_answer> call_service(const config::service_url& url, tls_client* tls,
                                            http::request_message<boost::beast::http::string_body>& req,
                                            std::size_t max_answer, std::chrono::steady_clock::time_point deadline);

}  // namespace rebound::upstream
