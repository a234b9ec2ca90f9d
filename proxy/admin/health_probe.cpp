#include "proxy/admin/health_probe.hpp"

#include "proxy/net.hpp"
#include "proxy/wire/bounded_parser.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

namespace rebound::admin {
namespace {

namespace bhttp = beast::http;

net::awaitable<void> ask(tcp::endpoint at, std::string target, std::chrono::milliseconds timeout, probe_result& out) {
  beast::tcp_stream stream(co_await net::this_coro::executor);
  stream.expires_after(timeout);
  if (auto [ec] = co_await stream.async_connect(at, use_tuple); ec) {
    out.detail = ec == beast::error::timeout ? "timed out" : ec.message();
    co_return;
  }
  http::request_message<bhttp::empty_body> req{bhttp::verb::get, target, 11};
  // RFC 9112 3.2: an IPv6 literal in brackets (the admin port's Host rule refuses it bare).
  auto const address = at.address().to_string();
  req.set(bhttp::field::host, at.address().is_v6() ? "[" + address + "]" : address);
  req.set(bhttp::field::user_agent, "rebound-health");
  req.set(bhttp::field::connection, "close");
  if (auto [ec, n] = co_await bhttp::async_write(stream, req, use_tuple); ec) {
    out.detail = ec == beast::error::timeout ? "timed out" : ec.message();
    co_return;
  }
  beast::flat_buffer buffer;
  http::bounded_parser<false, bhttp::string_body> parser;
  parser.header_limit(16 * 1024);
  parser.body_limit(64 * 1024);
  if (auto [ec, n] = co_await bhttp::async_read(stream, buffer, parser, use_tuple); ec) {
    out.detail = ec == beast::error::timeout ? "timed out" : "no HTTP answer: " + ec.message();
    co_return;
  }
  auto const& res = parser.get();
  out.healthy = res.result_int() == 200;
  out.detail = std::to_string(res.result_int()) + " " + std::string(res.reason());
}

}  // namespace

probe_result probe_admin(std::string host, unsigned short port, const std::string& path,
                         std::chrono::milliseconds timeout) {
  boost::system::error_code ec;
  auto address = net::ip::make_address(host, ec);
  if (ec) return {false, "\"" + host + "\" is not an IP address"};
  if (address.is_unspecified())
    address = address.is_v4() ? net::ip::address(net::ip::address_v4::loopback())
                              : net::ip::address(net::ip::address_v6::loopback());
  probe_result out{false, "timed out"};
  net::io_context ioc;
  net::co_spawn(ioc, ask(tcp::endpoint(address, port), path, timeout, out), net::detached);
  ioc.run();
  return out;
}

}  // namespace rebound::admin
