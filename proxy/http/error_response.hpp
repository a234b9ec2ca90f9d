#pragma once
/** The answers rebound makes itself (SPEC section 6): a status, `Rebound-Error: TYPE`, and
    the JSON body `{"error": {"type", "message", "dependency", "attempts"}}`. */
#include "proxy/retry/error_type.hpp"

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <string>
#include <string_view>

namespace rebound::http {

// The error vocabulary lives with the retry rules that read it; the answers are made here.
using retry::default_status;
using retry::error_type;
using retry::to_string;

struct error_reply {
  unsigned status = 502;
  error_type type = error_type::upstream_protocol_error;
  std::string message;
  std::string dependency;  ///< empty when no dependency was resolved yet
  unsigned attempts = 0;
  unsigned retry_after_s = 0;  ///< > 0: sent as Retry-After (circuit_open: time until a probe may go)
  bool gave_up = false;        ///< retried and gave up: `Rebound-Retried: exhausted` (retry/layers.hpp)
};

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
