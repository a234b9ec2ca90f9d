#include "proxy/admin/admin_server.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

namespace rebound::admin {
namespace {

namespace bhttp = boost::beast::http;

bhttp::response<bhttp::string_body> answer(const bhttp::request<bhttp::string_body>& req, const admin_state& state) {
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
    return state.ready.load() ? make(bhttp::status::ok, "text/plain", "ready\n")
                              : make(bhttp::status::service_unavailable, "text/plain", "not ready\n");
  }
  return make(bhttp::status::not_found, "text/plain", "not found; try /healthz or /readyz\n");
}

net::awaitable<void> admin_session(tcp::socket socket, const admin_state& state) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(16 * 1024);
    parser.body_limit(64 * 1024);
    stream.expires_after(std::chrono::seconds(30));
    auto [ec, n] = co_await bhttp::async_read(stream, buffer, parser, use_tuple);
    if (ec) break;
    auto res = answer(parser.get(), state);
    auto [wec, wn] = co_await bhttp::async_write(stream, res, use_tuple);
    if (wec || !res.keep_alive()) break;
  }
  error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

}  // namespace

net::awaitable<void> run_admin_listener(tcp::acceptor& acceptor, const admin_state& state, const observe::logger& log) {
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(use_tuple);
    if (ec) {
      if (!acceptor.is_open() || ec == net::error::operation_aborted) co_return;
      log.warn("accept_failed", {{"listener", "admin"}, {"message", ec.message()}});
      net::steady_timer pause(acceptor.get_executor(), std::chrono::milliseconds(100));
      co_await pause.async_wait(use_tuple);
      continue;
    }
    net::co_spawn(acceptor.get_executor(), admin_session(std::move(socket), state), net::detached);
  }
}

}  // namespace rebound::admin
