#include "proxy/http/relay.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>

#include <gtest/gtest.h>

#include <array>
#include <exception>
#include <optional>
#include <string>
#include <thread>

namespace net = rebound::net;
using tcp = net::ip::tcp;
using namespace rebound;
using namespace std::chrono_literals;

namespace relay_test {
namespace {

/// A connected stream and the peer's end of it, on loopback.
struct connected_pair {
  tcp_acceptor acceptor;
  beast::tcp_stream near;
  tcp_socket far;
  explicit connected_pair(net::io_context& ioc)
      : acceptor(ioc, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0)), near(ioc), far(ioc) {
    near.socket().connect(acceptor.local_endpoint());
    acceptor.accept(far);
  }
};

/// What a relay did: what the receiving side read, how the relay ended, what it left.
struct relay_outcome {
  std::string received;
  http::relay_result result;
  bool threw = false;
  bool parser_done = false;
  std::string left_in_buffer;     ///< read past the body, kept for whoever reads next
  std::size_t spare_buffers = 0;  ///< relay buffers the worker holds after the relay
};

/// Reads what the relay writes to `far` until the writing side shuts down.
void read_until_shutdown(tcp_socket& far, std::string& into) {
  error_code ec;
  std::array<char, 64 * 1024> chunk;
  for (;;) {
    auto const n = far.read_some(net::buffer(chunk), ec);
    if (ec) break;
    into.append(chunk.data(), n);
  }
}

/// An upstream that sent `first` (a response head, maybe with body bytes), then, once rebound
/// has read the head, `rest`, then closed when `close_after`; relayed to a client.
relay_outcome relay_response(const std::string& first, const std::string& rest, bool close_after = false,
                             std::size_t max_size = upstream::response_buffer_limit) {
  net::io_context ioc;
  connected_pair upstream_side(ioc);
  connected_pair client_side(ioc);
  upstream::connection up(std::move(upstream_side.near));
  runtime::relay_buffers buffers;
  relay_outcome out;
  std::optional<std::thread> writer;
  net::write(upstream_side.far, net::buffer(first));
  net::co_spawn(
      ioc,
      [&]() -> net::awaitable<void> {
        beast::flat_buffer buffer;
        buffer.reserve(upstream::first_read_size);
        http::field_list fields;
        http::response_parser parser(fields);
        auto [ec, n] = co_await bhttp::async_read_header(up, buffer, parser, use_tuple);
        EXPECT_FALSE(ec) << ec.message();
        buffer.max_size(max_size);
        // Written from another thread: a body larger than the socket's buffers would block here.
        writer.emplace([&] {
          net::write(upstream_side.far, net::buffer(rest));
          if (close_after) upstream_side.far.shutdown(tcp_socket::shutdown_send);
        });
        std::string const head = "HTTP/1.1 200 OK\r\n\r\n";
        out.result = co_await http::relay_response_body({up, buffer, parser}, client_side.near, head, {5s, &buffers});
        out.parser_done = parser.is_done();
        auto const d = buffer.data();
        out.left_in_buffer.assign(static_cast<const char*>(d.data()), d.size());
      },
      [&](std::exception_ptr e) { out.threw = e != nullptr; });
  // A large body needs a reader while it is relayed.
  std::thread reader([&] { read_until_shutdown(client_side.far, out.received); });
  ioc.run();
  if (writer) writer->join();
  error_code ignored;
  client_side.near.socket().shutdown(tcp_socket::shutdown_send, ignored);  // the reader's EOF
  reader.join();
  out.spare_buffers = buffers.spare_count();
  return out;
}

/// A client that sent `first` (a request head, maybe with body bytes), then `rest`; its body
/// relayed to an upstream.
relay_outcome relay_request(const std::string& first, const std::string& rest,
                            std::size_t max_size = upstream::response_buffer_limit) {
  net::io_context ioc;
  connected_pair client_side(ioc);
  connected_pair upstream_side(ioc);
  upstream::connection up(std::move(upstream_side.near));
  runtime::relay_buffers buffers;
  relay_outcome out;
  net::write(client_side.far, net::buffer(first));
  net::co_spawn(
      ioc,
      [&]() -> net::awaitable<void> {
        beast::flat_buffer buffer;
        buffer.reserve(4096);
        request_parser parser;
        auto [ec, n] = co_await bhttp::async_read_header(client_side.near, buffer, parser, use_tuple);
        EXPECT_FALSE(ec) << ec.message();
        buffer.max_size(max_size);
        if (!rest.empty()) net::write(client_side.far, net::buffer(rest));
        out.result = co_await http::relay_request_body({client_side.near, buffer, parser}, up, "", "", {5s, &buffers});
        out.parser_done = parser.is_done();
        auto const d = buffer.data();
        out.left_in_buffer.assign(static_cast<const char*>(d.data()), d.size());
      },
      [&](std::exception_ptr e) { out.threw = e != nullptr; });
  ioc.run();
  out.spare_buffers = buffers.spare_count();
  up.shutdown_send();  // what the relay wrote is all there is
  read_until_shutdown(upstream_side.far, out.received);
  return out;
}

/// The data of a chunked body (no extensions, no trailers); "!" when it is not well framed.
std::string dechunk(std::string_view wire) {
  std::string data;
  for (;;) {
    auto const eol = wire.find("\r\n");
    if (eol == std::string_view::npos) return "!";
    auto const size = std::stoul(std::string(wire.substr(0, eol)), nullptr, 16);
    wire.remove_prefix(eol + 2);
    if (size == 0) return wire == "\r\n" ? data : "!";
    if (wire.size() < size + 2 || wire.substr(size, 2) != "\r\n") return "!";
    data.append(wire.substr(0, size));
    wire.remove_prefix(size + 2);
  }
}

}  // namespace

