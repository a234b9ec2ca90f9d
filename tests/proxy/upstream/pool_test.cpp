#include "proxy/upstream/pool.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>

#include <gtest/gtest.h>

#include <poll.h>

#include <memory>
#include <vector>

namespace net = rebound::net;
using tcp = net::ip::tcp;
using rebound::upstream::pool;
using namespace std::chrono_literals;

namespace pool_test {
namespace {

/// A connected client stream and the server's end of it, on loopback.
struct connected_pair {
  net::io_context& ioc;
  rebound::tcp_acceptor acceptor{ioc, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0)};
  rebound::beast::tcp_stream client{ioc};
  rebound::tcp_socket server{ioc};
  explicit connected_pair(net::io_context& io) : ioc(io) {
    client.socket().connect(acceptor.local_endpoint());
    acceptor.accept(server);
  }
};

/// Blocks until the kernel has something for `s` to read (a FIN, bytes): the event the pool's
/// liveness check looks for, awaited rather than slept for. False after 5 s.
bool readable(const rebound::upstream::connection& s) {
  pollfd p{const_cast<rebound::upstream::connection&>(s).socket().native_handle(), POLLIN, 0};
  return ::poll(&p, 1, 5000) == 1;
}

/// A clock the test moves by hand.
struct manual_clock {
  pool::clock::time_point t{std::chrono::hours(1)};
  std::function<pool::clock::time_point()> fn() {
    return [this] { return t; };
  }
};

}  // namespace

TEST(Pool, ReturnsTheConnectionPutForTheSameKeyOnly) {
  net::io_context ioc;
  connected_pair c(ioc);
  auto const local = c.client.socket().local_endpoint();
  pool p(8, 64, 30s);
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
  pool p(8, 64, 30s);
  rebound::upstream::connection conn(std::move(c.client));
  c.server.close();
  ASSERT_TRUE(readable(conn)) << "the FIN never arrived";
  p.put("k", std::move(conn));
  p.sweep();
  EXPECT_EQ(p.idle_count(), 0u);
  EXPECT_FALSE(p.take("k"));
}

TEST(Pool, ConnectionWithUnsolicitedBytesIsNotReused) {
  net::io_context ioc;
  connected_pair c(ioc);
  manual_clock time;
  pool p(8, 64, 30s, time.fn());
  rebound::upstream::connection conn(std::move(c.client));
  net::write(c.server, net::buffer(std::string_view("HTTP/1.1 408 Request Timeout\r\n\r\n")));
  ASSERT_TRUE(readable(conn));
  p.put("k", std::move(conn));
  time.t += pool::known_live_for;
  EXPECT_FALSE(p.take("k"));
}

TEST(Pool, AConnectionIdleForTheKnownLiveWindowIsCheckedBeforeReuse) {
  net::io_context ioc;
  connected_pair c(ioc);
  manual_clock time;
  pool p(8, 64, 30s, time.fn());
  rebound::upstream::connection conn(std::move(c.client));
  c.server.close();  // an upstream closing an idle connection
  ASSERT_TRUE(readable(conn));
  p.put("k", std::move(conn));
  time.t += pool::known_live_for;
  EXPECT_FALSE(p.take("k"));
}

TEST(Pool, AConnectionUsedMomentsAgoIsHandedOutWithoutACheck) {
  // The syscall a busy dependency saves per request: a connection back moments ago goes out
  // unchecked, and only requests that may be sent again take pooled connections.
  net::io_context ioc;
  connected_pair c(ioc);
  manual_clock time;
  pool p(8, 64, 30s, time.fn());
  rebound::upstream::connection conn(std::move(c.client));
  c.server.close();
  ASSERT_TRUE(readable(conn));
  p.put("k", std::move(conn));
  time.t += pool::known_live_for - 1ms;
  EXPECT_TRUE(p.take("k"));
}

TEST(Pool, AClosedConnectionFoundMakesThePoolCheckItsSiblings) {
  // An upstream restart closes every idle connection at once: once a request finds one
  // closed, the others of its key are checked, so the next requests do not find them.
  net::io_context ioc;
  connected_pair a(ioc), b(ioc), alive(ioc);
  manual_clock time;
  pool p(8, 64, 30s, time.fn());
  rebound::upstream::connection ca(std::move(a.client)), cb(std::move(b.client)), live(std::move(alive.client));
  auto const live_end = live.socket().local_endpoint();
  a.server.close();
  b.server.close();
  ASSERT_TRUE(readable(ca));
  ASSERT_TRUE(readable(cb));
  p.put("k", std::move(live));
  p.put("k", std::move(ca));
  p.put("k", std::move(cb));
  p.put("other", rebound::upstream::connection(std::move(connected_pair(ioc).client)));
  EXPECT_EQ(p.idle_count(), 4u);
  p.check("k");
  EXPECT_EQ(p.idle_count(), 2u);
  auto s = p.take("k");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->socket().local_endpoint(), live_end);
}

