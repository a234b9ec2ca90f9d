#pragma once
/** One client request on its way through the HTTP/1.1 pipeline: the worker's context, the
    connection it came on (with the bytes read past its head), its parsed head, and where it
    goes. The session makes one per request once the head is vetted and routed, and hands it
    to every step (forward, forward_once, hand_over) in place of six loose parameters. */
#include "proxy/net.hpp"
#include "proxy/wire/bounded_parser.hpp"
#include "proxy/plan/dependency_route.hpp"
#include "proxy/plan/request_target.hpp"
#include "proxy/runtime/session_context.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>

namespace rebound::http {

struct client_request {
  const runtime::session_context& ctx;
  beast::tcp_stream& client;
  boost::beast::flat_buffer& buffer;  ///< bytes read past the head
  request_parser& parser;             ///< the head, and the body still to be read
  const plan::request_target& target;
  const plan::dependency_route& route;
};

}  // namespace rebound::http
