#pragma once
/** Forwarding loops: a request whose target is rebound itself would be forwarded to itself
    hop after hop until descriptors and memory run out. Two checks, both answered with 508
    `loop_detected` before anything is sent:

    - the target is rebound's own proxy listener (an IP literal or `localhost` on its port);
    - the request already carries this instance's Via entry: it went out through this very
      process once (a name that resolves to rebound, another proxy in between). Each process
      marks the requests it forwards with a random token of its own, so a chain of distinct
      rebound instances is not mistaken for a loop. */
#include "proxy/wire/head_fields.hpp"

#include "config/config.hpp"
#include "proxy/wire/error_reply.hpp"
#include "proxy/plan/request_target.hpp"

#include <boost/beast/http/fields.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rebound::plan {

/// A token that tells this process's Via entries from other instances': 8 hex digits.
std::string new_instance_token();

/// This process's Via entry without its protocol version: `rebound (TOKEN)`.
std::string via_mark(std::string_view token);

/// Whether one Via value holds rebound's entry with `token` (`rebound (TOKEN)`).
bool via_value_names_instance(std::string_view via, std::string_view token);

/// Whether any Via field holds rebound's entry with `token`.
bool via_names_instance(const http::head_fields& f, std::string_view token);

/** Whether `connect_host`:`port` is rebound's proxy listener `listen`. A listener on the
    unspecified address (0.0.0.0, ::) counts as every loopback and unspecified address. */
bool targets_listener(std::string_view connect_host, std::uint16_t port, const config::endpoint& listen);

/** The 508 every way in (HTTP/1.1, CONNECT, gRPC, the inbound listener) answers a loop with,
    or nullopt: `t` goes to `listen`, or the request passed through this process already
    (`passed_here`, from via_names_instance or via_value_names_instance). */
std::optional<http::error_reply> refuse_loop(const request_target& t, bool passed_here, const config::endpoint& listen);

}  // namespace rebound::plan