TEST(Relay, AResponseOfKnownLengthGoesOutFromTheBufferItWasReadInto) {
  // Large enough to arrive in many reads and to move the read buffer to its large size.
  std::string const body(300 * 1024 + 7, 'b');
  auto const first =
      "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body.substr(0, 100);
  auto const r = relay_response(first, body.substr(100));
  EXPECT_FALSE(r.threw);
  EXPECT_TRUE(r.result.ok()) << r.result.read_error.message() << r.result.write_error.message();
  EXPECT_EQ(r.received, "HTTP/1.1 200 OK\r\n\r\n" + body);
  EXPECT_EQ(r.left_in_buffer, "");
  EXPECT_EQ(r.spare_buffers, 0u) << "a relay buffer was taken for a body that needs no re-framing";
}

TEST(Relay, ABodyThatCameWithItsHeadGoesOutWithTheHeadInOneWrite) {
  auto const r = relay_response("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "");
  EXPECT_TRUE(r.result.ok());
  EXPECT_EQ(r.received, "HTTP/1.1 200 OK\r\n\r\nhello");
  EXPECT_EQ(r.spare_buffers, 0u);
}

TEST(Relay, BytesPastAResponseOfKnownLengthStayInTheReadBuffer) {
  // An upstream that sent more than it announced: the caller sees them and does not pool it.
  auto const r = relay_response("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhe", "lloEXTRA");
  EXPECT_TRUE(r.result.ok());
  EXPECT_EQ(r.received, "HTTP/1.1 200 OK\r\n\r\nhello");
  EXPECT_EQ(r.left_in_buffer.substr(0, 5), "EXTRA");
}

TEST(Relay, AResponseCutShortOfItsLengthIsAPartialMessage) {
  auto const r = relay_response("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhe", "l", true);
  EXPECT_FALSE(r.threw);
  EXPECT_EQ(r.result.read_error, bhttp::error::partial_message) << r.result.read_error.message();
  EXPECT_EQ(r.received, "HTTP/1.1 200 OK\r\n\r\nhel");
}

TEST(Relay, AResponseInABufferWhoseLimitWasLoweredBelowWhatItHoldsStillGoesOut) {
  // A reload can lower a buffer's limit below what it holds; making room in it would throw.
  auto const r = relay_response("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "", false, 6);
  EXPECT_FALSE(r.threw);
  EXPECT_TRUE(r.result.ok());
  EXPECT_EQ(r.received, "HTTP/1.1 200 OK\r\n\r\nhello");
}

TEST(Relay, AChunkedResponseIsReFramedThroughTheParser) {
  auto const r = relay_response("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhe", "llo\r\n0\r\n\r\n");
  EXPECT_TRUE(r.result.ok());
  EXPECT_TRUE(r.parser_done);
  // Chunked as the response's fields say, in chunks as the bytes came.
  std::string const head = "HTTP/1.1 200 OK\r\n\r\n";
  ASSERT_EQ(r.received.substr(0, head.size()), head);
  EXPECT_EQ(dechunk(r.received.substr(head.size())), "hello") << r.received;
  EXPECT_EQ(r.spare_buffers, 1u) << "the relay buffer was not given back to the worker";
}

TEST(Relay, ARequestBodyOfKnownLengthGoesOutFromTheBufferItWasReadIntoAndLeavesWhatFollows) {
  // The next request, pipelined behind the body, stays for the session to read.
  auto const r = relay_request("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhe", "lloGET / HTTP/1.1");
  EXPECT_FALSE(r.threw);
  EXPECT_TRUE(r.result.ok());
  EXPECT_EQ(r.received, "hello");
  EXPECT_EQ(r.left_in_buffer, "GET / HTTP/1.1");
  EXPECT_EQ(r.spare_buffers, 0u) << "a relay buffer was taken for a body that needs no re-framing";
}

TEST(Relay, AChunkedRequestBodyGoesThroughTheParserAndARelayBuffer) {
  auto const r =
      relay_request("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhe", "llo\r\n0\r\n\r\n");
  EXPECT_TRUE(r.result.ok());
  EXPECT_TRUE(r.parser_done);
  EXPECT_EQ(dechunk(r.received), "hello") << r.received;
  EXPECT_EQ(r.spare_buffers, 1u) << "the relay buffer was not given back to the worker";
}

TEST(Relay, AResponseWithoutABodyTakesNoRelayBuffer) {
  auto const r = relay_response("HTTP/1.1 204 No Content\r\n\r\n", "");
  EXPECT_TRUE(r.result.ok());
  EXPECT_EQ(r.received, "HTTP/1.1 200 OK\r\n\r\n");
  EXPECT_EQ(r.spare_buffers, 0u);
}

}  // namespace relay_test
