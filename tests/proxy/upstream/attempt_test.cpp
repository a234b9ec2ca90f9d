// The one exchange with an upstream (run_attempt), driven on loopback sockets against a
// scripted server in the same io_context: what goes out, which connection it rides, and how
// each way an upstream can fail becomes an attempt failure.
#include "proxy/upstream/attempt.hpp"
#include "proxy/net.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>

#include <gtest/gtest.h>

#include <poll.h>

#include <string>
#include <vector>

namespace net = rebound::net;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using namespace rebound;
using namespace std::chrono_literals;

namespace attempt_test {
namespace {

/// What the scripted server does on one accepted connection, once it has read a whole request.
struct reply {
  std::string bytes;    ///< written as they are
  bool silent = false;  ///< say nothing and keep the connection open
};

/** A server on 127.0.0.1 that answers its n-th connection with `replies[n]`, then closes it.
    `requests` gets each connection's request as raw bytes (head and Content-Length body). */
struct scripted_server {
  explicit scripted_server(net::io_context& io) : ioc(io) {}
  net::io_context& ioc;
  rebound::tcp_acceptor acceptor{ioc, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0)};
  std::vector<reply> replies;
  std::vector<std::string> requests;
  std::vector<std::shared_ptr<rebound::tcp_socket>> held;  ///< silent connections, kept open

  std::uint16_t port() const { return acceptor.local_endpoint().port(); }

  void start() { net::co_spawn(ioc, serve(), net::detached); }

  net::awaitable<void> serve() {
    for (auto const& r : replies) {
      auto sock = std::make_shared<rebound::tcp_socket>(ioc);
      auto [aec] = co_await acceptor.async_accept(*sock, net::as_tuple(net::use_awaitable));
      if (aec) co_return;
      std::string in;
      auto [rec, head_end] =
          co_await net::async_read_until(*sock, net::dynamic_buffer(in), "\r\n\r\n", net::as_tuple(net::use_awaitable));
      if (rec) co_return;
      std::size_t length = 0;
      if (auto at = in.find("Content-Length: "); at != std::string::npos && at < head_end)
        length = std::stoul(in.substr(at + 16));
      if (in.size() < head_end + length) {
        auto [bec, bn] = co_await net::async_read(*sock, net::dynamic_buffer(in),
                                                  net::transfer_exactly(head_end + length - in.size()),
                                                  net::as_tuple(net::use_awaitable));
        if (bec) co_return;
      }
      requests.push_back(in);
      if (r.silent) {
        held.push_back(sock);
        continue;
      }
      if (!r.bytes.empty()) co_await net::async_write(*sock, net::buffer(r.bytes), net::as_tuple(net::use_awaitable));
      boost::system::error_code ignored;
      sock->shutdown(rebound::tcp_socket::shutdown_send, ignored);
      sock->close(ignored);
    }
  }
};

rebound::http::request_message<bhttp::buffer_body> post_request(std::size_t body_size) {
  rebound::http::request_message<bhttp::buffer_body> req{bhttp::verb::post, "/orders", 11};
  req.set(bhttp::field::host, "orders.internal");
  req.content_length(body_size);
  return req;
}

/// Runs one attempt to completion on `ioc`.
upstream::attempt_result run(net::io_context& ioc, upstream::pool& p, const std::string& host, std::uint16_t port,
                             rebound::http::request_message<bhttp::buffer_body>& req, std::string_view body, bool may_reuse,
                             std::chrono::milliseconds within = 5s, bool upgrade = false) {
  static const std::string key = "http://orders.internal:80";
  std::optional<upstream::attempt_result> out;
  upstream::destination to{key, host, port};
  to.may_reuse = may_reuse;
  to.upgrade = upgrade;
  net::co_spawn(ioc, upstream::run_attempt(p, to, {req, body, false}, std::chrono::steady_clock::now() + within),
                [&](std::exception_ptr e, upstream::attempt_result r) {
                  if (e) std::rethrow_exception(e);
                  out.emplace(std::move(r));
                  ioc.stop();  // the scripted server may still wait for a connection that will not come
                });
  ioc.run_for(10s);
  ioc.restart();
  if (!out) return retry::attempt_failure{http::error_type::attempt_timeout, "the test's io_context ran out"};
  return std::move(*out);
}

/// A connection to `server` as the pool would hold it: opened, used, put back.
upstream::connection pooled_connection_to(net::io_context& ioc, const scripted_server& server) {
  rebound::beast::tcp_stream s(ioc);
  s.socket().connect(server.acceptor.local_endpoint());
  return upstream::connection(std::move(s));
}

const std::string body = "{\"item\":42}";
const std::string ok = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";

}  // namespace

