#pragma once
/** The single-attempt path: a request whose body is not kept for a retry (larger than
    max_retry_body, or sent with Expect: 100-continue) streams through once, the body relayed
    as it arrives and Expect: 100-continue passed through (RFC 9110 section 10.1.1). */
#include "proxy/http/client_request.hpp"
#include "proxy/http/client_session.hpp"
#include "proxy/plan/dependency_route.hpp"
#include "proxy/plan/request_target.hpp"
#include "proxy/retry/loop.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include "proxy/wire/bounded_parser.hpp"

#include <string_view>

namespace rebound::http {

namespace bhttp = boost::beast::http;

/** Forwards the request in `parser` in one attempt. `prefix` is body already read from the
    client (a chunked body that outgrew max_retry_body); it goes out before the rest. The
    attempt's outcome is recorded with the route's guard, so the breaker and the metrics
    count it like any other. */
net::awaitable<bool> forward_once(const client_request& r, const retry::request_facts& facts, std::string_view prefix);

}  // namespace rebound::http
