#include "proxy/http/relay.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>

#include <gtest/gtest.h>

#include <exception>
#include <optional>
#include <string>

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

/// An upstream that sent `first` (a response head, maybe with body bytes) and, once rebound
/// has read the head, `rest`; what rebound's client then reads of the relayed response.
struct relay_outcome {
  std::string client_got;
  bool ok = false;
  std::size_t spare_buffers = 0;  ///< relay buffers the worker holds after the relay
};

relay_outcome relay_response(const std::string& first, const std::string& rest, std::size_t expect_bytes,
                             std::size_t max_size = upstream::response_buffer_limit) {
  net::io_context ioc;
  connected_pair upstream_side(ioc);
  connected_pair client_side(ioc);
  upstream::connection up(std::move(upstream_side.near));
  runtime::relay_buffers buffers;
  relay_outcome out;
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
        if (!rest.empty()) net::write(upstream_side.far, net::buffer(rest));
        std::string const head = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";
        auto rr = co_await http::relay_response_body({up, buffer, parser}, client_side.near, head, {5s, &buffers});
        out.ok = rr.ok() && parser.is_done() && buffer.size() == 0;
      },
      [&](std::exception_ptr e) {
        if (e) out.ok = false;  // thrown out of the relay: what the data path must never do
      });
  ioc.run();
  out.spare_buffers = buffers.spare_count();
  if (!out.ok) return out;  // nothing to read, and a read would wait for ever
  out.client_got.resize(expect_bytes);
  net::read(client_side.far, net::buffer(out.client_got));
  return out;
}

}  // namespace

TEST(Relay, ABodyThatCameWithItsHeadIsRelayedFromTheReadBufferWithoutARelayBuffer) {
  auto const r = relay_response("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "", 43);
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.client_got, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_EQ(r.spare_buffers, 0u) << "a relay buffer was taken for a body already in the read buffer";
}

TEST(Relay, ABodyStillToComeGoesThroughARelayBuffer) {
  auto const r = relay_response("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhe", "llo", 43);
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.client_got, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_EQ(r.spare_buffers, 1u) << "the relay buffer was not given back to the worker";
}

TEST(Relay, ABufferWhoseLimitWasLoweredBelowWhatItHoldsGoesThroughARelayBuffer) {
  // A reload can lower a buffer's limit below what it holds; taking room behind the body
  // then would throw from inside the relay.
  auto const r = relay_response("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", "", 43, 6);
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.client_got, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_EQ(r.spare_buffers, 1u);
}

}  // namespace relay_test
