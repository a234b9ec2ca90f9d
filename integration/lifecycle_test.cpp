// Admin endpoints, graceful drain on SIGTERM/SIGINT, robustness against garbage.
#include "helpers.hpp"

#include <algorithm>
#include <csignal>
#include <fstream>
#include <iterator>
#include <random>

namespace itest::lifecycle_test {
namespace {

// Polls readyz until it answers `status` (bounded); returns the last status seen.
unsigned poll_readyz_until(const ReboundProcess& rb, unsigned status, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  unsigned last = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    last = admin_get_status(rb.admin_port(), "/readyz", 1s);
    if (last == status) return last;
    std::this_thread::sleep_for(20ms);
  }
  return last;
}

TEST(Admin, HealthzAndReadyzAnswer200WhileServing) {
  ReboundProcess rb;
  EXPECT_EQ(admin_get_status(rb.admin_port(), "/healthz"), 200u);
  EXPECT_EQ(admin_get_status(rb.admin_port(), "/readyz"), 200u);
}

/// The environment the running process `pid` started with, one entry a line. glibc splits
/// GLIBC_TUNABLES at its colons in place, so its second tunable shows as a line of its own.
std::string environment_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::replace(all.begin(), all.end(), '\0', '\n');
  return "\n" + all;
}

TEST(Startup, ItRunsWithADeeperMallocCacheAndKeepsAnOperatorsOwnTunables) {
  // Started again with the cache depth set (same process id), serving as before.
  ScriptedUpstream up;
  ReboundProcess rb;
  auto const env = environment_of(rb.pid());
  EXPECT_NE(env.find("\nGLIBC_TUNABLES=glibc.malloc.tcache_count=64\n"), std::string::npos) << env;
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/t"));
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u);
  // An operator's other tunables are kept beside it; their own depth wins.
  ReboundOptions other;
  other.env = {"GLIBC_TUNABLES=glibc.malloc.arena_max=2"};
  ReboundProcess with_other(other);
  auto const other_env = environment_of(with_other.pid());
  EXPECT_NE(other_env.find("\nGLIBC_TUNABLES=glibc.malloc.arena_max=2\nglibc.malloc.tcache_count=64\n"),
            std::string::npos)
      << other_env;
  ReboundOptions own;
  own.env = {"GLIBC_TUNABLES=glibc.malloc.tcache_count=16"};
  ReboundProcess with_own(own);
  auto const own_env = environment_of(with_own.pid());
  EXPECT_NE(own_env.find("\nGLIBC_TUNABLES=glibc.malloc.tcache_count=16\n"), std::string::npos) << own_env;
  EXPECT_EQ(own_env.find("tcache_count=64"), std::string::npos) << own_env;
}

TEST(Startup, ListenAddressInUseExits1WithAClearMessage) {
  TcpServer holder(echo_handler());  // holds the port rebound is told to listen on
  auto const admin = free_port();
  auto r = run_with_config("listen: " + holder.authority() + "\nadmin: 127.0.0.1:" + std::to_string(admin) + "\n");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("rebound: cannot start: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("in use"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
}

TEST(Admin, WorkersZeroStartsAndServes) {
  ScriptedUpstream up;
  ReboundOptions o;
  o.workers = 0;
  ReboundProcess rb(o);
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/w"));
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(rb.terminate(), 0);
}

TEST(Drain, SigtermFinishesInFlightRequestThenExits0) {
  ScriptedUpstream up;
  auto gate = std::make_shared<Gate>();
  Script s;
  s.gate = gate;
  s.body = "finished during drain";
  up.on("/slow", s);
  ReboundOptions o;
  o.drain_timeout = "30s";
  o.attempt_timeout = "60s";
  ReboundProcess rb(o);

  RawConnection c(rb.port());
  ASSERT_TRUE(c.send(absolute_request("GET", up.authority(), "/slow")));
  ASSERT_TRUE(up.wait_for_requests(1)) << "the slow request never reached the upstream";
  rb.signal(SIGTERM);

  EXPECT_EQ(poll_readyz_until(rb, 503, 10s), 503u) << "readyz should answer 503 while draining";
  EXPECT_FALSE(rb.wait_exit(0ms).has_value()) << "exited with a request in flight";

  // No new work is taken while draining: the connection is refused, closed, or left unanswered.
  // (Once rebound closed its listener another process may bind the port: only a response that
  // came through rebound, or a request that reached our upstream, counts against it.)
  if (auto late = RawConnection::try_connect(rb.port())) {
    late->send(absolute_request("GET", up.authority(), "/late"));
    auto r = late->read_response(2s);
    EXPECT_FALSE(r && r->status == 200 && r->header("Via") == "1.1 rebound")
        << "a new request was served while draining: " << r->body;
  }
  EXPECT_EQ(up.request_count("/late"), 0u) << "a request sent during the drain reached the upstream";

  gate->open();
  auto r = c.read_response(15s);
  ASSERT_TRUE(r) << "the in-flight request did not complete during the drain";
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->body, "finished during drain");
  auto code = rb.wait_exit(20s);
  ASSERT_TRUE(code.has_value()) << "rebound did not exit after its last request finished";
  EXPECT_EQ(*code, 0);
}

