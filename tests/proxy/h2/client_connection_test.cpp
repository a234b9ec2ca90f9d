// rebound's HTTP/2 client against rebound's server (serve) and against a raw nghttp2 server
// scripted to refuse, GOAWAY or drop: each way a stream can end maps to its failure kind.
#include "proxy/h2/client_connection.hpp"

#include "tests/proxy/h2/h2_fixture.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/write.hpp>

#include <nghttp2/nghttp2.h>

#include <array>
#include <vector>

using namespace h2test;
using namespace boost::asio::experimental::awaitable_operators;

namespace client_connection_test {
namespace {

net::awaitable<h2::message> echo(h2::message req) {
  h2::message m;
  m.head = {{":status", "200"}, {"content-type", "application/grpc"}};
  m.body = std::move(req.body);
  m.trailers = {{"grpc-status", "0"}};
  if (auto const* t = req.find_trailer("x-request-trailer")) m.trailers.push_back({"x-seen", *t});
  co_await sleep_for(10ms);
  co_return m;
}

struct waiter_state {
  bool started = false;
  bool cancelled = false;
};
net::awaitable<h2::message> wait_long(waiter_state* st, h2::message) {
  st->started = true;
  net::steady_timer t(co_await net::this_coro::executor);
  t.expires_after(10s);
  auto [ec] = co_await t.async_wait(use_tuple);
  st->cancelled = ec == net::error::operation_aborted;
  h2::message m;
  m.head = {{":status", "200"}};
  co_return m;
}

net::awaitable<h2::message> big(h2::message) {
  h2::message m;
  m.head = {{":status", "200"}};
  m.body.assign(100'000, 'z');
  co_return m;
}

net::awaitable<void> unary(test_server& s, h2::exchange_result* out) {
  auto c = co_await connect_to(s.port());
  if (!c) co_return;
  auto req = grpc_request("/svc/Echo", std::string(70'000, 'q'), {{"x-request-trailer", "t1"}});
  *out = co_await c->exchange(req, 1 << 20, clock::now() + 5s);
  c->shut_down();
}

TEST(Http2Client, UnaryExchangeCarriesBodyAndTrailersBothWays) {
  net::io_context ioc;
  test_server s(ioc, [](h2::message m) { return echo(std::move(m)); });
  s.start();
  h2::exchange_result r = h2::failure{};
  run(ioc, unary(s, &r), &s);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(*r->find(":status"), "200");
  EXPECT_EQ(r->body, std::string(70'000, 'q'));
  ASSERT_NE(r->find_trailer("grpc-status"), nullptr);
  EXPECT_EQ(*r->find_trailer("grpc-status"), "0");
  ASSERT_NE(r->find_trailer("x-seen"), nullptr);
  EXPECT_EQ(*r->find_trailer("x-seen"), "t1");
}

struct many_state {
  std::shared_ptr<h2::client_connection> conn;
  int ok = 0;
  int done = 0;
  std::size_t peak = 0;
};

net::awaitable<void> one_of_many(many_state& st, int n) {
  auto req = grpc_request("/svc/Echo", "call " + std::to_string(n));
  auto r = co_await st.conn->exchange(req, 1 << 20, clock::now() + 5s);
  if (r && r->body == "call " + std::to_string(n)) ++st.ok;
  ++st.done;
}

net::awaitable<void> many(test_server& s, many_state& st) {
  st.conn = co_await connect_to(s.port());
  if (!st.conn) co_return;
  auto ex = co_await net::this_coro::executor;
  for (int i = 0; i < 50; ++i) net::co_spawn(ex, one_of_many(st, i), test_server::ignore{});
  while (st.done < 50) {
    st.peak = std::max(st.peak, st.conn->active_streams());
    co_await sleep_for(2ms);
  }
  st.conn->shut_down();
}

TEST(Http2Client, ManyConcurrentStreamsShareOneConnection) {
  net::io_context ioc;
  test_server s(ioc, [](h2::message m) { return echo(std::move(m)); });
  s.start();
  many_state st;
  run(ioc, many(s, st), &s);
  EXPECT_EQ(st.ok, 50);
  EXPECT_EQ(s.accepted, 1);
  EXPECT_GT(st.peak, 1u);
}

net::awaitable<void> with_deadline(test_server& s, h2::exchange_result* out, waiter_state* ws) {
  auto c = co_await connect_to(s.port());
  if (!c) co_return;
  auto req = grpc_request("/svc/Wait");
  *out = co_await c->exchange(req, 1 << 20, clock::now() + 200ms);
  for (int i = 0; i < 100 && !ws->cancelled; ++i) co_await sleep_for(10ms);
  c->shut_down();
}

TEST(Http2Client, DeadlineResetsTheStreamAndReportsTimeout) {
  net::io_context ioc;
  waiter_state ws;
  test_server s(ioc, [&ws](h2::message m) { return wait_long(&ws, std::move(m)); });
  s.start();
  h2::exchange_result r = h2::message{};
  run(ioc, with_deadline(s, &r, &ws), &s);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().kind, h2::failure_kind::timeout);
  EXPECT_TRUE(ws.cancelled) << "the server's handler saw the RST_STREAM as cancellation";
}

net::awaitable<void> cancelled_call(test_server& s, h2::exchange_result* out, waiter_state* ws) {
  auto c = co_await connect_to(s.port());
  if (!c) co_return;
  auto req = grpc_request("/svc/Wait");
  auto call = c->exchange(req, 1 << 20, clock::now() + 5s);
  auto nap = sleep_for(150ms);
  auto winner = co_await (std::move(call) || std::move(nap));
  if (winner.index() == 0) *out = std::get<0>(std::move(winner));
  for (int i = 0; i < 100 && !ws->cancelled; ++i) co_await sleep_for(10ms);
  c->shut_down();
}

TEST(Http2Client, CancellationResetsTheStreamAndTheServerHandlerSeesIt) {
  net::io_context ioc;
  waiter_state ws;
  test_server s(ioc, [&ws](h2::message m) { return wait_long(&ws, std::move(m)); });
  s.start();
  h2::exchange_result r = h2::message{};
  run(ioc, cancelled_call(s, &r, &ws), &s);
  EXPECT_TRUE(ws.started);
  EXPECT_TRUE(ws.cancelled);
}

TEST(Http2Client, ResponseBodyOverTheLimitIsTooLarge) {
  net::io_context ioc;
  test_server s(ioc, [](h2::message m) { return big(std::move(m)); });
  s.start();
  h2::exchange_result r = h2::message{};
  run(ioc, [](test_server& srv, h2::exchange_result* out) -> net::awaitable<void> {
    auto c = co_await connect_to(srv.port());
    if (!c) co_return;
    auto req = grpc_request("/svc/Big");
    *out = co_await c->exchange(req, 1000, clock::now() + 5s);
    c->shut_down();
  }(s, &r), &s);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().kind, h2::failure_kind::too_large);
}

// ---- a raw nghttp2 server that misbehaves on purpose

enum class script { refuse, goaway_after_two, drop };

struct raw_server {
  raw_server(net::io_context& io, script s) : ioc(io), how(s) {}
  net::io_context& ioc;
  script how;
  rebound::tcp_acceptor acceptor{ioc, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0)};
  std::vector<std::int32_t> requests;
  bool drop_now = false;

  static int on_frame_recv(nghttp2_session* s, const nghttp2_frame* frame, void* user) {
    auto& r = *static_cast<raw_server*>(user);
    if ((frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) ||
        !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
      return 0;
    r.requests.push_back(frame->hd.stream_id);
    if (r.how == script::refuse) {
      nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_REFUSED_STREAM);
    } else if (r.how == script::drop) {
      r.drop_now = true;
    } else if (r.requests.size() == 2) {
      std::array<nghttp2_nv, 1> nv{{{(std::uint8_t*)":status", (std::uint8_t*)"200", 7, 3, NGHTTP2_NV_FLAG_NONE}}};
      nghttp2_submit_response(s, r.requests[0], nv.data(), nv.size(), nullptr);
      nghttp2_submit_goaway(s, NGHTTP2_FLAG_NONE, r.requests[0], NGHTTP2_NO_ERROR, nullptr, 0);
    }
    return 0;
  }

  static net::awaitable<void> flush(nghttp2_session* s, rebound::tcp_socket& sock) {
    std::string out;
    const std::uint8_t* data = nullptr;
    for (ssize_t n; (n = nghttp2_session_mem_send(s, &data)) > 0;) out.append((const char*)data, n);
    if (!out.empty()) co_await net::async_write(sock, net::buffer(out), use_tuple);
  }

  static net::awaitable<void> run(raw_server& r) {
    rebound::tcp_socket sock(r.ioc);
    auto [aec] = co_await r.acceptor.async_accept(sock, use_tuple);
    if (aec) co_return;
    nghttp2_session_callbacks* cbs = nullptr;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, &on_frame_recv);
    nghttp2_session* s = nullptr;
    nghttp2_session_server_new(&s, cbs, &r);
    nghttp2_session_callbacks_del(cbs);
    nghttp2_submit_settings(s, NGHTTP2_FLAG_NONE, nullptr, 0);
    co_await flush(s, sock);
    std::array<std::uint8_t, 16384> buf{};
    for (;;) {
      auto [ec, n] = co_await sock.async_read_some(net::buffer(buf), use_tuple);
      if (ec || nghttp2_session_mem_recv(s, buf.data(), n) < 0) break;
      if (r.drop_now) break;
      co_await flush(s, sock);
    }
    nghttp2_session_del(s);
    error_code ignored;
    sock.close(ignored);
  }
};

net::awaitable<void> two_calls(std::uint16_t port, h2::exchange_result* first, h2::exchange_result* second,
                               bool* took_after) {
  auto c = co_await connect_to(port);
  if (!c) co_return;
  auto req1 = grpc_request("/svc/A");
  auto req2 = grpc_request("/svc/B");
  auto a = c->exchange(req1, 1 << 20, clock::now() + 5s);
  auto b = c->exchange(req2, 1 << 20, clock::now() + 5s);
  auto [ra, rb] = co_await (std::move(a) && std::move(b));
  *first = std::move(ra);
  *second = std::move(rb);
  *took_after = c->can_take_stream();
}

void run_raw(net::io_context& ioc, raw_server& srv, net::awaitable<void> body) {
  net::co_spawn(ioc, raw_server::run(srv), test_server::ignore{});
  run(ioc, std::move(body), nullptr);
}

TEST(Http2Client, RefusedStreamIsReportedNeverProcessed) {
  net::io_context ioc;
  raw_server srv(ioc, script::refuse);
  h2::exchange_result r = h2::message{};
  run_raw(ioc, srv, [](std::uint16_t port, h2::exchange_result* out) -> net::awaitable<void> {
    auto c = co_await connect_to(port);
    if (!c) co_return;
    auto req = grpc_request("/svc/A", "body");
    *out = co_await c->exchange(req, 1 << 20, clock::now() + 5s);
    c->shut_down();
  }(srv.acceptor.local_endpoint().port(), &r));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().kind, h2::failure_kind::refused);
}

TEST(Http2Client, StreamAboveGoawayLastStreamIdIsRefusedAndConnectionTakesNoMore) {
  net::io_context ioc;
  raw_server srv(ioc, script::goaway_after_two);
  h2::exchange_result first = h2::failure{}, second = h2::message{};
  bool took_after = true;
  run_raw(ioc, srv, two_calls(srv.acceptor.local_endpoint().port(), &first, &second, &took_after));
  ASSERT_TRUE(first.has_value()) << first.error().message;
  EXPECT_EQ(*first->find(":status"), "200");
  ASSERT_FALSE(second.has_value());
  EXPECT_EQ(second.error().kind, h2::failure_kind::refused);
  EXPECT_FALSE(took_after);
}

TEST(Http2Client, ConnectionLostMidStreamIsReportedAsSuch) {
  net::io_context ioc;
  raw_server srv(ioc, script::drop);
  h2::exchange_result r = h2::message{};
  run_raw(ioc, srv, [](std::uint16_t port, h2::exchange_result* out) -> net::awaitable<void> {
    auto c = co_await connect_to(port);
    if (!c) co_return;
    auto req = grpc_request("/svc/A");
    *out = co_await c->exchange(req, 1 << 20, clock::now() + 5s);
  }(srv.acceptor.local_endpoint().port(), &r));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().kind, h2::failure_kind::connection_lost);
}

}  // namespace

