#pragma once
/** A WebSocket handshake after the upstream switched (issue 32). Up to the 101 the upgrade is
    a request like any other (forward.cpp: route, credentials, retries while nothing
    was switched); from the 101 on it is a byte tunnel, the one CONNECT uses (tunnel.hpp). */
#include "proxy/http/client_request.hpp"
#include "proxy/net.hpp"
#include "proxy/retry/step.hpp"
#include "proxy/upstream/attempt.hpp"

namespace rebound::http {

/** Relays the upstream's 101 (`ex` holds its head) to the client, then pumps bytes both ways
    until the connection ends; counted in proxy_upgrades_total and its bytes, logged once as
    `tunnel_closed`. The upstream connection is never pooled and nothing is sent again. */
net::awaitable<void> relay_switch(const client_request& r, upstream::exchange& ex, const retry::request_facts& facts,
                                  unsigned attempts);

}  // namespace rebound::http
