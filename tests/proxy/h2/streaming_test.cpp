// Streamed HTTP/2 bodies (a streaming gRPC call's path): rebound's server hands a request
// over at its head and answers from a pipe; rebound's client sends from a pipe and receives
// into one. Messages cross as they arrive, and flow-control credit follows what was read.
#include "proxy/h2/body_pipe.hpp"

#include "tests/proxy/h2/h2_fixture.hpp"

#include <array>
#include <vector>

using namespace h2test;

namespace streaming_test {
namespace {

void move_all(h2::body_pipe& in, h2::body_pipe& out) {
  std::array<std::uint8_t, 16 * 1024> buf{};
  while (auto n = in.read(buf.data(), buf.size())) out.append(buf.data(), n);
  if (in.drained())
    out.end({{"grpc-status", "0"}});
  else if (in.failed())
    out.fail();
}

/// Echoes the request body as it arrives; the answer's head goes out at once.
net::awaitable<void> echo_stream(h2::streamed_request call) {
  auto out = std::make_shared<h2::body_pipe>();
  auto in = call.body;
  in->consumer = in.get();
  in->on_data = [inp = in.get(), out] { move_all(*inp, *out); };
  call.responder->respond({{":status", "200"}, {"content-type", "application/grpc"}}, out);
  move_all(*in, *out);
  net::steady_timer t(co_await net::this_coro::executor, clock::time_point::max());
  co_await t.async_wait(use_tuple);  // cancelled when the stream closes
  in->on_data = nullptr;
}

h2::handlers streaming_server() {
  return h2::handlers{
      [](h2::fields&) {
        return h2::call_handler{{}, [](h2::streamed_request call) { return echo_stream(std::move(call)); }};
      },
      {}};
}

/// Waits until `p` has `n` bytes to read (or ended), by `deadline`; what it read.
net::awaitable<std::string> read_at_least(h2::body_pipe& p, net::steady_timer& wake, std::size_t n) {
  std::string got;
  std::array<std::uint8_t, 16 * 1024> buf{};
  auto const deadline = clock::now() + 10s;
  while (got.size() < n && !p.drained() && !p.failed() && clock::now() < deadline) {
    if (auto k = p.read(buf.data(), buf.size())) {
      got.append(reinterpret_cast<const char*>(buf.data()), k);
      continue;
    }
    wake.expires_at(deadline);
    co_await wake.async_wait(use_tuple);
  }
  co_return got;
}

struct lockstep_result {
  std::vector<std::string> echoed;
  std::string status;
  bool drained = false;
};

net::awaitable<void> lockstep(test_server& s, lockstep_result* r) {
  auto c = co_await connect_to(s.port());
  if (!c) co_return;
  auto req = std::make_shared<h2::body_pipe>();
  auto resp = std::make_shared<h2::body_pipe>();
  net::steady_timer wake(co_await net::this_coro::executor);
  resp->on_data = [&wake] { wake.cancel(); };
  auto head = co_await c->open_stream(grpc_request("/svc/Chat").head, req, resp, clock::now() + 5s);
  if (!head) co_return;
  if (auto const* st = h2::message::find_in(*head, ":status")) r->status = *st;
  for (std::string m : {"one", "two", "three"}) {
    // The next message goes only once this one came back: a relay that waited for the
    // whole request would never answer.
    req->append(reinterpret_cast<const std::uint8_t*>(m.data()), m.size());
    r->echoed.push_back(co_await read_at_least(*resp, wake, m.size()));
  }
  req->end({});
  co_await read_at_least(*resp, wake, 1);
  r->drained = resp->drained() && !resp->trailers().empty();
  resp->on_data = nullptr;
  c->shut_down();
}

}  // namespace

TEST(Http2Streaming, MessagesCrossInLockstepBothWays) {
  net::io_context ioc;
  test_server s(ioc, streaming_server());
  s.start();
  lockstep_result r;
  run(ioc, lockstep(s, &r), &s);
  EXPECT_EQ(r.status, "200");
  EXPECT_EQ(r.echoed, (std::vector<std::string>{"one", "two", "three"}));
  EXPECT_TRUE(r.drained) << "the answer ends with its trailers once the request ended";
}

namespace {

/// Sends `total` bytes and reads the echo until `wanted` bytes came back (or it ended); then
/// stops reading, as a consumer that goes away does, and shuts the connection down.
net::awaitable<void> bulk(test_server& s, std::size_t total, std::size_t wanted, std::size_t* echoed,
                          bool* ended) {
  auto c = co_await connect_to(s.port());
  if (!c) co_return;
  auto req = std::make_shared<h2::body_pipe>();
  auto resp = std::make_shared<h2::body_pipe>();
  net::steady_timer wake(co_await net::this_coro::executor);
  resp->on_data = [&wake] { wake.cancel(); };
  std::string const chunk(64 * 1024, 'b');
  for (std::size_t sent = 0; sent < total; sent += chunk.size())
    req->append(reinterpret_cast<const std::uint8_t*>(chunk.data()), chunk.size());
  req->end({});
  auto head = co_await c->open_stream(grpc_request("/svc/Bulk").head, req, resp, clock::now() + 5s);
  if (!head) co_return;
  auto got = co_await read_at_least(*resp, wake, wanted);
  *echoed = got.size();
  *ended = resp->drained();
  resp->on_data = nullptr;
  resp->abandon();  // without it the stream would wait for credit that never comes
  c->shut_down();
}

struct echo_result {
  std::size_t echoed = 0;
  bool ended = false;
};

/// bulk() against an echoing server, to the end: every connection closed.
echo_result echo_bulk(std::size_t total, std::size_t wanted) {
  net::io_context ioc;
  test_server s(ioc, streaming_server());
  s.start();
  echo_result r;
  run(ioc, bulk(s, total, wanted, &r.echoed, &r.ended), &s, 30s);
  return r;
}

}  // namespace

// 20 MiB each way is past both the 1 MiB stream window and the 16 MiB connection window:
// it only gets through if every byte read is credited back, on both connections' sides.
TEST(Http2Streaming, FlowControlCreditFollowsWhatWasRead) {
  std::size_t const total = 20u << 20;
  auto const r = echo_bulk(total, total + 1);
  EXPECT_EQ(r.echoed, total);
  EXPECT_TRUE(r.ended);
}

// A client that stops reading halfway abandons the answer: credit for the rest flows at once,
// the echo runs to its end, and both connections close rather than wait for a reader.
TEST(Http2Streaming, AnswerAbandonedMidStreamLetsBothConnectionsClose) {
  std::size_t const total = 20u << 20;
  auto const r = echo_bulk(total, 3u << 20);
  EXPECT_GE(r.echoed, 3u << 20);
  EXPECT_LT(r.echoed, total);
  EXPECT_FALSE(r.ended);
}

}  // namespace streaming_test