TEST(Exchange, ReturnsTheFinalHeadPastInterimAnswersAndTheBodyWentWithTheHead) {
  net::io_context ioc;
  scripted_server server(ioc);
  server.replies = {{"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n" + ok}};
  server.start();
  upstream::pool p(8, 64, 30s);
  auto req = post_request(body.size());
  auto r = run(ioc, p, "127.0.0.1", server.port(), req, body, true);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ((*r)->response->get().result_int(), 200u);
  ASSERT_EQ(server.requests.size(), 1u);
  EXPECT_TRUE(server.requests[0].starts_with("POST /orders HTTP/1.1\r\n")) << server.requests[0];
  EXPECT_TRUE(server.requests[0].ends_with("\r\n\r\n" + body)) << server.requests[0];
}

TEST(Exchange, APooledConnectionFoundDeadIsReplacedOnceAndTheWholeRequestGoesAgain) {
  net::io_context ioc;
  scripted_server server(ioc);
  // The pooled connection is accepted first: the server reads the request and closes without
  // a byte of answer, as an upstream whose keep-alive timer fired just then does.
  server.replies = {{""}, {ok}};
  server.start();
  upstream::pool p(8, 64, 30s);
  p.put("http://orders.internal:80", pooled_connection_to(ioc, server));
  auto req = post_request(body.size());
  auto r = run(ioc, p, "127.0.0.1", server.port(), req, body, true);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ((*r)->response->get().result_int(), 200u);
  ASSERT_EQ(server.requests.size(), 2u) << "the request went once on the pooled connection and once on a fresh one";
  EXPECT_EQ(server.requests[0], server.requests[1]) << "the resend carries the whole request, body included";
  EXPECT_TRUE(server.requests[1].ends_with(body));
}

TEST(Exchange, ARequestThatMayNotBeRepeatedNeverRidesAPooledConnection) {
  net::io_context ioc;
  scripted_server server(ioc);
  server.replies = {{ok}};
  server.start();
  scripted_server other(ioc);  // the pooled connection goes here: it must see nothing
  upstream::pool p(8, 64, 30s);
  p.put("http://orders.internal:80", pooled_connection_to(ioc, other));
  auto req = post_request(body.size());
  auto r = run(ioc, p, "127.0.0.1", server.port(), req, body, false);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(server.requests.size(), 1u);
  EXPECT_TRUE(p.take("http://orders.internal:80")) << "the pooled connection was left where it was";
}

TEST(Exchange, ARequestThatMayNotBeRepeatedIsNotSentAgainWhenItsConnectionDies) {
  net::io_context ioc;
  scripted_server server(ioc);
  server.replies = {{""}, {ok}};
  server.start();
  upstream::pool p(8, 64, 30s);
  auto req = post_request(body.size());
  auto r = run(ioc, p, "127.0.0.1", server.port(), req, body, false);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().type, http::error_type::connect_reset) << r.error().message;
  EXPECT_EQ(server.requests.size(), 1u) << "whether the upstream acted on it is unknown: it goes once";
}

