#include "proxy/http/client_session.hpp"

#include "proxy/http/forward.hpp"
#include "proxy/http/framing.hpp"
#include "proxy/http/request_target.hpp"

#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>

#include <array>

namespace rebound::http {
namespace {

/// The dependency name and policy for a target: a configured dependency, or the defaults
/// under the name `host:port` (SPEC section 2).
struct resolved {
  std::string name;
  const config::policy* policy = nullptr;
  bool known = false;
};

resolved resolve(const config::config& cfg, const request_target& t) {
  if (auto const* d = cfg.find_dependency(t.host, t.port)) return {d->name, &d->effective, true};
  return {t.host + ":" + std::to_string(t.port), &cfg.defaults, false};
}

/// The answer to a request head Beast refused, or nullopt when there is nobody to answer.
std::optional<error_reply> reply_for_read_error(const error_code& ec) {
  if (ec == bhttp::error::header_limit)
    return error_reply{431, error_type::bad_request, "request head too large", {}, 0};
  if (ec == bhttp::error::body_limit)
    return error_reply{413, error_type::bad_request, "request body too large", {}, 0};
  if (ec == bhttp::error::partial_message) return std::nullopt;  // the client went away mid-head
  if (ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category())
    return error_reply{400, error_type::bad_request, "malformed request: " + ec.message(), {}, 0};
  return std::nullopt;  // timeout, reset, abort: no one is listening
}

/** Half-closes, then reads and drops what the client still sends for a moment before
    closing: closing with unread bytes makes the kernel send a reset, which can destroy an
    error answer the client has not read yet (the reason for nginx's lingering_close). */
net::awaitable<void> lingering_close(beast::tcp_stream& client) {
  error_code ec;
  client.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (!ec && client.socket().is_open()) {
    std::array<char, 4096> sink;
    std::size_t total = 0;
    client.expires_after(std::chrono::seconds(1));
    while (total < (1u << 20)) {
      auto [rec, n] = co_await client.async_read_some(net::buffer(sink), use_tuple);
      if (rec) break;
      total += n;
    }
  }
  client.close();
}

}  // namespace

net::awaitable<void> run_client_session(session_context ctx, tcp::socket socket) {
  beast::tcp_stream client(std::move(socket));
  error_code ignored;
  client.socket().set_option(tcp::no_delay(true), ignored);
  session_guard guard(*ctx.sessions, client);
  auto const& cfg = *ctx.cfg;
  auto const idle = cfg.limits.idle_timeout;
  beast::flat_buffer buffer;

  for (;;) {
    if (ctx.sessions->draining()) break;
    guard.set_idle(true);
    bhttp::request_parser<bhttp::buffer_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(cfg.limits.max_request_head));
    if (cfg.limits.max_request_body > 0) parser.body_limit(cfg.limits.max_request_body);
    else parser.body_limit(boost::none);
    client.expires_after(idle);
    auto [ec, n] = co_await bhttp::async_read_header(client, buffer, parser, use_tuple);
    guard.set_idle(false);
    if (ec) {
      if (auto reply = reply_for_read_error(ec)) co_await send_error(client, *reply, false, idle);
      break;
    }
    auto& req = parser.get();

    if (auto problem = check_request_framing(req.base(), req.version())) {
      error_reply const reply{problem->status, error_type::bad_request, problem->message, {}, 0};
      co_await send_error(client, reply, false, idle);
      break;
    }
    bool const is_connect = req.method() == bhttp::verb::connect;
    auto const target = is_connect
        ? parse_connect_target(req.target())
        : parse_request_target(req.method_string(), req.target(), req[bhttp::field::host],
                               req.count(bhttp::field::host), req.version());
    if (!target.value) {
      error_reply const reply{400, error_type::bad_request, target.error, {}, 0};
      co_await send_error(client, reply, false, idle);
      break;
    }
    auto const& t = *target.value;
    if (t.scheme == "https") {
      error_reply const reply{400, error_type::bad_request,
                              "https:// targets travel in a CONNECT tunnel; to have rebound retry them, call http:// "
                              "and configure the dependency's origin: https://...",
                              {}, 0};
      co_await send_error(client, reply, parser.is_done(), idle);
      if (!parser.is_done()) break;
      continue;
    }
    auto const r = resolve(cfg, t);
    if (!r.known && cfg.unknown_hosts == config::unknown_hosts_policy::deny) {
      error_reply const reply{403, error_type::unknown_host, "host " + t.authority + " is not a configured dependency",
                              r.name, 0};
      co_await send_error(client, reply, parser.is_done(), idle);
      if (!parser.is_done()) break;
      continue;
    }
    if (is_connect) {
      co_await run_tunnel(ctx, client, buffer, t, r.name, *r.policy);
      co_return;
    }
    if (!co_await forward(ctx, guard, client, buffer, parser, t, r.name, *r.policy)) break;
  }
  co_await lingering_close(client);
}

}  // namespace rebound::http
