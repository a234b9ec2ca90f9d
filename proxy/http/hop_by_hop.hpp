#pragma once
/** Hop-by-hop fields (RFC 9110 section 7.6.1): they describe one connection, so a proxy
    removes them in both directions and sets its own per hop. */
#include <boost/beast/http/fields.hpp>

namespace rebound::http {

/** Removes Connection and every field it names, Proxy-Connection, Keep-Alive, TE, Trailer,
    Transfer-Encoding (each hop frames its own body), Upgrade, Proxy-Authorization and
    Proxy-Authenticate. */
void strip_hop_by_hop(boost::beast::http::fields& f);

/// Appends `1.1 rebound` to Via (RFC 9110 section 7.6.3: each proxy adds its own entry).
void add_via(boost::beast::http::fields& f);

}  // namespace rebound::http
