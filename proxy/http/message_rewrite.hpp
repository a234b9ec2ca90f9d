#pragma once
/** How a proxy rewrites message heads between its two hops (RFC 9110 section 7.6, RFC 9112
    section 3.2): origin-form target, Host, hop-by-hop fields, Via, framing. */
#include "proxy/wire/bounded_parser.hpp"
#include "proxy/plan/request_target.hpp"

#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>

#include <string>
#include <string_view>

namespace rebound::upstream {
class tls_client;
}


namespace rebound::http {

namespace bhttp = boost::beast::http;

/// The request head as the upstream hop must see it.
void prepare_upstream_request(request_message<bhttp::buffer_body>& req,
                              const request_parser& p, const plan::request_target& t,
                              std::string_view via_token = {});

/// The client's side of a response: what its request was, and what this layer did for it.
struct client_side {
  bool is_head = false;
  unsigned version = 11;
  bool keep_alive = false;  ///< the client connection may carry another request afterwards
  unsigned attempts = 1;
  bool gave_up = false;  ///< this layer retried and gave up
};

/** The response head as the client hop must see it (its fields edited in place, written by
    wire_head.hpp's append_head as HTTP/1.1), with `Rebound-Attempts` (and with
    `gave_up`, `Rebound-Retried: exhausted`: this layer retried and gave up, retry/layers.hpp);
    returns whether the client connection can stay open after this response. A
    `Rebound-Retried` from a layer below is passed on: the caller above learns that some layer
    spent its retries. */
bool prepare_client_response(response_parser& p, const client_side& client);

/** The head of an upstream's 101 to WebSocket as the client hop must see it: hop-by-hop
    fields stripped but for the switch itself (`Connection: Upgrade`, `Upgrade: websocket`),
    the Sec-WebSocket-* fields kept, Via and `Rebound-Attempts` added. No framing field: the
    bytes after it are the new protocol's. */
void prepare_switch_response(response_parser& p, unsigned attempts);

}  // namespace rebound::http