TEST(Exchange, AFreshConnectionThatDiesIsNotRetriedWithinTheAttempt) {
  net::io_context ioc;
  scripted_server server(ioc);
  server.replies = {{""}, {ok}};
  server.start();
  upstream::pool p(8, 64, 30s);
  auto req = post_request(body.size());
  auto r = run(ioc, p, "127.0.0.1", server.port(), req, body, true);
  ASSERT_FALSE(r.has_value()) << "only a pooled connection earns the in-attempt resend; the loop decides the rest";
  EXPECT_EQ(r.error().type, http::error_type::connect_reset);
  EXPECT_EQ(server.requests.size(), 1u);
}

TEST(Exchange, AResponseHeadOverTheLimitIsAProtocolError) {
  net::io_context ioc;
  scripted_server server(ioc);
  std::string huge = "HTTP/1.1 200 OK\r\n";
  for (int i = 0; i < 20; ++i) huge += "X-Filler-" + std::to_string(i) + ": " + std::string(4000, 'f') + "\r\n";
  server.replies = {{huge + "Content-Length: 0\r\n\r\n"}};
  server.start();
  upstream::pool p(8, 64, 30s);
  auto req = post_request(body.size());
  auto r = run(ioc, p, "127.0.0.1", server.port(), req, body, true);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().type, http::error_type::upstream_protocol_error) << r.error().message;
}

TEST(Exchange, SwitchingProtocolsUnaskedIsAProtocolError) {
  net::io_context ioc;
  scripted_server server(ioc);
  server.replies = {{"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"}};
  server.start();
  upstream::pool p(8, 64, 30s);
  auto req = post_request(body.size());
  auto r = run(ioc, p, "127.0.0.1", server.port(), req, body, true);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().type, http::error_type::upstream_protocol_error);
}

TEST(Exchange, ASwitchToWebSocketAskedForIsTheFinalAnswer) {
  net::io_context ioc;
  scripted_server server(ioc);
  // Frames may follow the 101 in the same segment: they stay in the buffer for the tunnel.
  server.replies = {
      {"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
       "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n\x81\x02hi"}};
  server.start();
  upstream::pool p(8, 64, 30s);
  auto req = post_request(0);
  auto r = run(ioc, p, "127.0.0.1", server.port(), req, "", false, 5s, true);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ((*r)->response->get().result_int(), 101u);
  EXPECT_EQ(boost::beast::buffers_to_string((*r)->buffer.data()), "\x81\x02hi");
}

TEST(Exchange, ASwitchToAnotherProtocolThanAskedIsAProtocolError) {
  net::io_context ioc;
  scripted_server server(ioc);
  server.replies = {{"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n"}};
  server.start();
  upstream::pool p(8, 64, 30s);
  auto req = post_request(0);
  auto r = run(ioc, p, "127.0.0.1", server.port(), req, "", false, 5s, true);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().type, http::error_type::upstream_protocol_error);
  EXPECT_NE(r.error().message.find("h2c"), std::string::npos) << r.error().message;
}

TEST(Exchange, AnUpstreamSilentPastTheDeadlineIsAnAttemptTimeout) {
  net::io_context ioc;
  scripted_server server(ioc);
  server.replies = {reply{"", true}};
  server.start();
  upstream::pool p(8, 64, 30s);
  auto req = post_request(body.size());
  auto r = run(ioc, p, "127.0.0.1", server.port(), req, body, true, 200ms);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().type, http::error_type::attempt_timeout) << r.error().message;
  EXPECT_EQ(server.requests.size(), 1u) << "a timed-out attempt is not resent within the attempt";
}

TEST(Exchange, NothingListeningIsConnectRefused) {
  net::io_context ioc;
  // Bound and never listened on: a SYN to it gets RST, and nothing else can take the port.
  rebound::tcp_socket holder(ioc);
  holder.open(tcp::v4());
  holder.bind(tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
  auto const port = holder.local_endpoint().port();
  upstream::pool p(8, 64, 30s);
  auto req = post_request(body.size());
  auto r = run(ioc, p, "127.0.0.1", port, req, body, true);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().type, http::error_type::connect_refused);
}

}  // namespace attempt_test
