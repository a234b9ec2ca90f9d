// The HTTP/1.1 client session in process, with no rebound binary (session_rig.hpp): how it
// vets a head, hands each request to the door app/ plugs in, keeps a connection for the next
// request, times out a slow head, drains, and tunnels CONNECT.
#include "proxy/http/client_session.hpp"

#include "proxy/http/client_request.hpp"
#include "proxy/plan/loop_guard.hpp"
#include "tests/proxy/http/session_rig.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <gtest/gtest.h>

#include <optional>

namespace client_session_test {
namespace {

using namespace session_rig;

/// A door that answers every request itself, naming its target: what reached it, in order.
net::awaitable<bool> echo_target_door(const http::client_request& r, runtime::session_guard&) {
  std::string const target(r.parser.get().target());
  std::string const answer =
      "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(target.size()) + "\r\n\r\n" + target;
  auto [ec, n] = co_await net::async_write(r.client, net::buffer(answer), use_tuple);
  co_return !ec;
}

/// An HTTP/2 door that is never HTTP/2: it says it was asked, then lets HTTP/1.1 go on.
net::awaitable<bool> asked_http2_door(runtime::session_context, beast::tcp_stream& client, beast::flat_buffer&,
                                      runtime::session_guard&) {
  co_await net::async_write(client, net::buffer(std::string_view("asked-h2\n")), use_tuple);
  co_return false;
}

enough_fn responses(std::size_t n) {
  return [n](const std::string& in) { return count(in, "HTTP/1.1 ") >= n && in.ends_with("/b"); };
}

TEST(ClientSession, EveryRequestOfAKeptConnectionGoesToTheDoorAppPluggedIn) {
  rig r;
  r.serve({nullptr, echo_target_door});
  // Two requests pipelined in one write: both answered, in order, on the one connection.
  bool closed = false;
  auto const in = r.talk(
      "GET http://svc.test/a HTTP/1.1\r\nHost: svc.test\r\n\r\n"
      "GET http://svc.test/b HTTP/1.1\r\nHost: svc.test\r\n\r\n",
      responses(2), &closed);
  EXPECT_EQ(count(in, "HTTP/1.1 200 OK"), 2u) << in;
  EXPECT_LT(in.find("http://svc.test/a"), in.find("http://svc.test/b")) << in;
  EXPECT_FALSE(closed) << "a kept connection stays open for the next request";
}

TEST(ClientSession, TheHttp2DoorIsAskedAtTheFirstBytesOnly) {
  rig r;
  r.serve({asked_http2_door, echo_target_door});
  auto const in = r.talk(
      "GET http://svc.test/a HTTP/1.1\r\nHost: svc.test\r\n\r\n"
      "GET http://svc.test/b HTTP/1.1\r\nHost: svc.test\r\n\r\n",
      responses(2));
  EXPECT_EQ(count(in, "asked-h2\n"), 1u) << in;
  EXPECT_EQ(in.find("asked-h2\n"), 0u) << "asked before the first request was parsed: " << in;
  EXPECT_EQ(count(in, "HTTP/1.1 200 OK"), 2u) << in;
}

TEST(ClientSession, WithoutAnHttp2DoorThePrefaceIsABadRequest) {
  rig r;  // the inbound listener: no HTTP/2 door
  r.serve({nullptr, echo_target_door});
  bool closed = false;
  auto const in = r.talk("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", nullptr, &closed);
  EXPECT_TRUE(in.starts_with("HTTP/1.1 400 ")) << in;
  EXPECT_TRUE(closed);
}

TEST(ClientSession, ASmuggledFramingIsRefused400AndTheConnectionCloses) {
  rig r;
  r.serve({nullptr, echo_target_door});
  bool closed = false;
  auto const in = r.talk(
      "POST http://svc.test/a HTTP/1.1\r\nHost: svc.test\r\nContent-Length: 3\r\n"
      "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
      nullptr, &closed);
  EXPECT_TRUE(in.starts_with("HTTP/1.1 400 ")) << in;
  EXPECT_NE(in.find("bad_request"), std::string::npos) << in;
  EXPECT_EQ(in.find("http://svc.test/a"), std::string::npos) << "the door must not see it: " << in;
  EXPECT_TRUE(closed) << "the bytes after an ambiguous body cannot be trusted as a next request";
}

TEST(ClientSession, ARequestThatAlreadyPassedThisInstanceIsALoop508) {
  rig r;
  r.serve({nullptr, echo_target_door});
  auto const in = r.talk(
      "GET http://svc.test/a HTTP/1.1\r\nHost: svc.test\r\nVia: 1.1 " + plan::via_mark(instance_token) + "\r\n\r\n",
      [](const std::string& s) { return s.find("\r\n\r\n") != std::string::npos; });
  EXPECT_TRUE(in.starts_with("HTTP/1.1 508 ")) << in;
  EXPECT_NE(in.find("loop_detected"), std::string::npos) << in;
}

TEST(ClientSession, AnUnknownHostIsRefused403WhenTheConfigDeniesThem) {
  rig r("unknown_hosts: deny\n");
  r.serve({nullptr, echo_target_door});
  auto const in = r.talk("GET http://nobody.test/a HTTP/1.1\r\nHost: nobody.test\r\n\r\n",
                         [](const std::string& s) { return s.find("\r\n\r\n") != std::string::npos; });
  EXPECT_TRUE(in.starts_with("HTTP/1.1 403 ")) << in;
  EXPECT_NE(in.find("unknown_host"), std::string::npos) << in;
}

TEST(ClientSession, AHeadNotCompleteWithinHeadTimeoutIsAnswered408) {
  rig r("limits:\n  head_timeout: 200ms\n");
  r.serve({nullptr, echo_target_door});
  bool closed = false;
  auto const in = r.talk("GET http://svc.test/a HTTP/1.1\r\nHost: sv", nullptr, &closed);
  EXPECT_TRUE(in.starts_with("HTTP/1.1 408 ")) << in;
  EXPECT_TRUE(closed);
}

TEST(ClientSession, ADrainClosesAnIdleConnection) {
  rig r;
  r.serve({nullptr, echo_target_door});
  // The drain begins once the first answer is out, with the session idle between requests.
  bool closed = false;
  bool drained = false;
  auto const in = r.talk(
      "GET http://svc.test/a HTTP/1.1\r\nHost: svc.test\r\n\r\n",
      [&r, &drained](const std::string& s) {
        if (!drained && s.ends_with("/a")) {
          drained = true;
          r.sessions.begin_drain();
        }
        return false;
      },
      &closed);
  EXPECT_EQ(count(in, "HTTP/1.1 200 OK"), 1u) << in;
  EXPECT_TRUE(closed) << "an idle session ends at once when a drain begins";
  EXPECT_EQ(r.sessions.active(), 0u);
}

/** A client that sends request /a, reads its answer, stays quiet for `quiet` (long enough for
    the session to park), then calls `after_quiet` and sends /b, and reads until the session
    closes or 8 s pass. Returns what came back; `closed_after` is how long after /b's answer
    the session closed (none: it did not). */
std::string quiet_then_again(rig& r, std::chrono::milliseconds quiet, const std::function<bool()>& after_quiet,
                             std::optional<std::chrono::milliseconds>* closed_after) {
  std::string in;
  net::co_spawn(
      r.ioc,
      [&]() -> net::awaitable<void> {
        beast::tcp_stream c(r.ioc);
        c.expires_after(8s + quiet);
        auto [cec] = co_await c.async_connect(r.acceptor.local_endpoint(), use_tuple);
        if (cec) co_return;
        std::array<char, 4096> chunk;
        auto const read_until = [&](std::string_view end) -> net::awaitable<error_code> {
          while (!in.ends_with(end)) {
            auto [rec, n] = co_await c.async_read_some(net::buffer(chunk), use_tuple);
            in.append(chunk.data(), n);
            if (rec) co_return rec;
          }
          co_return error_code{};
        };
        co_await net::async_write(c, net::buffer(std::string_view("GET http://svc.test/a HTTP/1.1\r\nHost: svc.test\r\n\r\n")),
                                  use_tuple);
        if (co_await read_until("/a")) co_return;
        net::steady_timer pause(r.ioc, quiet);
        co_await pause.async_wait(use_tuple);
        if (!after_quiet()) co_return;
        co_await net::async_write(c, net::buffer(std::string_view("GET http://svc.test/b HTTP/1.1\r\nHost: svc.test\r\n\r\n")),
                                  use_tuple);
        auto const answered = std::chrono::steady_clock::now();
        if (co_await read_until("/b")) co_return;
        auto const rec = co_await read_until("never");
        if (rec == net::error::eof || rec == net::error::connection_reset)
          *closed_after = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - answered);
      },
      [&r](std::exception_ptr) { r.ioc.stop(); });
  r.ioc.restart();
  r.ioc.run();
  return in;
}

TEST(ClientSession, AConnectionQuietLongerThanAMomentParksAndKeepsTheRestOfItsIdleTimeout) {
  // Quiet for 1.3 s, past the moment a session waits in its coroutine (1 s): the connection is
  // parked, serves its next request when it comes, and is closed idle_timeout after that.
  rig r("limits:\n  idle_timeout: 2s\n");
  r.serve({nullptr, echo_target_door});
  std::optional<std::chrono::milliseconds> closed_after;
  auto const in = quiet_then_again(r, 1300ms, [] { return true; }, &closed_after);
  EXPECT_EQ(count(in, "HTTP/1.1 200 OK"), 2u) << in;
  ASSERT_TRUE(closed_after) << "the idle timeout closes a parked connection too";
  // Not at the park, and not a whole idle_timeout after it either: the deadline runs on.
  EXPECT_GE(*closed_after, 1500ms);
  EXPECT_EQ(r.sessions.active(), 0u);
}

TEST(ClientSession, ADrainClosesAParkedConnection) {
  rig r;
  r.serve({nullptr, echo_target_door});
  std::optional<std::chrono::milliseconds> closed_after;
  // Parked, then drained before /b is sent: closed, /b never answered.
  auto const in = quiet_then_again(
      r, 1300ms,
      [&r] {
        r.sessions.begin_drain();
        return true;
      },
      &closed_after);
  EXPECT_EQ(count(in, "HTTP/1.1 200 OK"), 1u) << in;
  EXPECT_EQ(r.sessions.active(), 0u);
}

TEST(ClientSession, ConnectTunnelsBytesBothWaysWithHalfClose) {
  rig r;
  // The target: reads to the client's half-close, then answers with what it got.
  rebound::tcp_acceptor target(r.ioc, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
  net::co_spawn(
      r.ioc,
      [&target]() -> net::awaitable<void> {
        auto [ec, s] = co_await target.async_accept(use_tuple);
        if (ec) co_return;
        std::string got;
        std::array<char, 1024> chunk;
        for (;;) {
          auto [rec, n] = co_await s.async_read_some(net::buffer(chunk), use_tuple);
          got.append(chunk.data(), n);
          if (rec) break;
        }
        got = "got:" + got;
        co_await net::async_write(s, net::buffer(got), use_tuple);
      },
      net::detached);
  r.serve({nullptr, nullptr});
  auto const authority = "127.0.0.1:" + std::to_string(target.local_endpoint().port());
  bool closed = false;
  auto const in = r.talk("CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\nhello through", nullptr,
                         &closed, true);
  EXPECT_TRUE(in.starts_with("HTTP/1.1 200 Connection established\r\n")) << in;
  EXPECT_TRUE(in.ends_with("\r\n\r\ngot:hello through")) << "bytes sent with the head go through first: " << in;
  EXPECT_TRUE(closed) << "the target's close ends the tunnel";
}

TEST(ClientSession, R4_AConnectThatIsRefusedIsRetriedThenAnswered502WithTheClientsId) {
  rig r("defaults:\n  max_retries: 1\n  backoff: {base: 1ms, cap: 2ms}\n");
  // A port nothing listens on: bound, then closed.
  std::uint16_t port = 0;
  {
    rebound::tcp_acceptor gone(r.ioc, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
    port = gone.local_endpoint().port();
  }
  r.serve({nullptr, nullptr});
  auto const authority = "127.0.0.1:" + std::to_string(port);
  auto const in =
      r.talk("CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\nX-Request-ID: tunnel-7\r\n\r\n",
             [](const std::string& s) { return s.find("\r\n\r\n") != std::string::npos; });
  EXPECT_TRUE(in.starts_with("HTTP/1.1 502 ")) << in;
  EXPECT_NE(in.find("Rebound-Error: connect_refused"), std::string::npos) << in;
  r.log.flush();
  auto const log = r.log_text.str();
  EXPECT_NE(log.find("retry_attempt"), std::string::npos) << "a refused connect is retried (R-4): " << log;
  EXPECT_NE(log.find("tunnel-7"), std::string::npos) << "a tunnel's log lines carry the client's id: " << log;
}

}  // namespace
}  // namespace client_session_test