TEST(Pool, ConnectionsComeAndGoManyTimesOverAFewNodes) {
  // Nodes are reused (no allocation per request), and what a key held is still found.
  net::io_context ioc;
  manual_clock time;
  pool p(8, 64, 30s, time.fn());
  for (int i = 0; i < 300; ++i) {
    connected_pair c(ioc);
    auto const key = "http://host-" + std::to_string(i % 70) + ":80";
    auto const local = c.client.socket().local_endpoint();
    p.put(key, rebound::upstream::connection(std::move(c.client)));
    auto s = p.take(key);
    ASSERT_TRUE(s) << i;
    EXPECT_EQ(s->socket().local_endpoint(), local);
    EXPECT_FALSE(p.take(key));
  }
  EXPECT_EQ(p.idle_count(), 0u);
}

TEST(Pool, AConnectionIdleUpToTheIdleTimeoutIsKeptAndPastItDropped) {
  net::io_context ioc;
  connected_pair a(ioc), b(ioc);
  manual_clock time;
  pool p(8, 64, 30s, time.fn());
  p.put("k", rebound::upstream::connection(std::move(a.client)));
  time.t += 29'999ms;
  auto kept = p.take("k");
  EXPECT_TRUE(kept);
  p.put("k", rebound::upstream::connection(std::move(b.client)));
  time.t += 30s;
  EXPECT_FALSE(p.take("k"));
  p.put("k", std::move(*kept));
  time.t += 30s;
  p.sweep();
  EXPECT_EQ(p.idle_count(), 0u);
}

TEST(Pool, KeepsAtMostTheLimitPerKeyDroppingTheOldest) {
  net::io_context ioc;
  connected_pair a(ioc), b(ioc), c(ioc);
  auto const newest = c.client.socket().local_endpoint();
  pool p(2, 64, 30s);
  p.put("k", rebound::upstream::connection(std::move(a.client)));
  p.put("k", rebound::upstream::connection(std::move(b.client)));
  p.put("k", rebound::upstream::connection(std::move(c.client)));
  EXPECT_EQ(p.idle_count(), 2u);
  auto s = p.take("k");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->socket().local_endpoint(), newest);
}

// Issue 29, defect 14: idle connections were bounded per host only, so an app calling many
// distinct hosts kept one per host until every descriptor was idle in the pool. Past the
// total, the least recently used one goes, whatever its host.
TEST(Pool, KeepsAtMostTheTotalLimitAcrossKeysDroppingTheLeastRecentlyUsed) {
  net::io_context ioc;
  connected_pair a(ioc), b(ioc), c(ioc);
  auto const b_local = b.client.socket().local_endpoint();
  pool p(8, 2, 30s);
  p.put("http://a:80", rebound::upstream::connection(std::move(a.client)));
  p.put("http://b:80", rebound::upstream::connection(std::move(b.client)));
  p.put("http://c:80", rebound::upstream::connection(std::move(c.client)));
  EXPECT_EQ(p.idle_count(), 2u);
  EXPECT_FALSE(p.take("http://a:80")) << "the least recently used went";
  auto kept = p.take("http://b:80");
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->socket().local_endpoint(), b_local);
  EXPECT_TRUE(p.take("http://c:80"));
  EXPECT_EQ(p.idle_count(), 0u);
}

TEST(Pool, CloseOldestGivesBackTheLeastRecentlyUsedDescriptor) {
  net::io_context ioc;
  connected_pair a(ioc), b(ioc);
  pool p(8, 64, 30s);
  EXPECT_FALSE(p.close_oldest()) << "nothing idle";
  p.put("http://a:80", rebound::upstream::connection(std::move(a.client)));
  p.put("http://b:80", rebound::upstream::connection(std::move(b.client)));
  ASSERT_TRUE(p.close_oldest());
  EXPECT_EQ(p.idle_count(), 1u);
  // The server's end sees the close: the descriptor really went.
  char byte;
  boost::system::error_code ec;
  a.server.read_some(net::buffer(&byte, 1), ec);
  EXPECT_EQ(ec, net::error::eof);
  EXPECT_TRUE(p.take("http://b:80"));
}

TEST(Pool, ALowerTotalLimitClosesTheOldestAtOnce) {
  net::io_context ioc;
  connected_pair a(ioc), b(ioc), c(ioc);
  pool p(8, 64, 30s);
  p.put("k", rebound::upstream::connection(std::move(a.client)));
  p.put("k", rebound::upstream::connection(std::move(b.client)));
  p.put("j", rebound::upstream::connection(std::move(c.client)));
  p.set_max_idle_total(1);
  EXPECT_EQ(p.idle_count(), 1u);
  EXPECT_FALSE(p.take("k"));
  EXPECT_TRUE(p.take("j"));
}

}  // namespace pool_test

#include "proxy/upstream/attempt.hpp"
#include "proxy/net.hpp"

