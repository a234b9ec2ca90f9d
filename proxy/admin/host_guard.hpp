#pragma once
/** Who may talk to the admin API: the defence against DNS rebinding and against writes from
    pages of other sites. A browser lets any page send requests to 127.0.0.1:9901; what it
    cannot forge is the `Host` it sends (the name in the page's address) and the `Origin` of a
    write. So every admin request, reads included, must name the admin API by a name an
    attacker cannot point at it (an IP literal, localhost, the configured admin host, or one of
    `admin.allowed_hosts`), and a write that carries an `Origin` must come from that same origin
    (the admin page itself). Jupyter, Vite's `allowedHosts` and webpack-dev-server do the same. */
#include "proxy/wire/head_fields.hpp"

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace rebound::config {
struct config;
}

namespace rebound::admin {

/** Whether a `Host` value names the admin API: an IP literal (v4, or v6 in brackets: a page
    whose address is an IP literal is served from that address, so it cannot rebind), `localhost`
    or a name under `.localhost` (browsers resolve them to loopback themselves), the configured
    admin host, or an `admin.allowed_hosts` entry (exact, or `.example.com` for every name under
    it). Any port: `kubectl port-forward 8080:9901` makes the page's own Host `localhost:8080`,
    and the port adds nothing against rebinding, which needs the attacker's name. */
bool admin_host_allowed(std::string_view host, const config::config& cfg);

/** Why the request must be refused before anything else reads it, or nullopt: a `Host` that
    does not name the admin API (any request), or a write whose `Origin` is not the admin page's
    own (`scheme://` + its Host). A request without `Host` (HTTP/1.0 tools) is not from a
    browser and passes. */
std::optional<std::string> foreign_request(
    const http::request_head& req, const config::config& cfg);

}  // namespace rebound::admin
