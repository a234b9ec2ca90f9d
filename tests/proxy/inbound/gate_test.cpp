// The inbound door and its idempotency gate (R-6's server side) in process: the session of the
// inbound listener (session_rig.hpp) with the door app/ plugs in, a real SQLite key store on
// a file of its own, and an app on 127.0.0.1 that counts what reaches it.
#include "proxy/inbound/serve.hpp"

#include "proxy/store/sqlite_store.hpp"
#include "tests/proxy/http/session_rig.hpp"
#include "tests/proxy/store/store_calls.hpp"

#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <gtest/gtest.h>

namespace gate_test {
namespace {

using namespace session_rig;
namespace bhttp = boost::beast::http;

/// A port bound before the rig exists, so that its address can go into the rig's config.
struct bound_port {
  net::io_context probe;
  rebound::tcp_acceptor acceptor{probe, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0)};
  std::string authority() const { return "127.0.0.1:" + std::to_string(acceptor.local_endpoint().port()); }
};

/// The app behind the gate: answers each request 201 with `refund-N`, N counting the
/// requests that reached it, so a replayed answer names the call that made it.
struct counting_app {
  counting_app(net::io_context& ioc, bound_port& port) : acceptor(ioc, tcp::v4(), port.acceptor.release()) {
    net::co_spawn(ioc, serve(), net::detached);
  }

  net::awaitable<void> serve() {
    for (;;) {
      auto [ec, s] = co_await acceptor.async_accept(use_tuple);
      if (ec) co_return;
      net::co_spawn(acceptor.get_executor(), answer(std::move(s)), net::detached);
    }
  }
  net::awaitable<void> answer(rebound::tcp_socket s) {
    beast::flat_buffer buffer;
    for (;;) {
      rebound::http::request_message<bhttp::string_body> req;
      auto [ec, n] = co_await bhttp::async_read(s, buffer, req, use_tuple);
      if (ec) co_return;
      ++calls;
      rebound::http::response_message<bhttp::string_body> res{bhttp::status::created, 11};
      res.body() = "refund-" + std::to_string(calls);
      res.prepare_payload();
      auto [wec, wn] = co_await bhttp::async_write(s, res, use_tuple);
      if (wec) co_return;
    }
  }

  rebound::tcp_acceptor acceptor;
  int calls = 0;
};

/// The inbound listener in front of an app that counts its calls; /refunds needs a key.
struct gate_rig {
  gate_rig()
      : r("inbound:\n  listen: 127.0.0.1:0\n  app: " + port.authority() +
          "\n  routes:\n    - match: {path_prefix: /refunds}\n      idempotency: {require: true}\n") {
    r.ctx.inbound = true;
    r.ctx.store = &store;
  }
  /// One request on a connection of its own: the answer, whole.
  std::string post(const std::string& key, const std::string& body) {
    r.serve({nullptr, inbound::serve_request});
    std::string head = "POST /refunds HTTP/1.1\r\nHost: app\r\nContent-Type: application/json\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\n";
    if (!key.empty()) head += "Idempotency-Key: " + key + "\r\n";
    return r.talk(head + "\r\n" + body, [](const std::string& in) {
      auto const end = in.find("\r\n\r\n");
      auto const cl = in.find("Content-Length: ");
      if (end == std::string::npos || cl == std::string::npos) return false;
      return in.size() >= end + 4 + std::stoul(in.substr(cl + 16));
    });
  }

  store_calls::temp_db db;
  bound_port port;
  rig r;
  // After the rig: it goes first, finishing its calls while the io_context they answer on
  // still exists.
  rebound::store::sqlite_store store{db.path()};
  counting_app app{r.ioc, port};
};

TEST(InboundGate, R6_AKeyedRequestReachesTheAppOnceAndItsDuplicateIsReplayed) {
  gate_rig g;
  auto const first = g.post("refund:ch_9ab:1000", R"({"charge":"ch_9ab","amount":1000})");
  EXPECT_TRUE(first.starts_with("HTTP/1.1 201 ")) << first;
  EXPECT_NE(first.find("Idempotency-Status: stored"), std::string::npos) << first;
  EXPECT_TRUE(first.ends_with("refund-1")) << first;
  // The same payload spelled otherwise is the same request (canonical JSON).
  auto const again = g.post("refund:ch_9ab:1000", R"({ "amount": 1000, "charge": "ch_9ab" })");
  EXPECT_TRUE(again.starts_with("HTTP/1.1 201 ")) << again;
  EXPECT_NE(again.find("Idempotency-Status: replayed"), std::string::npos) << again;
  EXPECT_TRUE(again.ends_with("refund-1")) << "the first call's answer, pinned: " << again;
  EXPECT_EQ(g.app.calls, 1);
}

TEST(InboundGate, R6_ARequiredKeyThatIsMissingIsRefused400AndNothingReachesTheApp) {
  gate_rig g;
  auto const in = g.post("", R"({"charge":"ch_9ab","amount":1000})");
  EXPECT_TRUE(in.starts_with("HTTP/1.1 400 ")) << in;
  EXPECT_EQ(g.app.calls, 0);
}

TEST(InboundGate, R6_AKeyReusedWithAnotherPayloadIsRefusedAndTheAppSeesTheFirstOnly) {
  gate_rig g;
  auto const first = g.post("refund:ch_9ab:1000", R"({"charge":"ch_9ab","amount":1000})");
  EXPECT_TRUE(first.starts_with("HTTP/1.1 201 ")) << first;
  auto const other = g.post("refund:ch_9ab:1000", R"({"charge":"ch_9ab","amount":999})");
  EXPECT_TRUE(other.starts_with("HTTP/1.1 422 ")) << other;
  EXPECT_EQ(g.app.calls, 1);
}

}  // namespace
}  // namespace gate_test
