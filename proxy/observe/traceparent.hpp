#pragma once
/** W3C Trace Context's `traceparent` field (level 1), read and written: the one parser that
    decides both the trace a request continues (trace.hpp) and the correlation id its log lines
    carry (correlation.hpp), so the two never disagree. */
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rebound::observe {

using trace_id = std::array<std::uint8_t, 16>;
using span_id = std::array<std::uint8_t, 8>;

/// A W3C traceparent (`00-<trace-id>-<parent-id>-<flags>`), version 00's fields.
struct trace_parent {
  trace_id trace{};
  span_id parent{};
  bool sampled = false;
};
/** Parses a traceparent as W3C Trace Context level 1 says a receiver must: lower-case hex,
    neither id all zeros, version ff refused, a later version's longer value read by its
    version-00 prefix. Nullopt for anything else: the request then starts a trace. */
std::optional<trace_parent> parse_traceparent(std::string_view value);
std::string format_traceparent(const trace_id& trace, const span_id& span, bool sampled);
std::string hex(const std::uint8_t* bytes, std::size_t n);

}  // namespace rebound::observe
