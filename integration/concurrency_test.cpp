// Issue 51 end to end: the concurrency limit per dependency against real sockets. Requests
// are held in the upstream by a gate, so "the limit is reached" is a state the test makes,
// not a race it hopes to win.
#include "async_helpers.hpp"

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace itest::concurrency_test {
namespace {

ReboundOptions limited(std::uint16_t upstream, const std::string& concurrency, int workers = 1) {
  ReboundOptions o;
  o.workers = workers;
  o.extra = "defaults:\n"
            "  backoff: {base: 5ms, cap: 20ms}\n"
            "  attempt_timeout: 10s\n"
            "dependencies:\n"
            "  svc:\n"
            "    hosts: [svc.test]\n"
            "    origin: http://127.0.0.1:" +
            std::to_string(upstream) +
            "\n"
            "    budget: {min_retries: 100000}\n"
            "    circuit_breaker: {mode: 'off'}\n"
            "    concurrency: " +
            concurrency + "\n";
  return o;
}

/// `/slow` answers only once the returned gate is opened: each request to it holds a slot.
std::shared_ptr<Gate> held_at_slow(ScriptedUpstream& up) {
  auto held = std::make_shared<Gate>();
  Script slow;
  slow.body = "slow";
  slow.gate = held;
  up.on("/slow", slow);
  return held;
}

std::string get(std::string_view path) { return absolute_request("GET", "svc.test", path); }

std::string admin_get(ReboundProcess& rb, const std::string& path) {
  HttpClient admin(rb.admin_port());
  return admin.get(path).body;
}

}  // namespace

TEST(Concurrency, ARequestPastAFixedLimitIsAnswered503AtOnceAndNotRetried) {
  ScriptedUpstream up;
  auto held = held_at_slow(up);
  up.on("/fast", Script{});
  auto o = limited(up.port(), "{mode: fixed, limit: 2}");
  o.extra += "    max_retry_body: 4\n";  // a longer body streams through once (forward_once)
  ReboundProcess rb(o);

  auto a = std::async(std::launch::async, [&] { return raw_exchange(rb.port(), get("/slow"), 20s); });
  auto b = std::async(std::launch::async, [&] { return raw_exchange(rb.port(), get("/slow"), 20s); });
  ASSERT_TRUE(up.wait_for_requests(2));

  // The single-attempt path for a body sent once needs a slot as well.
  auto once = raw_exchange(rb.port(), absolute_request("POST", "svc.test", "/fast", {}, "a body of some length"), 10s);
  ASSERT_TRUE(once) << last_exchange_error();
  EXPECT_EQ(once->status, 503u);
  EXPECT_EQ(once->header("Rebound-Error"), "concurrency_limited");
  EXPECT_EQ(once->header("Retry-After"), "1");

  auto r = raw_exchange(rb.port(), get("/fast"), 10s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 503u);
  EXPECT_EQ(r->header("Rebound-Error"), "concurrency_limited");
  EXPECT_EQ(r->header("Retry-After"), "1");
  EXPECT_EQ(r->header("Rebound-Attempts"), "0");
  EXPECT_EQ(r->header("Rebound-Overloaded"), "1");  // the layer above does not retry it either
  EXPECT_NE(r->body.find("concurrency limit"), std::string::npos) << r->body;
  EXPECT_EQ(up.request_count("/fast"), 0u);  // nothing was sent, and nothing was retried

  auto const deps = admin_get(rb, "/dependencies");
  EXPECT_NE(deps.find(R"("concurrency":{"mode":"fixed","limit":2,"in_flight":2})"), std::string::npos) << deps;

  held->open();
  for (auto* f : {&a, &b}) {
    auto done = f->get();
    ASSERT_TRUE(done) << last_exchange_error();
    EXPECT_EQ(done->status, 200u);
  }
  // Slots come back with the answers: the next request goes through.
  auto after = raw_exchange(rb.port(), get("/fast"), 10s);
  ASSERT_TRUE(after) << last_exchange_error();
  EXPECT_EQ(after->status, 200u);
  auto const metrics = admin_get(rb, "/metrics");
  EXPECT_NE(metrics.find("requests_limited_total{dependency=\"svc\",service=\"unknown_service\"} 2"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("dependency_concurrency_limit{dependency=\"svc\",service=\"unknown_service\"} 2"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("dependency_requests_in_flight{dependency=\"svc\",service=\"unknown_service\"} 0"), std::string::npos)
      << metrics;
}

// A retry needs a slot like any request: one whose slot was taken by another request during
// its backoff is not sent, and the client learns why.
TEST(Concurrency, ARetryWhoseSlotWasTakenDuringItsBackoffIsNotSent) {
  ScriptedUpstream up;
  auto held = held_at_slow(up);
  Script busy;
  busy.status = 503;
  busy.body = "busy";
  up.on("/busy", busy);
  auto o = limited(up.port(), "{mode: fixed, limit: 2}");
  // The retry waits 1-2 s (decorrelated jitter starts at base): time to fill the lane.
  o.extra += "    backoff: {base: 1s, cap: 2s, jitter: decorrelated}\n";
  ReboundProcess rb(o);

  auto a = std::async(std::launch::async, [&] { return raw_exchange(rb.port(), get("/slow"), 20s); });
  ASSERT_TRUE(up.wait_for_requests(1));
  auto r = std::async(std::launch::async, [&] { return raw_exchange(rb.port(), get("/busy"), 20s); });
  ASSERT_TRUE(up.wait_for_requests(2));
  ASSERT_TRUE(rb.wait_for_log("\"retry_attempt\""));  // /busy answered 503 and gave its slot back
  auto b = std::async(std::launch::async, [&] { return raw_exchange(rb.port(), get("/slow"), 20s); });
  ASSERT_TRUE(up.wait_for_requests(3));  // the lane is full again
  auto busy_answer = r.get();
  ASSERT_TRUE(busy_answer) << last_exchange_error();
  EXPECT_EQ(busy_answer->status, 503u);
  EXPECT_EQ(busy_answer->header("Rebound-Error"), "concurrency_limited") << busy_answer->body;
  EXPECT_EQ(busy_answer->header("Rebound-Attempts"), "1");
  EXPECT_EQ(up.request_count("/busy"), 1u) << "a retry went out past the limit";
  held->open();
  for (auto* f : {&a, &b}) {
    auto done = f->get();
    ASSERT_TRUE(done) << last_exchange_error();
    EXPECT_EQ(done->status, 200u);
  }
}

// Adaptive: the minimum RTT is measured at start (probing at min_limit), then, with the
// latency at that minimum, the limit grows; both are visible on /dependencies.
TEST(Concurrency, AdaptiveMeasuresTheMinimumRttThenGrowsTheLimit) {
  ScriptedUpstream up;
  Script s;
  s.delay = 20ms;
  up.on("/item", s);
  ReboundProcess rb(limited(up.port(), "{mode: adaptive, min_limit: 2, max_limit: 100}"));

  auto deps = admin_get(rb, "/dependencies");
  EXPECT_NE(deps.find(R"("concurrency":{"mode":"adaptive","limit":2,"in_flight":0,"min_rtt_ms":null,"probing":true})"),
            std::string::npos)
      << deps;
  for (int i = 0; i < 60; ++i) {
    auto r = raw_exchange(rb.port(), get("/item"), 10s);
    ASSERT_TRUE(r) << last_exchange_error();
    ASSERT_EQ(r->status, 200u) << r->body;
  }
  deps = admin_get(rb, "/dependencies");
  EXPECT_NE(deps.find(R"("probing":false)"), std::string::npos) << deps;
  auto const at = deps.find("\"min_rtt_ms\":");
  ASSERT_NE(at, std::string::npos) << deps;
  double const min_rtt = std::stod(deps.substr(at + 13));
  EXPECT_GE(min_rtt, 20.0) << deps;  // at least the upstream's delay
  EXPECT_LT(min_rtt, 1000.0) << deps;
  auto const lim = deps.find("\"limit\":");
  ASSERT_NE(lim, std::string::npos);
  EXPECT_GT(std::stoi(deps.substr(lim + 8)), 2) << deps;  // grown past min_limit
}

// A handed-over task that meets the limit is postponed by its own backoff: not an attempt,
// not dead-lettered; it is delivered once there is room.
TEST(Concurrency, AHandedOverTaskAtTheLimitIsPostponedNotDeadLettered) {
  ScriptedUpstream up;
  auto held = held_at_slow(up);
  up.on("/hook", respond(200));
  store_dir store;
  auto o = hooks_to(up, store,
                    "    concurrency: {mode: fixed, limit: 1}\n"
                    "    routes:\n      - match: {path_prefix: /slow}\n        context: sync\n");
  o.workers = 1;
  ReboundProcess rb(o);

  auto a = std::async(std::launch::async,
                      [&] { return raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/slow"), 20s); });
  ASSERT_TRUE(up.wait_for_requests(1));  // the one slot is taken
  auto const id = accepted_task(raw_exchange(rb.port(), post(up.authority(), "/hook", "{}")), rb);
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(rb.wait_for_log("\"reason\":\"concurrency limit\"")) << rb.stdout_text();
  EXPECT_EQ(up.request_count("/hook"), 0u);
  held->open();
  auto const done = task_until(rb, id, "SUCCEEDED");
  ASSERT_EQ(status_of(done), "SUCCEEDED") << rb.stdout_text();
  EXPECT_EQ(done->get("attempts")->n, 1) << "a postponement is not an attempt";
  EXPECT_EQ(up.request_count("/hook"), 1u);
  auto r = a.get();
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u);
}

namespace {

/** An upstream with a capacity: `capacity` requests are served at a time, `service` each;
    the others wait their turn, as a thread pool behind a queue does. Keep-alive, GET only. */
class capacity_upstream {
 public:
  capacity_upstream(unsigned capacity, std::chrono::milliseconds service)
      : capacity_(capacity), service_(service), server_([this](Conn& c, TcpServer& s) { serve(c, s); }) {}
  std::uint16_t port() const { return server_.port(); }

 private:
  void serve(Conn& conn, TcpServer& server) {
    std::string in;
    for (;;) {
      auto const end = in.find("\r\n\r\n");
      if (end == std::string::npos) {
        auto got = conn.read_some();
        if (got.empty()) return;
        in += got;
        continue;
      }
      in.erase(0, end + 4);
      {
        std::unique_lock lock(mutex_);
        // Polled: a stopping server notifies nobody, and its destructor joins this thread.
        while (busy_ >= capacity_ && !server.stopping()) cv_.wait_for(lock, 50ms);
        ++busy_;
      }
      server.sleep_for(service_);
      {
        std::lock_guard lock(mutex_);
        --busy_;
      }
      cv_.notify_one();
      if (!conn.write_all("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")) return;
    }
  }

  unsigned capacity_;
  std::chrono::milliseconds service_;
  std::mutex mutex_;
  std::condition_variable cv_;
  unsigned busy_ = 0;
  TcpServer server_;
};

}  // namespace

// Against a real upstream that serves 4 at a time, 32 clients asking without pause: the
// adaptive limit settles near the capacity instead of letting all 32 queue in the upstream,
// and the rest are answered 503 at once. The bounds are wide: what is proven is "near the
// capacity", not a number a loaded machine might miss. A suite of its own, kept out of the
// ThreadSanitizer pass (CMakeLists.txt's threaded_suites): the limit follows latency, and the
// minimum RTT a probe measures includes rebound's own time, which TSan's instrumentation
// stretches 5-15x and unevenly (a TSan run measured 38 ms against a 20 ms upstream and let the
// limit reach 17). The shared state this suite's other tests exercise is what TSan is for.
TEST(ConcurrencyConvergence, AdaptiveSettlesNearTheCapacityOfARealUpstream) {
  capacity_upstream up(4, 20ms);
  ReboundProcess rb(limited(up.port(), "{mode: adaptive, min_limit: 2, max_limit: 200, probe_interval: 1s}"));
  std::atomic<bool> stop{false};
  std::atomic<unsigned> ok{0}, shed{0}, other{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 32; ++i)
    clients.emplace_back([&] {
      while (!stop) {
        auto r = raw_exchange(rb.port(), get("/item"), 20s);
        if (r && r->status == 200)
          ++ok;
        else if (r && r->header("Rebound-Error") == "concurrency_limited")
          ++shed;
        else
          ++other;
      }
    });
  std::this_thread::sleep_for(4s);
  auto const deps = admin_get(rb, "/dependencies");
  stop = true;
  for (auto& t : clients) t.join();
  auto const lim = deps.find("\"limit\":");
  ASSERT_NE(lim, std::string::npos) << deps;
  auto const limit = std::stoi(deps.substr(lim + 8));
  EXPECT_GE(limit, 2) << deps;
  EXPECT_LE(limit, 16) << deps << " (the upstream serves 4 at a time; 32 clients ask)";
  EXPECT_GT(ok.load(), 100u);
  EXPECT_GT(shed.load(), 0u) << "clients past the limit are answered at once";
  EXPECT_EQ(other.load(), 0u);
}

}  // namespace itest::concurrency_test
