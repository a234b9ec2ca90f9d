#pragma once
/** R-6's server side, kept for the app behind rebound (seeds 002 and 004): on an inbound
    route with `idempotency`, a request with a key is claimed in the store before it reaches
    the app, and its answer is pinned for the key's TTL, so a duplicate gets that answer back
    (`Idempotency-Status: replayed`) without the app seeing it twice; on a route with `dedupe`,
    an event id seen within its window is answered 200 and never reaches the app again. */
#include "config/config.hpp"
#include "proxy/http/client_request.hpp"
#include "proxy/inbound/gate_step.hpp"
#include "proxy/net.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include "proxy/wire/bounded_parser.hpp"

namespace rebound::observe {
class metrics;
}

namespace rebound::inbound {

/** Answers the request through the gate: refused (400 key missing or malformed, 409 in
    flight, 422/409 payload mismatch), replayed from the store, or forwarded to the app once
    with its answer pinned. Returns whether the client connection stays open. */
net::awaitable<bool> answer_through_gate(const http::client_request& request,
                                         const config::inbound_route& inbound_route);

}  // namespace rebound::inbound
