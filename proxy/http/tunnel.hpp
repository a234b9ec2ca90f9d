#pragma once
/** Byte tunnels: a CONNECT's, and a connection upgraded after an upstream's 101
    (websocket.hpp). rebound cannot see inside either, so once bytes may flow nothing is
    ever retried or replayed; both run the same pump. */
#include "proxy/plan/dependency_route.hpp"
#include "proxy/plan/request_target.hpp"
#include "proxy/runtime/session_context.hpp"
#include "proxy/upstream/connection.hpp"

#include <boost/beast/core/flat_buffer.hpp>

#include <chrono>
#include <cstdint>
#include <string_view>

namespace rebound::runtime {
class relay_buffers;
}

namespace rebound::http {

/// One end of a tunnel: its stream, and the bytes already read from it past a head, which
/// belong to the tunnel and go first.
template <class Stream>
struct tunnel_end {
  Stream& stream;
  beast::flat_buffer& read_ahead;
};

/// How a tunnel ended, for its log line and metrics.
struct tunnel_totals {
  std::uint64_t to_upstream = 0;  ///< bytes the client sent through
  std::uint64_t to_client = 0;    ///< bytes the upstream sent through
  /// Who ended it: `client` or `upstream` (its close came first), `idle_timeout`, `error`.
  std::string_view closed_by = "client";
  std::chrono::steady_clock::duration lasted{};
};

/** Copies bytes both ways until both directions have ended or neither has moved for
    `idle`. An end of stream is passed on as a half-close, so the other direction keeps
    flowing; an error tears both down. A direction holds a buffer (from `buffers`, null: the
    heap) only while its side has bytes to read, so an idle tunnel costs its sockets and two
    small coroutine frames. Both streams are closed when it returns. */
net::awaitable<tunnel_totals> pump_tunnel(tunnel_end<tcp_socket> client, tunnel_end<upstream::connection> up,
                                          std::chrono::milliseconds idle, runtime::relay_buffers* buffers);

/// What a tunnel's `tunnel_closed` log line names besides its totals.
struct tunnel_label {
  std::string_view protocol;  ///< `connect`, or the upgrade's (`websocket`)
  std::string_view correlation_id;
  std::string_view dependency;
  std::string_view path;  ///< an upgrade's path, without its query (R-9); empty for CONNECT
};

/// the one line a tunnel logs, when it ends: how long, how many bytes each way, who closed.
void log_tunnel_closed(const runtime::session_context& ctx, const tunnel_label& label, const tunnel_totals& totals);

/// A CONNECT as the tunnel needs it.
struct tunnel_request {
  const plan::request_target& target;
  const plan::dependency_route& route;
  std::string_view correlation_id;  ///< R-10's, from the CONNECT head; empty: none given
};

/** Relays a CONNECT tunnel: connects (retrying the connect), answers 200, then pumps bytes
    until both directions end or the tunnel is idle for `idle_timeout`. */
net::awaitable<void> run_tunnel(const runtime::session_context& ctx, beast::tcp_stream& client,
                                beast::flat_buffer& buffer, const tunnel_request& tunnel);

}  // namespace rebound::http
