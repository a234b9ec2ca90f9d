#pragma once
/** HTTP/1.1's protocol upgrade (RFC 9110 section 7.8) as rebound relays it: WebSocket
    (RFC 6455 section 4), the one protocol a route may let through (`upgrades:`). What a
    request asks for, whether its handshake is well formed, which fields cross the hop, and
    whether an upstream's 101 switched to what was asked. Every way in that meets an Upgrade
    field asks here. */
#include "proxy/wire/field_list.hpp"
#include "proxy/wire/head_fields.hpp"

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>

#include <string>
#include <string_view>

namespace rebound::http {

/// The only protocol relayed; its token as Upgrade names it (RFC 6455 section 11.2).
inline constexpr std::string_view websocket_protocol = "websocket";

/// What a request's Upgrade field asks of rebound.
struct upgrade_ask {
  enum class kind {
    none,       ///< no upgrade: a plain request (an Upgrade rebound ignores is stripped as hop-by-hop)
    websocket,  ///< a well-formed WebSocket handshake: relayed when the route allows it
    malformed,  ///< a WebSocket handshake that breaks RFC 6455 section 4.1: 400 with `why`
  } what = kind::none;
  std::string why;
};

/** Reads the upgrade a request head asks for. Ignored, so the request goes on as plain
    HTTP/1.1 without it (RFC 9110 section 7.8 lets a server ignore Upgrade): an Upgrade that
    `Connection` does not name, one in an HTTP/1.0 request, and one that offers no
    `websocket` (h2c among them: the proxy port speaks HTTP/2 by prior knowledge). A
    WebSocket offer must be a GET without a body, with one Sec-WebSocket-Key that is 16
    bytes in base64 and one numeric Sec-WebSocket-Version. */
upgrade_ask read_upgrade(const request_head& req);

/** After strip_hop_by_hop: the fields that make a message an upgrade on the next hop,
    `Connection: Upgrade` and `Upgrade: websocket`. The Sec-WebSocket-* fields are
    end-to-end and stay as they came. */
void carry_websocket_upgrade(head_fields& f);
void carry_websocket_upgrade(field_list& f);

/// Whether an upstream's 101 (its fields) switched to WebSocket as asked; empty when it did, else
/// why not (a 101 without `Upgrade: websocket` and `Connection: upgrade` is not that switch).
std::string switch_mismatch(const field_list& res);

}  // namespace rebound::http
