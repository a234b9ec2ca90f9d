#include "proxy/upstream/pool.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

#include <gtest/gtest.h>

#include <thread>

namespace net = boost::asio;
using tcp = net::ip::tcp;
using rebound::upstream::pool;
using namespace std::chrono_literals;

namespace {

/// A connected client stream and the server's end of it, on loopback.
struct connected_pair {
  net::io_context& ioc;
  tcp::acceptor acceptor{ioc, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0)};
  boost::beast::tcp_stream client{ioc};
  tcp::socket server{ioc};
  explicit connected_pair(net::io_context& io) : ioc(io) {
    client.socket().connect(acceptor.local_endpoint());
    acceptor.accept(server);
  }
};

}  // namespace

TEST(Pool, ReturnsTheConnectionPutForTheSameKeyOnly) {
  net::io_context ioc;
  connected_pair c(ioc);
  auto const local = c.client.socket().local_endpoint();
  pool p(8, 30s);
  p.put("http://a:80", rebound::upstream::connection(std::move(c.client)));
  EXPECT_FALSE(p.take("http://b:80"));
  auto s = p.take("http://a:80");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->socket().local_endpoint(), local);
  EXPECT_FALSE(p.take("http://a:80"));
}

TEST(Pool, ConnectionClosedByThePeerWhileIdleIsNeverHandedOut) {
  net::io_context ioc;
  connected_pair c(ioc);
  pool p(8, 30s);
  p.put("k", rebound::upstream::connection(std::move(c.client)));
  c.server.close();
  // The FIN may take a moment to arrive on loopback; poll for it rather than sleep blindly.
  for (int i = 0; i < 200 && p.idle_count() == 1; ++i) {
    std::this_thread::sleep_for(5ms);
    p.sweep();
  }
  EXPECT_EQ(p.idle_count(), 0u);
  EXPECT_FALSE(p.take("k"));
}

TEST(Pool, ConnectionWithUnsolicitedBytesIsNotReused) {
  net::io_context ioc;
  connected_pair c(ioc);
  pool p(8, 30s);
  p.put("k", rebound::upstream::connection(std::move(c.client)));
  net::write(c.server, net::buffer(std::string_view("HTTP/1.1 200 OK\r\n\r\n")));
  bool still_offered = true;
  for (int i = 0; i < 200 && still_offered; ++i) {
    auto got = p.take("k");
    still_offered = got.has_value();
    if (got) p.put("k", std::move(*got));
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_FALSE(still_offered);
}

TEST(Pool, EvenARecentlyUsedConnectionIsCheckedBeforeReuse) {
  net::io_context ioc;
  connected_pair c(ioc);
  pool p(8, 30s);
  p.put("k", rebound::upstream::connection(std::move(c.client)));
  c.server.close();  // an upstream restarting: every idle connection ends at once
  // Poll until the FIN has arrived; take() must then refuse a connection idle for milliseconds.
  bool offered = true;
  for (int i = 0; i < 200 && offered; ++i) {
    auto got = p.take("k");
    offered = got.has_value();
    if (got) p.put("k", std::move(*got));
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_FALSE(offered);
}

TEST(Pool, ExpiredIdleConnectionIsDropped) {
  net::io_context ioc;
  connected_pair c(ioc);
  pool p(8, 0ms);
  p.put("k", rebound::upstream::connection(std::move(c.client)));
  EXPECT_FALSE(p.take("k"));
}

TEST(Pool, KeepsAtMostTheLimitPerKeyDroppingTheOldest) {
  net::io_context ioc;
  connected_pair a(ioc), b(ioc), c(ioc);
  auto const newest = c.client.socket().local_endpoint();
  pool p(2, 30s);
  p.put("k", rebound::upstream::connection(std::move(a.client)));
  p.put("k", rebound::upstream::connection(std::move(b.client)));
  p.put("k", rebound::upstream::connection(std::move(c.client)));
  EXPECT_EQ(p.idle_count(), 2u);
  auto s = p.take("k");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->socket().local_endpoint(), newest);
}
