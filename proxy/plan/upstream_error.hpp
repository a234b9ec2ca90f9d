#pragma once
/** How every door logs a request that failed at its upstream (SPEC 9): the `upstream_error`
    event, from the request's facts alone (no header value, no query string: R-9). */
#include "proxy/retry/step.hpp"
#include "proxy/runtime/session_context.hpp"

#include <string_view>

namespace rebound::plan {

/// The `upstream_error` event: an attempt, or the relay of its response, failed. Only the
/// request's facts (no header value, no query string) and the failure go in.
struct upstream_error_event {
  std::string_view error_type;
  unsigned status = 0;  ///< what the client was answered; 0: the response was under way
  unsigned attempts = 0;
  std::string_view message;
};
void log_upstream_error(const runtime::session_context& ctx, const retry::request_facts& facts,
                        const upstream_error_event& e);

}  // namespace rebound::plan