// A request waiting out a backoff is answered at once when a drain begins, not after the
// wait: the drain reaches the wait through its cancellation slot. The upstream's Retry-After
// makes the wait 20 s (R-5) and drain_timeout is 30 s: only a cut wait answers within seconds.
TEST(Drain, APendingRetryWaitIsCutShortAndTheClientToldWhy) {
  ScriptedUpstream up;
  Script busy;
  busy.status = 503;
  busy.headers = {{"Retry-After", "20"}};
  up.on("/busy", busy);
  ReboundOptions o;
  o.drain_timeout = "30s";
  o.extra = "defaults:\n  max_retries: 3\n  total_timeout: 30s\n  backoff: {base: 10ms, cap: 50ms}\n";
  ReboundProcess rb(o);
  RawConnection c(rb.port());
  ASSERT_TRUE(c.send(absolute_request("GET", up.authority(), "/busy")));
  ASSERT_TRUE(rb.wait_for_log("\"backoff_ms\":20000")) << "the 503 was not scheduled for a retry in 20 s";
  auto const signalled = std::chrono::steady_clock::now();
  rb.signal(SIGTERM);
  auto r = c.read_response(20s);
  ASSERT_TRUE(r) << "no answer after the drain began";
  EXPECT_LT(std::chrono::steady_clock::now() - signalled, 10s) << "the answer waited out the backoff";
  EXPECT_TRUE(IsReboundError(r, 504, {"deadline_exceeded"}));
  EXPECT_NE(r->body.find("shutting down before the retry"), std::string::npos) << r->body;
  EXPECT_EQ(up.request_count("/busy"), 1u) << "a drain sends no further retry";
  auto code = rb.wait_exit(20s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0);
}

TEST(Drain, SigintAlsoDrainsAndExits0) {
  ScriptedUpstream up;
  ReboundProcess rb;
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/x"));
  ASSERT_TRUE(r) << last_exchange_error();
  rb.signal(SIGINT);
  auto code = rb.wait_exit(20s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0);
}

TEST(Drain, InFlightRequestBeyondDrainTimeoutIsCutAndExitIs0) {
  ScriptedUpstream up;
  auto gate = std::make_shared<Gate>();  // never opened
  Script s;
  s.gate = gate;
  up.on("/stuck", s);
  ReboundOptions o;
  o.drain_timeout = "1s";
  o.attempt_timeout = "60s";
  ReboundProcess rb(o);
  RawConnection c(rb.port());
  ASSERT_TRUE(c.send(absolute_request("GET", up.authority(), "/stuck")));
  ASSERT_TRUE(up.wait_for_requests(1));
  rb.signal(SIGTERM);
  auto code = rb.wait_exit(20s);
  ASSERT_TRUE(code.has_value()) << "rebound did not exit 20 s after SIGTERM with drain_timeout: 1s";
  EXPECT_EQ(*code, 0);
  EXPECT_TRUE(c.wait_closed(5s)) << "the cut request's client connection should be closed";
}

TEST(Drain, IdleKeepAliveClientDoesNotHoldUpExit) {
  ScriptedUpstream up;
  ReboundOptions o;
  o.drain_timeout = "60s";
  ReboundProcess rb(o);
  RawConnection idle(rb.port());
  ASSERT_TRUE(idle.send(absolute_request("GET", up.authority(), "/once")));
  auto r = idle.read_response();
  ASSERT_TRUE(r) << idle.last_error();
  EXPECT_EQ(r->status, 200u);
  rb.signal(SIGTERM);
  auto code = rb.wait_exit(15s);
  ASSERT_TRUE(code.has_value()) << "an idle keep-alive connection kept rebound draining";
  EXPECT_EQ(*code, 0);
}

