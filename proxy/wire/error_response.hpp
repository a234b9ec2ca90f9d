#pragma once
/** The answers rebound makes itself (SPEC section 6): a status, `Rebound-Error: TYPE`, and
    the JSON body `{"error": {"type", "message", "dependency", "attempts"}}`. */
#include "proxy/wire/error_reply.hpp"

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <string>
#include <string_view>

namespace rebound::http {

/** SPEC 6's JSON body, the one writer of it: `{"error": {"type", "message", "dependency",
    "attempts"}}`; without `e` (the admin API's errors, about no dependency) only type and
    message. */
std::string error_json(std::string_view type, std::string_view message, const error_reply* e = nullptr);

/** Builds the complete response. A 503 that sheds load (circuit_open, budget_exhausted,
    overloaded) says `Rebound-Overloaded: 1`, so a rebound calling this one backs off instead
    of retrying (retry/layers.hpp). `keep_alive` false adds `Connection: close`: rebound
    closes after any error that leaves unread request bytes on the connection. */
boost::beast::http::response<boost::beast::http::string_body> make_error_response(const error_reply& e,
                                                                                  bool keep_alive);

/** The same answer for an error type SPEC 6 does not list in error_type: the inbound gate's
    `idempotency.*` types. `e.type` is not read; everything else is, so every answer of
    rebound's own has one shape: Rebound-Error, Rebound-Attempts, Via, and the JSON body with
    type, message, dependency and attempts. */
boost::beast::http::response<boost::beast::http::string_body> make_error_response(std::string_view type,
                                                                                  const error_reply& e,
                                                                                  bool keep_alive);

}  // namespace rebound::http
