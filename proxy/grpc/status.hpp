#pragma once
/** rebound's own answers to a gRPC call, as gRPC clients understand them: a trailers-only
    response (HTTP 200, `content-type: application/grpc`, `grpc-status`, `grpc-message`)
    instead of the HTTP error answers of SPEC section 6, which a gRPC client would only see
    as "unknown". The SPEC error type travels as `rebound-error`. */
#include "proxy/h2/message.hpp"
#include "proxy/retry/error_type.hpp"

#include <string>
#include <string_view>

namespace rebound::grpc {

/// The gRPC status codes rebound names (grpc/doc/statuscodes.md).
enum class code : unsigned {
  ok = 0,
  cancelled = 1,
  unknown = 2,
  invalid_argument = 3,
  deadline_exceeded = 4,
  not_found = 5,
  permission_denied = 7,
  resource_exhausted = 8,
  aborted = 10,
  unimplemented = 12,
  internal = 13,
  unavailable = 14,
  unauthenticated = 16,
};

/** The status a client gets for one of rebound's failures: UNAVAILABLE for what a caller may
    try again later (connect failures, an open breaker, a spent budget, overload),
    DEADLINE_EXCEEDED for time that ran out, UNAUTHENTICATED when rebound's credential could
    not be refreshed, INTERNAL for an upstream that broke the protocol, INVALID_ARGUMENT for
    a malformed call. */
code code_for(retry::error_type t);

/// A grpc-message value: percent-encoded as the protocol asks (bytes outside 0x20-0x7E, and %).
std::string encode_message(std::string_view text);

/// grpc-status, grpc-message (percent-encoded) and, for rebound's own failures, rebound-error.
h2::fields status_fields(code status, std::string_view message, std::string_view error);

/// A trailers-only answer with `status` and `message`, naming `error` in `rebound-error`.
h2::message trailers_only(code status, std::string_view message, std::string_view error);

/** rebound's refusal of a call that broke a connection's limit (h2::handlers::refuse_call):
    DEADLINE_EXCEEDED for a request too slow, RESOURCE_EXHAUSTED for one too large. */
h2::message refusal(h2::stream_refusal why, std::string_view message);

/** The `code` a gRPC answer is counted under in proxy_requests_total: every gRPC answer is
    HTTP 200, so it is its grpc-status mapped as google.rpc.Code maps to HTTP (UNAVAILABLE 503,
    DEADLINE_EXCEEDED 504, RESOURCE_EXHAUSTED 429, INTERNAL 500, ...), so that a dashboard
    of error rates reads gRPC calls as it reads HTTP ones. The grpc-status is read from the
    head (trailers-only) or the trailers; a non-200 :status counts as itself, an answer with no
    readable grpc-status as 502. */
unsigned counted_status(const h2::fields& head, const h2::fields& trailers);

}  // namespace rebound::grpc