// Regression: a drain closed idle keep-alive connections without reading requests already in
// their sockets (63 of 64 connections of a fast keep-alive loop lost one). Now a request that
// reached an idle connection before the drain is answered, with Connection: close.
//
// The order is made deterministic instead of racing the signal. One worker, so one session
// list, in which the canary (connected last) is the last entry: the drain closes it last, so
// once the canary sees its close, the drain has dealt with every other connection. On half the
// connections only the first bytes of the second request are in rebound's socket when the
// drain runs (acknowledged by rebound's kernel before SIGTERM); the rest follows once the
// drain is known to have run. Closing those connections would lose their request every
// time, whether rebound had read the first bytes or not. The other half sent their whole
// second request just before SIGTERM (the reported race): answered either before the drain or
// during it, never dropped. (That half alone cannot be made deterministic from outside: whether
// the worker read those bytes before the drain ran is up to the scheduler. A drain that closes
// idle sessions with unread bytes loses some of them in most runs, not in all.)
TEST(Drain, RequestsThatReachedIdleKeepAliveConnectionsBeforeTheDrainAreAnsweredNotDropped) {
  ScriptedUpstream up;
  ReboundOptions o;
  o.workers = 1;
  o.drain_timeout = "10s";
  ReboundProcess rb(o);
  constexpr std::size_t n = 32;
  std::vector<RawConnection> conns;
  for (std::size_t i = 0; i < n; ++i) {
    conns.emplace_back(rb.port());
    ASSERT_TRUE(conns.back().send(absolute_request("GET", up.authority(), "/first")));
    auto r = conns.back().read_response(5s);
    ASSERT_TRUE(r) << conns.back().last_error();
    ASSERT_EQ(r->status, 200u);
    ASSERT_FALSE(r->header("Connection") == "close");
  }
  RawConnection canary(rb.port());
  ASSERT_TRUE(canary.send(absolute_request("GET", up.authority(), "/canary")));
  ASSERT_TRUE(canary.read_response(5s));

  auto second = [&](std::size_t i) { return absolute_request("GET", up.authority(), "/second-" + std::to_string(i)); };
  auto split = [](std::size_t i) { return i % 2 == 1; };  // odd: first bytes before the drain, the rest after
  constexpr std::size_t first_bytes = 20;                 // "GET http://127.0.0.1:" ...
  for (std::size_t i = 1; i < n; i += 2) ASSERT_TRUE(conns[i].send(second(i).substr(0, first_bytes)));
  for (std::size_t i = 1; i < n; i += 2)
    ASSERT_TRUE(conns[i].wait_acknowledged(5s)) << "rebound's kernel never acknowledged the first bytes";
  for (std::size_t i = 0; i < n; i += 2) ASSERT_TRUE(conns[i].send(second(i)));
  rb.signal(SIGTERM);

  ASSERT_TRUE(canary.wait_closed(5s)) << "the drain should close an idle connection with nothing pending";
  for (std::size_t i = 1; i < n; i += 2)
    conns[i].send(second(i).substr(first_bytes));  // the reads below tell if it was closed

  for (std::size_t i = 0; i < n; ++i) {
    auto r = conns[i].read_response(5s);
    ASSERT_TRUE(r) << "connection " << i
                   << (split(i) ? " (request begun before the drain)" : " (request sent with SIGTERM)")
                   << " lost its second request: " << conns[i].last_error();
    EXPECT_EQ(r->status, 200u);
    EXPECT_EQ(r->body, "ok /second-" + std::to_string(i));
    if (split(i)) {
      EXPECT_EQ(r->header("Connection").value_or(""), "close") << "answered during the drain";
    }
    EXPECT_TRUE(conns[i].wait_closed(5s)) << "connection " << i << " should close after its answer";
  }
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(up.request_count("/second-" + std::to_string(i)), 1u);
  conns.clear();  // rebound's lingering close ends at our close
  auto code = rb.wait_exit(15s);
  ASSERT_TRUE(code.has_value()) << "rebound did not exit after the drain";
  EXPECT_EQ(*code, 0);
}

