#include "proxy/admin/admin_server.hpp"

#include "config/config.hpp"
#include "proxy/admin/api_support.hpp"
#include "proxy/admin/host_guard.hpp"
#include "proxy/admin/page_assets.hpp"
#include "proxy/admin/task_api.hpp"
#include "proxy/http/client_session.hpp"
#include "proxy/store/task_store.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include "config/describe.hpp"
#include "proxy/wire/bounded_parser.hpp"
#include "proxy/observe/json.hpp"

#include <cstdio>
#include <optional>

namespace rebound::admin {
namespace {

namespace bhttp = boost::beast::http;

/// GET /dependencies: per dependency, the budget window and the breaker (SPEC 7).
std::string dependencies_json(const std::vector<retry::dependency_guard::snapshot>& all) {
  std::string out;
  observe::json_writer w(out);
  w.open_object().key("dependencies").open_array();
  for (auto const& s : all) {
    auto const left = s.budget.allowed > s.budget.retries ? s.budget.allowed - s.budget.retries : 0;
    w.open_object().field("name", s.name);
    w.field("requests_in_window", s.budget.requests).field("retries_in_window", s.budget.retries);
    w.field("retries_allowed", s.budget.allowed).field("budget_left", left);
    w.key("budget_utilization").number(s.budget.utilization(), "%.4f");
    w.key("breaker").open_object().field("state", retry::to_string(s.state)).field("mode", retry::to_string(s.mode));
    w.field("in_state_ms", s.in_state.count()).close_object();
    // Issue 51: the limit and what is in flight, all workers' lanes added up.
    w.key("concurrency").open_object().field("mode", retry::to_string(s.concurrency));
    if (s.concurrency != retry::concurrency_mode::off) {
      w.field("limit", s.limit.limit).field("in_flight", s.limit.in_flight);
      if (s.concurrency == retry::concurrency_mode::adaptive) {
        w.key("min_rtt_ms");
        if (s.limit.min_rtt)
          w.number(std::chrono::duration<double, std::milli>(*s.limit.min_rtt).count(), "%.3f");
        else
          w.null();
        w.field("probing", s.limit.probing);
      }
    }
    w.close_object();
    // Issue 50: the addresses of its names passed over now, and for how much longer.
    w.key("ejected_addresses").open_array();
    for (auto const& e : s.ejected) {
      w.open_object().field("address", e.address.to_string()).field("ejections", e.times);
      w.field("remaining_ms", std::chrono::duration_cast<std::chrono::milliseconds>(e.remaining).count()).close_object();
    }
    w.close_array();
    w.close_object();
  }
  w.close_array().close_object();
  return out += '\n';
}

bhttp::response<bhttp::string_body> answer(const http::request_message<bhttp::string_body>& req, const admin_state& state) {
  auto make = [&](bhttp::status s, std::string_view type, std::string body) {
    bhttp::response<bhttp::string_body> res{s, req.version()};
    res.set(bhttp::field::content_type, type);
    res.set(bhttp::field::cache_control, "no-store");
    res.body() = std::move(body);
    res.keep_alive(req.keep_alive());
    res.prepare_payload();
    return res;
  };
  auto const target = req.target();
  auto const path = target.substr(0, target.find('?'));
  if (req.method() != bhttp::verb::get && req.method() != bhttp::verb::head)
    return make(bhttp::status::method_not_allowed, "text/plain", "method not allowed\n");
  if (path == "/healthz") return make(bhttp::status::ok, "text/plain", "ok\n");
  if (path == "/readyz") {
    if (!state.ready.load()) return make(bhttp::status::service_unavailable, "text/plain", "not ready\n");
    // Handed-over calls would be refused (503 store_unavailable): say so, and why.
    if (auto why = state.store ? state.store->unavailable() : std::nullopt)
      return make(bhttp::status::service_unavailable, "text/plain", "not ready: store unavailable: " + *why + "\n");
    // New tasks and keys would be refused (507 store_full) until deliveries make room.
    if (auto why = state.store ? state.store->full() : std::nullopt)
      return make(bhttp::status::service_unavailable, "text/plain", "not ready: store full: " + *why + "\n");
    if (auto how = state.store ? state.store->detail() : std::nullopt)
      return make(bhttp::status::ok, "text/plain", "ready\nstore: " + *how + "\n");
    return make(bhttp::status::ok, "text/plain", "ready\n");
  }
  if (path == "/dependencies" && state.guards)
    return make(bhttp::status::ok, "application/json", dependencies_json(state.guards->snapshots()));
  if (path == "/metrics" && state.metrics) {
    if (state.guards) state.guards->publish();
    return make(bhttp::status::ok, "text/plain; version=0.0.4; charset=utf-8", state.metrics->scrape());
  }
  if (path == "/config" && state.cfg)
    return make(bhttp::status::ok, "application/json", config::effective_config_json(*state.cfg));
  if (path == "/") {
    auto res = make(bhttp::status::found, "text/plain", "the admin page is at /ui\n");
    res.set(bhttp::field::location, "/ui");
    return res;
  }
  for (auto const& asset : page_assets()) {
    if (path != asset.path) continue;
    std::string body(asset.body);
    // The page hides the task store's parts when there is none, rather than ask and log a 404.
    if (constexpr std::string_view marker = "@store@"; asset.path == "/ui")
      if (auto at = body.find(marker); at != std::string::npos)
        body.replace(at, marker.size(), state.store ? "yes" : "no");
    auto res = make(bhttp::status::ok, std::string(asset.content_type) + "; charset=utf-8", std::move(body));
    // Its own files and its own API only: nothing inline, nothing from elsewhere, never framed.
    res.set("Content-Security-Policy",
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
    res.set("X-Content-Type-Options", "nosniff");
    res.set("Referrer-Policy", "no-referrer");
    return res;
  }
  return make(bhttp::status::not_found, "text/plain",
              "not found; try /ui (the admin page), /healthz, /readyz, /metrics, /dependencies or /config\n");
}

/// The status for a request the admin port could not read, or nullopt when nobody is there.
std::optional<bhttp::status> refusal_status(const error_code& ec) {
  if (ec == bhttp::error::header_limit) return bhttp::status::request_header_fields_too_large;
  if (ec == bhttp::error::body_limit) return bhttp::status::payload_too_large;
  if (ec == bhttp::error::buffer_overflow) return bhttp::status::bad_request;
  if (ec == bhttp::error::partial_message || ec == bhttp::error::end_of_stream) return std::nullopt;
  if (ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category()) return bhttp::status::bad_request;
  return std::nullopt;
}

/** Admin connections open at once. Each holds at most a head before its token is checked
    (the write's body only after), so the cap bounds what unauthenticated clients can hold;
    past it a new connection is closed at once, and a probe gets in as soon as one ends. */
constexpr std::size_t max_admin_connections = 128;

/// Counts an admin connection while it lives; the listener and its sessions share one thread.
struct admin_slot {
  explicit admin_slot(std::shared_ptr<std::size_t> n) : open(std::move(n)) { ++*open; }
  ~admin_slot() { --*open; }
  admin_slot(const admin_slot&) = delete;
  admin_slot& operator=(const admin_slot&) = delete;
  std::shared_ptr<std::size_t> open;
};

net::awaitable<void> admin_session(tcp_socket socket, const admin_state& state, const observe::logger& log,
                                   std::shared_ptr<std::size_t> open) {
  admin_slot const slot(std::move(open));
  beast::tcp_stream stream(std::move(socket));
  constexpr std::uint32_t head_limit = 16 * 1024;
  // Bounds what a chunk-size line or a trailer section can make the buffer hold.
  beast::flat_buffer buffer(head_limit + 64 * 1024);
  for (;;) {
    http::bounded_parser<true, bhttp::string_body> parser;
    parser.header_limit(head_limit);
    // A task submitted through the API carries its body in a JSON string: room for
    // async.max_body with escapes, and 64 KiB for everything else.
    parser.body_limit(state.store ? 2 * state.cfg->async.max_body + 64 * 1024 : 64 * 1024);
    stream.expires_after(std::chrono::seconds(30));
    auto [ec, n] = co_await bhttp::async_read_header(stream, buffer, parser, use_tuple);
    // Held across the awaits: a reload may replace state.cfg meanwhile.
    auto const cfg = state.cfg;
    // Before anything else, reads too: a page that rebound a name to this port is refused here.
    if (auto why = ec ? std::nullopt : foreign_request(parser.get(), *cfg)) {
      auto refused = api::answers(parser.get()).error(bhttp::status::forbidden, "forbidden", *why);
      refused.keep_alive(parser.is_done() && parser.get().keep_alive());
      auto [wec, wn] = co_await bhttp::async_write(stream, refused, use_tuple);
      if (wec || !refused.keep_alive()) break;
      continue;
    }
    if (!ec && state.store && is_task_api(parser.get())) {
      // The token is checked on the head: an unauthorized write is answered before its body
      // is read; a body still on the wire then ends the connection.
      if (auto refused = refuse_unauthorized(parser.get(), *cfg)) {
        if (refused->result() == bhttp::status::service_unavailable)
          log.error("admin_token_unreadable",
                    {{"file", cfg->admin_token_file},
                     {"message", "admin.token_file cannot be read (removed, emptied, or not a file): writes are "
                                 "refused with 503 until it can"}});
        refused->keep_alive(parser.is_done() && parser.get().keep_alive());
        auto [wec, wn] = co_await bhttp::async_write(stream, *refused, use_tuple);
        if (wec || !refused->keep_alive()) break;
        continue;
      }
    }
    if (!ec && !parser.is_done()) std::tie(ec, n) = co_await bhttp::async_read(stream, buffer, parser, use_tuple);
    if (ec) {
      // A client that sent something malformed learns why; one that went away or stalled does not.
      if (auto status = refusal_status(ec)) {
        bhttp::response<bhttp::string_body> res{*status, 11};
        res.set(bhttp::field::content_type, "text/plain");
        res.body() = "malformed or oversized request: " + ec.message() + "\n";
        res.keep_alive(false);
        res.prepare_payload();
        stream.expires_after(std::chrono::seconds(5));
        co_await bhttp::async_write(stream, res, use_tuple);
      }
      break;
    }
    // Not a conditional expression: GCC 12 miscompiles a co_await inside one.
    bhttp::response<bhttp::string_body> res;
    if (state.store && is_task_api(parser.get())) {
      task_api_context const api{*state.store, *state.store, *cfg, log, state.admin_base};
      res = co_await task_api_answer(parser.get(), api);
    } else {
      res = answer(parser.get(), state);
    }
    auto [wec, wn] = co_await bhttp::async_write(stream, res, use_tuple);
    if (wec || !res.keep_alive()) break;
  }
  // A write refused before its body was read leaves that body on the wire: closed at once,
  // the kernel's reset could destroy the answer before the client reads it.
  co_await http::lingering_close(stream);
}

}  // namespace

net::awaitable<void> run_admin_listener(tcp_acceptor& acceptor, const admin_state& state, const observe::logger& log) {
  auto const open = std::make_shared<std::size_t>(0);
  bool warned = false;
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(use_tuple);
    if (ec) {
      if (!acceptor.is_open() || ec == net::error::operation_aborted) co_return;
      log.warn("accept_failed", {{"listener", "admin"}, {"message", ec.message()}});
      net::steady_timer pause(acceptor.get_executor(), std::chrono::milliseconds(100));
      co_await pause.async_wait(use_tuple);
      continue;
    }
    if (*open >= max_admin_connections) {
      if (!warned) log.warn("admin_connections_full", {{"limit", max_admin_connections}});
      warned = true;
      error_code ignored;
      socket.close(ignored);
      continue;
    }
    warned = false;
    net::co_spawn(acceptor.get_executor(), admin_session(std::move(socket), state, log, open), net::detached);
  }
}

}  // namespace rebound::admin
