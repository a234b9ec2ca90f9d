#pragma once
/** The inbound listener's door (SPEC section 9): each request goes to `inbound.app`, through
    the idempotency gate where its route asks for one. The HTTP/1.1 session calls it as its
    `inbound` door (http/client_session.hpp), which app/ plugs in. */
#include "proxy/net.hpp"

namespace rebound::http {
struct client_request;
}  // namespace rebound::http
namespace rebound::runtime {
class session_guard;
}  // namespace rebound::runtime

namespace rebound::inbound {

/// Answers `request`; false when the connection must end (as http::forward says).
net::awaitable<bool> serve_request(const http::client_request& request, runtime::session_guard& guard);

}  // namespace rebound::inbound
