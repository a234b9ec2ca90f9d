#include "proxy/http/websocket.hpp"

#include "proxy/http/message_rewrite.hpp"
#include "proxy/http/tunnel.hpp"
#include "proxy/wire/upgrade.hpp"
#include "proxy/wire/wire_head.hpp"
#include "proxy/retry/dependency_guard.hpp"

#include <boost/asio/write.hpp>

namespace rebound::http {

net::awaitable<void> relay_switch(const client_request& r, upstream::exchange& ex, const retry::request_facts& facts,
                                  unsigned attempts) {
  auto const& ctx = r.ctx;
  auto& guard = *r.route.guard;
  auto const idle = ctx.cfg().limits.idle_timeout;
  prepare_switch_response(*ex.response, attempts);
  std::string head;
  append_head(head, *ex.response);
  r.client.expires_after(idle);
  auto [ec, n] = co_await net::async_write(r.client, net::buffer(head), use_tuple);
  // The head went out; the tunnel may live for hours without it.
  ex.response.reset();
  head = std::string();
  tunnel_totals totals;
  if (ec) {
    totals.closed_by = "client";
  } else {
    // The tunnel's own watchdog bounds idleness from here on.
    r.client.expires_never();
    ex.stream->expires_never();
    auto pump = pump_tunnel({r.client.socket(), r.buffer}, {*ex.stream, ex.buffer}, idle, ctx.buffers);
    totals = co_await std::move(pump);
  }
  guard.upgrade_ended(websocket_protocol, "switched", totals.to_upstream, totals.to_client);
  log_tunnel_closed(ctx, {websocket_protocol, facts.correlation_id, facts.dependency, facts.path}, totals);
}

}  // namespace rebound::http
