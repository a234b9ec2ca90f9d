#pragma once
/** The entry of async delivery (R-8; seed 001's retry service): a call that is handed over
    is written to the store and committed to disk before rebound answers 202 Accepted; the
    delivery happens later, in the background (delivery/). A call is handed over when it asks
    (`Prefer: respond-async`, RFC 7240) or its route's context is async, webhook or batch. */
#include "proxy/wire/bounded_parser.hpp"
#include "proxy/http/client_request.hpp"
#include "proxy/http/client_session.hpp"
#include "proxy/plan/dependency_route.hpp"
#include "proxy/plan/request_target.hpp"

#include <boost/beast/core/flat_buffer.hpp>

namespace rebound::http {

/** Whether this request is to be handed over rather than forwarded while the client waits.
    `upgrade`: the head asks for one (read once, by forward). */
bool wants_hand_over(const runtime::session_context& ctx, const request_parser& parser, const retry::policy& policy,
                     bool upgrade);

/** Reads the body (at most async.max_body: 413 beyond, nothing stored), stores the call with
    its idempotency key (the app's, else a new one, kept for every attempt: R-6), and answers
    202 with the task's Location once the store committed it, or 503 store_unavailable. */
net::awaitable<bool> hand_over(const client_request& r);

}  // namespace rebound::http
