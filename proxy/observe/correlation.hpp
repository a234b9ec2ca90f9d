#pragma once
/** The correlation id that joins rebound's log lines for a request with the application's
    and the upstream's (SPEC section 9, R-10).

    Taken from the request's X-Request-ID, X-Correlation-ID or W3C traceparent (its
    trace-id), in that order. A header value is only used when it looks like an id: 1..128
    visible ASCII characters. Anything else (a long or binary value, a value with spaces
    that could pass for something else in a log search) is not logged: rebound makes its own
    id and sends it upstream as X-Request-ID (replacing an unusable X-Request-ID), so the
    upstream's logs carry the id rebound's do. */
#include <array>
#include <random>
#include <string>
#include <string_view>

namespace rebound::observe {

constexpr std::size_t max_correlation_id = 128;

/// Whether a client's header value may serve as the correlation id.
bool usable_correlation_id(std::string_view value);

/// The trace-id of a traceparent header (`00-<32 hex>-<16 hex>-<2 hex>`), or empty when the
/// value is not one (W3C Trace Context: an all-zero trace-id is invalid).
std::string_view trace_id_of(std::string_view traceparent);

/// The request fields a correlation id may come from, as the request carries them (empty: absent).
struct correlation_fields {
  std::string_view request_id;      ///< X-Request-ID
  std::string_view correlation_id;  ///< X-Correlation-ID
  std::string_view traceparent;     ///< W3C traceparent
};

/** R-10's rule for every way in (HTTP/1.1, CONNECT, gRPC): the first of X-Request-ID,
    X-Correlation-ID and traceparent's trace-id that can serve, or empty: the caller makes
    one with new_correlation_id and sends it on as X-Request-ID where it can. */
std::string_view correlation_id_of(const correlation_fields& f);

/// An id rebound made, held by value: a 32-character std::string was a malloc on every
/// request that came without one.
struct made_correlation_id {
  std::array<char, 32> digits{};
  std::string_view view() const { return {digits.data(), digits.size()}; }
};

/// A new id: 32 lowercase hex digits. Not a secret, so the worker's generator suffices.
made_correlation_id new_correlation_id(std::mt19937_64& rng);

}  // namespace rebound::observe