namespace pool_test {
namespace {

TEST(Pool, AnExchangeGivenBackIsReusedEmptyWithItsBufferRoom) {
  pool p(8, 64, 30s);
  auto ex = p.spare_exchange();
  ex->buffer.reserve(rebound::upstream::first_read_size);
  auto const room = ex->buffer.data().data();
  ex->buffer.commit(net::buffer_copy(ex->buffer.prepare(5), net::buffer(std::string_view("bytes"))));
  ex->head_text = "GET / HTTP/1.1\r\nHost: example.test\r\n\r\n";
  auto const head_room = ex->head_text.data();
  auto* const given = ex.get();
  p.recycle(std::move(ex));
  auto again = p.spare_exchange();
  EXPECT_EQ(again.get(), given);
  EXPECT_EQ(again->buffer.size(), 0u);
  EXPECT_TRUE(again->head_text.empty()) << "the last request's head would be sent again";
  EXPECT_EQ(again->head_text.data(), head_room) << "the request head's room was not kept";
  EXPECT_FALSE(again->stream);
  EXPECT_FALSE(again->response);
  EXPECT_EQ(again->buffer.data().data(), room) << "the buffer's room was not kept";
  EXPECT_NE(p.spare_exchange().get(), given) << "one exchange handed out twice";
}

TEST(Pool, AnExchangeWhoseBufferGrewPastAFirstReadIsNotKept) {
  pool p(8, 64, 30s);
  auto ex = p.spare_exchange();
  ex->buffer.reserve(rebound::upstream::first_read_size * 4);  // a large head was read into it
  p.recycle(std::move(ex));
  EXPECT_EQ(p.spare_exchange()->buffer.capacity(), 0u) << "a 64 KiB buffer was kept for the next answer";
}

// As many exchanges are kept as were out at once (1,000 requests in flight reuse theirs
// instead of going to malloc for 20 KiB each), and a trim frees what no request took since
// the trim before, down to a worker's usual few (the rule itself: runtime::spares).
TEST(Pool, SpareExchangesFollowTheRequestsInFlightAndATrimFreesThoseNotTaken) {
  pool p(8, 64, 30s);
  auto burst = [&p](std::size_t n) {
    std::vector<std::unique_ptr<rebound::upstream::exchange>> out;
    for (std::size_t i = 0; i < n; ++i) out.push_back(p.spare_exchange());
    for (auto& ex : out) p.recycle(std::move(ex));
  };
  burst(300);
  EXPECT_EQ(p.spare_exchange_count(), 300u) << "a burst's exchanges were not all kept for the next";
  p.trim_spares();
  EXPECT_EQ(p.spare_exchange_count(), 300u) << "every spare was taken in the burst: none is surplus yet";
  p.sweep();
  EXPECT_EQ(p.spare_exchange_count(), 300u) << "the connection sweep freed spares: that is the trim's job";
  p.trim_spares();  // no request at all
  EXPECT_EQ(p.spare_exchange_count(), 16u) << "a quiet worker keeps its usual few";
  burst(2000);
  EXPECT_EQ(p.spare_exchange_count(), 1024u) << "spares are bounded whatever the burst";
}

TEST(Pool, AnExchangeWhoseFieldListGrewPastATypicalHeadIsNotKept) {
  pool p(8, 64, 30s);
  auto ex = p.spare_exchange();
  for (int i = 0; i < 200; ++i)  // an upstream's 40 KB head
    ex->fields.insert(boost::beast::http::field::unknown, "X-Filler", std::string(200, 'f'));
  p.recycle(std::move(ex));
  EXPECT_LT(p.spare_exchange()->fields.capacity_bytes(), 1024u) << "a 40 KB field list was kept for the next answer";
}

TEST(Pool, AnExchangeWhoseRequestHeadGrewPastATypicalHeadIsNotKept) {
  pool p(8, 64, 30s);
  auto ex = p.spare_exchange();
  ex->head_text.assign(40'000, 'h');  // a request with a 40 KB head went out through it
  p.recycle(std::move(ex));
  EXPECT_LT(p.spare_exchange()->head_text.capacity(), 1024u) << "a 40 KB head's room was kept for the next request";
}

}  // namespace
}  // namespace pool_test

namespace pool_test {

TEST(Pool, ARetryTakesAConnectionToAnAddressItHasNotTriedAndLeavesTheOthersPooled) {
  net::io_context ioc;
  connected_pair first(ioc), second(ioc);
  auto const a = net::ip::make_address("10.0.0.1"), b = net::ip::make_address("10.0.0.2");
  pool p(8, 64, 30s);
  rebound::upstream::connection to_a(std::move(first.client)), to_b(std::move(second.client));
  to_a.set_peer(a);
  to_b.set_peer(b);
  auto const b_local = to_b.socket().local_endpoint();
  p.put("k", std::move(to_b));
  p.put("k", std::move(to_a));  // the most recently used: what take() would hand out
  auto other = p.take_avoiding("k", {a});
  ASSERT_TRUE(other);
  EXPECT_EQ(other->peer(), b);
  EXPECT_EQ(other->socket().local_endpoint(), b_local);
  EXPECT_EQ(p.idle_count(), 1u);  // the one to `a` stays for requests that have not tried it
  EXPECT_FALSE(p.take_avoiding("k", {a}));
  auto left = p.take("k");
  ASSERT_TRUE(left);
  EXPECT_EQ(left->peer(), a);
}

}  // namespace pool_test
