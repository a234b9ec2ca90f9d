#pragma once
/** Hop-by-hop fields (RFC 9110 section 7.6.1): they describe one connection, so a proxy
    removes them in both directions and sets its own per hop. */
#include "proxy/wire/field_list.hpp"
#include "proxy/wire/head_fields.hpp"

#include <boost/beast/http/fields.hpp>

#include <string_view>

namespace rebound::http {

/** Removes Connection and every field it names, Proxy-Connection, Keep-Alive, TE,
    Trailer (rebound re-frames bodies, so what a Trailer field announces may not follow),
    Transfer-Encoding (each hop frames its own body), Upgrade, Proxy-Authorization and
    Proxy-Authenticate. */
void strip_hop_by_hop(head_fields& f);
void strip_hop_by_hop(field_list& f);

/// Appends `1.1 rebound` (`1.0 rebound` for a message received as HTTP/1.0) to Via
/// (RFC 9110 section 7.6.3: each proxy adds its own entry, naming the version it received),
/// with ` (token)` when a token is given: requests carry the instance's loop-detection token.
void add_via(head_fields& f, unsigned received_version = 11, std::string_view token = {});
void add_via(field_list& f, unsigned received_version = 11, std::string_view token = {});

/** Whether a trailer field may be forwarded as a trailer. Fields that frame or route the
    message, carry credentials, or modify how it is handled are not allowed in trailers
    (RFC 9110 section 6.5.1) and are dropped. */
bool forwardable_trailer(boost::beast::http::field name, std::string_view name_string);

}  // namespace rebound::http
