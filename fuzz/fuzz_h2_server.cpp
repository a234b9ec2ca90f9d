// Bytes after the HTTP/2 preface into rebound's server connection (h2/server_connection.cpp),
// over a real loopback socket: frames, HPACK, flow control, stream limits and the bounds of
// issue 29 (connection buffer, rapid reset, HPACK bombs) driven by whatever a client sends.
// Every input must end with the connection served to its end and every handler finished:
// never a crash, a leak, an exception escaping the coroutine, or a connection left hanging.
#include "proxy/h2/server_connection.hpp"
#include "proxy/net.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>

namespace net = rebound::net;
using tcp = net::ip::tcp;
using namespace std::chrono_literals;

namespace {

/// Answers every request with 200 and its own body back, and trailers: both directions of
/// DATA and a trailing HEADERS get exercised.
net::awaitable<rebound::h2::message> echo(rebound::h2::message request) {
  rebound::h2::message answer;
  answer.head = {{":status", "200"}, {"content-type", "application/grpc"}};
  answer.body = std::move(request.body);
  answer.trailers = {{"grpc-status", "0"}};
  co_return answer;
}

/// What the client side does: sends the input, half-closes, and reads until the server is done.
net::awaitable<void> client(rebound::tcp_socket& s, std::string_view input) {
  auto [wec, wn] = co_await net::async_write(s, net::buffer(input.data(), input.size()),
                                             net::as_tuple(net::use_awaitable));
  boost::system::error_code ignored;
  s.shutdown(rebound::tcp_socket::shutdown_send, ignored);
  std::array<char, 16 * 1024> sink;
  for (;;) {
    auto [ec, n] = co_await s.async_read_some(net::buffer(sink), net::as_tuple(net::use_awaitable));
    if (ec) break;
  }
  (void)wec;
  (void)wn;
}

/// The server side: serves the connection to its end, then closes it.
net::awaitable<void> server_side(rebound::beast::tcp_stream& server, boost::beast::flat_buffer& preread,
                                 const rebound::h2::server_limits& limits, const bool& draining, bool& served) {
  co_await rebound::h2::serve(server, preread, limits, &echo, {&draining, nullptr});
  served = true;
  boost::system::error_code ignored;
  server.socket().shutdown(rebound::tcp_socket::shutdown_both, ignored);
  server.close();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  net::io_context ioc{1};
  boost::system::error_code ec;
  rebound::tcp_acceptor acceptor(ioc, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
  rebound::tcp_socket c(ioc);
  c.connect(acceptor.local_endpoint(), ec);
  if (ec) return 0;  // the machine is out of sockets: not the code under test
  rebound::beast::tcp_stream server(acceptor.accept(ec));
  if (ec) return 0;

  // The session read the preface before it chose HTTP/2 (http/client_session.cpp): it comes
  // in `preread`; the input is everything the client sends after it.
  boost::beast::flat_buffer preread;
  auto const preface = rebound::h2::client_preface;
  std::memcpy(preread.prepare(preface.size()).data(), preface.data(), preface.size());
  preread.commit(preface.size());

  rebound::h2::server_limits limits;
  limits.max_request_body = 64 * 1024;  // small enough for the input to cross it
  limits.connection_buffer = 128 * 1024;
  limits.max_header_list = 16 * 1024;
  limits.idle_timeout = 2s;
  limits.body_timeout = 2s;
  bool const draining = false;
  bool served = false;
  net::co_spawn(
      ioc, server_side(server, preread, limits, draining, served),
      [](std::exception_ptr e) {
        if (e) std::abort();  // no exception on the data path may reach io_context::run()
      });
  std::string_view const input(reinterpret_cast<const char*>(data), size);
  net::co_spawn(ioc, client(c, input), net::detached);
  ioc.run_for(8s);
  if (!served) std::abort();  // the connection hung: a client's half-close must end it
  return 0;
}