// A response whose head went out before the drain cannot say Connection: close, so the client
// may already have sent its next request behind it (pipelined). That request is in rebound's
// socket or buffer when the response ends: it is answered with Connection: close, not read
// and dropped by the closing connection.
TEST(Drain, ARequestWaitingBehindAResponseStartedBeforeTheDrainIsAnsweredNotDropped) {
  ScriptedUpstream up;
  auto gate = std::make_shared<Gate>();
  Script stream;
  stream.chunks = {"begun-before-the-drain ", "ended-during-it"};
  stream.mid_body_gate = gate;
  up.on("/stream", stream);
  ReboundOptions o;
  o.workers = 1;
  o.drain_timeout = "10s";
  ReboundProcess rb(o);
  RawConnection c(rb.port());
  ASSERT_TRUE(c.send(absolute_request("GET", up.authority(), "/stream")));
  ASSERT_TRUE(c.read_until_contains("begun-before-the-drain", 5s)) << c.last_error();
  ASSERT_TRUE(c.send(absolute_request("GET", up.authority(), "/behind")));
  ASSERT_TRUE(c.wait_acknowledged(5s));
  RawConnection canary(rb.port());  // after c in the worker's session list
  ASSERT_TRUE(canary.send(absolute_request("GET", up.authority(), "/canary")));
  ASSERT_TRUE(canary.read_response(5s));
  rb.signal(SIGTERM);
  ASSERT_TRUE(canary.wait_closed(5s)) << "the drain should close an idle connection with nothing pending";
  gate->open();

  auto first = c.read_response(5s);
  ASSERT_TRUE(first) << c.last_error();
  EXPECT_EQ(first->status, 200u);
  EXPECT_EQ(first->body, "begun-before-the-drain ended-during-it");
  EXPECT_FALSE(first->header("Connection") == "close") << "its head went out before the drain";
  auto behind = c.read_response(5s);
  ASSERT_TRUE(behind) << "the request waiting behind the response was dropped: " << c.last_error();
  EXPECT_EQ(behind->status, 200u);
  EXPECT_EQ(behind->body, "ok /behind");
  EXPECT_EQ(behind->header("Connection").value_or(""), "close");
  EXPECT_TRUE(c.wait_closed(5s));
  c.shutdown_write();  // rebound's lingering close ends at our end of stream
  auto code = rb.wait_exit(15s);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 0);
}

TEST(Robustness, GarbageBytesNeverCrashTheProcess) {
  ScriptedUpstream up;
  ReboundProcess rb;
  std::string a = up.authority();
  std::vector<std::string> inputs = {
      "\r\n\r\n\r\n\r\n",
      std::string("\0\0\0\0\xff\xfe\x01\x02", 8),
      "GET / HTTP/9.9\r\nHost: " + a + "\r\n\r\n",
      "GET http://" + a + "/x HTTP/1.1\r\nHost: " + std::string(70000, 'h') + "\r\n\r\n",
      "GET http://" + a + "/x HTTP/1.1\r\nX-Nul: a" + std::string(1, '\0') + "b\r\n\r\n",
      "CONNECT :0 HTTP/1.1\r\n\r\n",
      "CONNECT 127.0.0.1:99999 HTTP/1.1\r\nHost: 127.0.0.1:99999\r\n\r\n",
      "CONNECT [::1 HTTP/1.1\r\n\r\n",
      "GET http://[::1/x HTTP/1.1\r\nHost: x\r\n\r\n",
      "GET http://user:pw@" + a + ":99999999999/x HTTP/1.1\r\nHost: a\r\n\r\n",
      "GET http:///x HTTP/1.1\r\nHost: \r\n\r\n",
      "GET ftp://" + a + "/x HTTP/1.1\r\nHost: " + a + "\r\n\r\n",
      "POST http://" + a + "/x HTTP/1.1\r\nHost: " + a + "\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n",
      "POST http://" + a + "/x HTTP/1.1\r\nHost: " + a +
          "\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffffff\r\n",
      "POST http://" + a + "/x HTTP/1.1\r\nHost: " + a + "\r\nContent-Length: -1\r\n\r\n",
      "POST http://" + a + "/x HTTP/1.1\r\nHost: " + a + "\r\nContent-Length: 99999999999999999999999\r\n\r\n",
      "GET http://" + a + "/x HTTP/1.1\r\nHost: " + a + "\r\n folded: continuation\r\n\r\n",
      "GET http://" + a + "/x HTTP/1.1\r\nHo",                                                       // cut mid-head
      "POST http://" + a + "/x HTTP/1.1\r\nHost: " + a + "\r\nContent-Length: 50\r\n\r\nonly-part",  // cut mid-body
  };
  std::mt19937 rng(20240611);
  for (int i = 0; i < 20; ++i) {
    std::string junk(1 + rng() % 8192, '\0');
    for (auto& ch : junk) ch = static_cast<char>(rng() % 256);
    if (i % 3 == 0) junk = "GET " + junk;
    if (i % 4 == 0) junk += "\r\n\r\n";
    inputs.push_back(junk);
  }
  std::vector<RawConnection> conns;
  for (auto const& in : inputs) {
    conns.emplace_back(rb.port());
    conns.back().send(in);
    conns.back().shutdown_write();
  }
  auto deadline = std::chrono::steady_clock::now() + 10s;
  for (auto& c : conns) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    c.read_until_eof(std::max(left, 1ms));
  }
  EXPECT_FALSE(rb.wait_exit(0ms).has_value()) << "rebound died on garbage input";
  EXPECT_EQ(admin_get_status(rb.admin_port(), "/healthz"), 200u);
  auto r = raw_exchange(rb.port(), absolute_request("GET", a, "/still-alive"));
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->body, "ok /still-alive");
}

}  // namespace
}  // namespace itest::lifecycle_test