struct pool_state {
  h2::client_pool pool;
  std::vector<std::shared_ptr<h2::client_connection>> got;
  int ended = 0;
  std::size_t gets = 0;
};

net::awaitable<void> take_from_pool(pool_state& st, const upstream::destination& to) {
  auto c = co_await st.pool.get(to, clock::now() + 5s);
  if (c) st.got.push_back(*c);
  ++st.ended;
}

net::awaitable<void> burst_then_sweep(test_server& s, pool_state& st, bool* closed_after_sweep) {
  std::string const key = "h2://127.0.0.1:" + std::to_string(s.port());
  std::string const host = "127.0.0.1";
  upstream::destination const to{key, host, s.port()};
  auto ex = co_await net::this_coro::executor;
  // Ten calls arrive before the first connect is done: they wait for it.
  for (int i = 0; i < 10; ++i) net::co_spawn(ex, take_from_pool(st, to), test_server::ignore{});
  while (st.ended < 10) co_await sleep_for(1ms);
  // Idle (no stream) past the sweep's timeout: shut down, as the HTTP/1.1 pool closes its own.
  st.pool.sweep(0ms);
  for (int i = 0; i < 100 && !(st.got.empty() || st.got.front()->closed()); ++i) co_await sleep_for(10ms);
  *closed_after_sweep = !st.got.empty() && st.got.front()->closed();
  st.gets = st.got.size();
  st.got.clear();
}

// Issue 29, defect 8: a burst before the first connect opened a connection per call, and
// idle ones stayed open for good.
TEST(Http2ClientPool, ABurstSharesThePendingConnectAndIdleConnectionsAreSweptAway) {
  net::io_context ioc;
  test_server s(ioc, [](h2::message m) { return echo(std::move(m)); });
  s.start();
  pool_state st;
  bool closed = false;
  run(ioc, burst_then_sweep(s, st, &closed), &s);
  EXPECT_EQ(st.gets, 10u);
  EXPECT_EQ(s.accepted, 1) << "one connection for the ten calls";
  EXPECT_TRUE(closed) << "the idle connection was shut down by the sweep";
}

}  // namespace client_connection_test
