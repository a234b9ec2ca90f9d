#pragma once
/** Forwarding loops: a request whose target is rebound itself would be forwarded to itself
    hop after hop until descriptors and memory run out. Two checks, both answered with 508
    `loop_detected` before anything is sent:

    - the target is rebound's own proxy listener (an IP literal or `localhost` on its port);
    - the request already carries this instance's Via entry: it went out through this very
      process once (a name that resolves to rebound, another proxy in between). Each process
      marks the requests it forwards with a random token of its own, so a chain of distinct
      rebound instances is not mistaken for a loop. */
#include "config/config.hpp"

#include <boost/beast/http/fields.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace rebound::http {

/// A token that tells this process's Via entries from other instances': 8 hex digits.
std::string new_instance_token();

/// Whether any Via field holds rebound's entry with `token` (`rebound (TOKEN)`).
bool via_names_instance(const boost::beast::http::fields& f, std::string_view token);

/** Whether `connect_host`:`port` is rebound's proxy listener `listen`. A listener on the
    unspecified address (0.0.0.0, ::) counts as every loopback and unspecified address. */
bool targets_listener(std::string_view connect_host, std::uint16_t port, const config::endpoint& listen);

}  // namespace rebound::http
