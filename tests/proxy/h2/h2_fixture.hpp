#pragma once
// What the HTTP/2 tests share: serve() on 127.0.0.1 port 0, a client connected to it, and a
// runner that ends once the test coroutine is done and every connection has closed.
#include "proxy/h2/client_connection.hpp"
#include "proxy/h2/server_connection.hpp"
#include "proxy/upstream/connect.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <exception>
#include <memory>
#include <string>

namespace h2test {

using namespace rebound;
using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;

inline h2::message grpc_request(std::string path, std::string body = {}, h2::fields trailers = {}) {
  h2::message m;
  m.head = {{":method", "POST"},           {":scheme", "http"}, {":authority", "localhost"}, {":path", std::move(path)},
            {"content-type", "application/grpc"}, {"te", "trailers"}};
  m.body = std::move(body);
  m.trailers = std::move(trailers);
  return m;
}

inline net::awaitable<void> sleep_for(clock::duration d) {
  net::steady_timer t(co_await net::this_coro::executor);
  t.expires_after(d);
  co_await t.async_wait(use_tuple);
}

/** Waits until `done()` holds, looking every 5 ms, for at most `limit`: a wait on an event
    the test cannot be called back for, never a guess at how long it takes. */
template <class Predicate>
net::awaitable<bool> wait_until(Predicate done, clock::duration limit = std::chrono::seconds(5)) {
  auto const until = clock::now() + limit;
  while (!done()) {
    if (clock::now() >= until) co_return false;
    co_await sleep_for(std::chrono::milliseconds(5));
  }
  co_return true;
}

struct test_server {
  test_server(net::io_context& io, h2::request_handler h, h2::server_limits l = {})
      : ioc(io), limits(l), handler(h2::answer_whole(std::move(h))) {}
  test_server(net::io_context& io, h2::handlers h, h2::server_limits l = {})
      : ioc(io), limits(l), handler(std::move(h)) {}
  net::io_context& ioc;
  rebound::tcp_acceptor acceptor{ioc, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0)};
  h2::server_limits limits;
  h2::handlers handler;
  bool draining = false;
  int accepted = 0;
  int sessions_ended = 0;

  std::uint16_t port() const { return acceptor.local_endpoint().port(); }

  struct ignore {
    void operator()(std::exception_ptr e) const {
      if (e) ADD_FAILURE() << "a server coroutine threw";
    }
  };

  void start() { net::co_spawn(ioc, accept_loop(*this), ignore{}); }

  static net::awaitable<void> accept_loop(test_server& s) {
    for (;;) {
      rebound::tcp_socket sock(s.ioc);
      auto [ec] = co_await s.acceptor.async_accept(sock, use_tuple);
      if (ec) co_return;
      ++s.accepted;
      net::co_spawn(s.ioc, session(s, std::make_shared<rebound::tcp_socket>(std::move(sock))), ignore{});
    }
  }

  static net::awaitable<void> session(test_server& s, std::shared_ptr<rebound::tcp_socket> sock) {
    beast::tcp_stream stream(std::move(*sock));
    beast::flat_buffer preread;
    // Named first: by-value arguments inside a co_await expression hit a GCC 12 double free.
    auto op = h2::serve(stream, preread, s.limits, s.handler, {&s.draining, nullptr});
    co_await std::move(op);
    ++s.sessions_ended;
  }
};

inline net::awaitable<std::shared_ptr<h2::client_connection>> connect_to(std::uint16_t port) {
  std::string const host = "127.0.0.1";
  auto opened = co_await upstream::open_connection(host, port, nullptr, clock::now() + 5s);
  if (!opened.conn) co_return nullptr;
  co_return h2::client_connection::start(std::move(*opened.conn));
}

/** Runs `body` to its end, then lets the server drain and every connection close: the
    io_context must run out of work, which proves nothing is left hanging. */
inline void run(net::io_context& ioc, net::awaitable<void> body, test_server* server,
                clock::duration limit = 15s) {
  bool done = false;
  net::co_spawn(ioc, std::move(body), [&](std::exception_ptr e) {
    done = true;
    if (e) ADD_FAILURE() << "the test coroutine threw";
    if (server) {
      server->draining = true;
      error_code ignored;
      server->acceptor.close(ignored);
    }
  });
  ioc.run_for(limit);
  EXPECT_TRUE(done);
  EXPECT_TRUE(ioc.stopped()) << "a connection or coroutine outlived the test";
}

}  // namespace h2test
