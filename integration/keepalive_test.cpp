// Keep-alive on the client side, pooled and reused upstream connections, concurrency.
#include "helpers.hpp"

#include <atomic>
#include <mutex>
#include <thread>

namespace itest::keepalive_test {
namespace {

TEST(KeepAlive, ThousandSequentialRequestsOnOneClientConnectionReuseUpstreamConnections) {
  ScriptedUpstream up;
  ReboundProcess rb;
  HttpClient client(rb.port());
  for (int i = 0; i < 1000; ++i) {
    std::string path = "/seq/" + std::to_string(i);
    Response r;
    ASSERT_NO_THROW(r = client.get("http://" + up.authority() + path)) << "request " << i;
    ASSERT_EQ(r.status, 200u) << "request " << i;
    ASSERT_EQ(r.body, "ok " + path);
    ASSERT_FALSE(client.closed()) << "rebound closed the client connection after request " << i;
  }
  EXPECT_EQ(up.request_count(), 1000u);
  EXPECT_LE(up.connections(), 5u) << "upstream connections are not being pooled";
}

TEST(KeepAlive, HundredConcurrentClientsEachDoingSeveralRequests) {
  ScriptedUpstream up;
  ReboundProcess rb;
  constexpr int clients = 100;
  constexpr int per_client = 5;
  std::atomic<int> ok{0};
  std::mutex mutex;
  std::vector<std::string> failures;
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      try {
        HttpClient client(rb.port(), 30s);
        for (int j = 0; j < per_client; ++j) {
          std::string path = "/c/" + std::to_string(i) + "/" + std::to_string(j);
          auto r = client.get("http://" + up.authority() + path);
          if (r.status == 200 && r.body == "ok " + path) {
            ++ok;
          } else {
            std::lock_guard lock(mutex);
            failures.push_back(path + ": status " + std::to_string(r.status) + " body " + r.body.substr(0, 200));
          }
        }
      } catch (const std::exception& e) {
        std::lock_guard lock(mutex);
        failures.push_back("client " + std::to_string(i) + ": " + e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), clients * per_client);
  for (std::size_t k = 0; k < failures.size() && k < 10; ++k) ADD_FAILURE() << failures[k];
  EXPECT_EQ(up.request_count(), static_cast<std::size_t>(clients * per_client));
  EXPECT_EQ(admin_get_status(rb.admin_port(), "/healthz"), 200u);
}

TEST(Pool, SequentialClientConnectionsReuseUpstreamConnection) {
  ScriptedUpstream up;
  ReboundProcess rb;
  for (int i = 0; i < 20; ++i) {
    auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/pooled"));
    ASSERT_TRUE(r) << "request " << i;
    ASSERT_EQ(r->status, 200u);
  }
  EXPECT_EQ(up.request_count(), 20u);
  EXPECT_LE(up.connections(), 4u) << "upstream connections are not reused across client connections";
}

TEST(Pool, UpstreamConnectionClosedByServerIsNotReused) {
  ScriptedUpstream up;
  Script s;
  s.close_after = true;
  s.body = "then close";
  up.on("/close", s);
  ReboundProcess rb;
  HttpClient client(rb.port());
  for (int i = 0; i < 5; ++i) {
    Response r;
    ASSERT_NO_THROW(r = client.get("http://" + up.authority() + "/close")) << "request " << i;
    EXPECT_EQ(r.status, 200u) << "request " << i;
    EXPECT_EQ(r.body, "then close");
    ASSERT_FALSE(client.closed()) << "the upstream's Connection: close is hop-by-hop";
  }
  EXPECT_EQ(up.request_count(), 5u);
  EXPECT_EQ(up.connections(), 5u);
}

TEST(Pool, ConnectionIsNotReusedAfterAttemptTimeout) {
  ScriptedUpstream up;
  auto gate = std::make_shared<Gate>();
  Script slow;
  slow.gate = gate;
  slow.body = "stale response to /slow";
  up.on("/slow", slow);
  ReboundOptions o;
  o.attempt_timeout = "500ms";
  ReboundProcess rb(o);
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/slow"), 25s);
  EXPECT_TRUE(IsReboundError(r, 504, {"attempt_timeout"}));
  gate->open();  // the late answer goes to the timed-out connection if it is still open
  HttpClient client(rb.port());
  for (int i = 0; i < 5; ++i) {
    std::string path = "/fast" + std::to_string(i);
    Response f;
    ASSERT_NO_THROW(f = client.get("http://" + up.authority() + path));
    EXPECT_EQ(f.status, 200u);
    EXPECT_EQ(f.body, "ok " + path) << "a timed-out upstream connection was pooled and reused";
  }
}

TEST(Pool, IdleUpstreamConnectionClosedByServerIsNotReused) {
  ScriptedUpstream up;
  Script s;
  s.close_silently = true;  // keep-alive response, then the upstream closes the idle connection
  up.on("/first", s);
  ReboundProcess rb;
  HttpClient client(rb.port());
  auto r1 = client.get("http://" + up.authority() + "/first");
  EXPECT_EQ(r1.status, 200u);
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (up.closed_connections() < 1 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(up.closed_connections(), 1u);
  Response r2;
  ASSERT_NO_THROW(r2 = client.get("http://" + up.authority() + "/second"));
  EXPECT_EQ(r2.status, 200u) << "Rebound-Error: " << r2.header("Rebound-Error").value_or("<none>");
  EXPECT_EQ(r2.body, "ok /second");
}

}  // namespace
}  // namespace itest::keepalive_test
