// Streaming gRPC calls through rebound (issue 21): server, client and bidirectional streams
// between a real grpcio client and server (integration/grpc_peer.py), relayed message by
// message. Retried only before the upstream answered; never once its answer has begun.
#include "client.hpp"
#include "grpc_peers.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

using namespace itest;

namespace grpc_streaming_test {
namespace {

/// `peer` with its three streaming methods named by routes, as a user names them.
std::string streaming_dependency(std::uint16_t upstream_port) {
  return "dependencies:\n"
         "  peer:\n"
         "    hosts: [peer.test]\n"
         "    origin: http://127.0.0.1:" +
         std::to_string(upstream_port) +
         "\n"
         "    context: grpc\n"
         "    backoff: {base: 10ms, cap: 50ms}\n"
         "    routes:\n"
         "      - match: {path_prefix: /test.Peer/Count}\n        grpc_streaming: true\n"
         "      - match: {path_prefix: /test.Peer/Collect}\n        grpc_streaming: true\n"
         "      - match: {path_prefix: /test.Peer/Chat}\n        grpc_streaming: true\n";
}

ReboundOptions with(const std::string& extra) {
  ReboundOptions o;
  o.extra = extra;
  return o;
}

CallResult call(std::uint16_t port, const std::string& method, const std::string& kind,
                std::vector<std::string> args) {
  args.insert(args.end(), {"--kind", kind, "--timeout", "20"});
  return grpc_call(port, "peer.test", method, args);
}

}  // namespace

TEST(GrpcStreaming, ServerStreamReachesTheClientMessageByMessage) {
  GrpcServer server;
  ReboundProcess rebound(with(streaming_dependency(server.port())));
  auto r = call(rebound.port(), "/test.Peer/Count", "server-stream", {"--payload", "5"});
  ASSERT_EQ(r.code, 0) << r.raw;
  EXPECT_EQ(r.body, "m0|m1|m2|m3|m4");
  EXPECT_EQ(r.initial["rebound-attempts"], "1");
  EXPECT_EQ(r.trailing["x-idempotency-key"].size(), 36u) << "the call carries rebound's key as metadata (R-6)";
}

TEST(GrpcStreaming, ClientStreamReachesTheServerWhole) {
  GrpcServer server;
  ReboundProcess rebound(with(streaming_dependency(server.port())));
  auto r = call(rebound.port(), "/test.Peer/Collect", "client-stream", {"--messages", "a,b,c"});
  ASSERT_EQ(r.code, 0) << r.raw;
  EXPECT_EQ(r.body, "a+b+c");
}

// The client sends each message only after the answer to the one before came back: a proxy
// that held the call whole would never answer, and the call would hit its deadline.
TEST(GrpcStreaming, BidirectionalStreamInLockstepIsRelayedAsMessagesArrive) {
  GrpcServer server;
  ReboundProcess rebound(with(streaming_dependency(server.port())));
  auto r = call(rebound.port(), "/test.Peer/Chat", "bidi", {"--messages", "a,b,c,d"});
  ASSERT_EQ(r.code, 0) << r.raw;
  EXPECT_EQ(r.body, "echo:a|echo:b|echo:c|echo:d");
}

// Past the 1 MiB stream and 16 MiB connection windows both ways: flow control end to end.
TEST(GrpcStreaming, LargeStreamsFlowBothWays) {
  GrpcServer server;
  ReboundProcess rebound(with(streaming_dependency(server.port())));
  auto down = call(rebound.port(), "/test.Peer/Count", "server-stream",
                   {"--payload", "100", "--meta", "x-size=200000", "--summary"});
  ASSERT_EQ(down.code, 0) << down.raw;
  EXPECT_EQ(down.body, "100:20000000");
  auto up = call(rebound.port(), "/test.Peer/Collect", "client-stream",
                 {"--repeat", "30", "--size", "200000", "--meta", "x-summary=1"});
  ASSERT_EQ(up.code, 0) << up.raw;
  EXPECT_EQ(up.body, "30:6000000");
}

// R-4 before the answer began: a trailers-only UNAVAILABLE is retried, and the new attempt
// carries every message the client had sent, which rebound kept (within max_retry_body).
TEST(GrpcStreaming, R4_UnavailableBeforeTheAnswerIsRetriedWithTheMessagesSentSoFar) {
  GrpcServer server;
  ReboundProcess rebound(with(streaming_dependency(server.port())));
  auto chat = call(rebound.port(), "/test.Peer/Chat", "bidi",
                   {"--messages", "a,b", "--meta", "x-call-id=s1", "--meta", "x-fail-times=1"});
  ASSERT_EQ(chat.code, 0) << chat.raw;
  EXPECT_EQ(chat.body, "echo:a|echo:b");
  EXPECT_EQ(chat.trailing["x-attempt"], "2");
  EXPECT_EQ(chat.trailing["x-previous-attempts"], "1");
  EXPECT_EQ(chat.initial["rebound-attempts"], "2");
  auto collect = call(rebound.port(), "/test.Peer/Collect", "client-stream",
                      {"--messages", "a,b,c", "--meta", "x-call-id=s2", "--meta", "x-fail-times=2"});
  ASSERT_EQ(collect.code, 0) << collect.raw;
  EXPECT_EQ(collect.body, "a+b+c") << "the server read all three messages again on each attempt";
  EXPECT_EQ(collect.trailing["x-attempt"], "3");
}

// Once the server's first message has gone to the client, the call is the server's: a
// failure after it reaches the client as it is, and nothing is sent again.
TEST(GrpcStreaming, FailureAfterTheFirstMessageIsNeverRetried) {
  GrpcServer server;
  ReboundProcess rebound(with(streaming_dependency(server.port())));
  auto r = call(rebound.port(), "/test.Peer/Count", "server-stream",
                {"--payload", "5", "--meta", "x-call-id=s3", "--meta", "x-fail-after=2"});
  EXPECT_EQ(r.code, 14) << r.raw;
  EXPECT_EQ(r.body, "m0|m1");
  EXPECT_EQ(r.trailing["x-attempt"], "1");
  EXPECT_EQ(r.initial["rebound-attempts"], "1");
  auto again = call(rebound.port(), "/test.Peer/Count", "server-stream", {"--payload", "1", "--meta", "x-call-id=s3"});
  ASSERT_EQ(again.code, 0) << again.raw;
  EXPECT_EQ(again.trailing["x-attempt"], "2") << "the server saw the failed call once, then this one";
}

// A request stream past max_retry_body is not kept whole, so it is not sent again.
TEST(GrpcStreaming, R6_StreamLargerThanMaxRetryBodyIsSentOnce) {
  GrpcServer server;
  ReboundProcess rebound(with(streaming_dependency(server.port())));
  auto r = call(rebound.port(), "/test.Peer/Collect", "client-stream",
                {"--repeat", "10", "--size", "200000", "--meta", "x-summary=1", "--meta", "x-call-id=s4", "--meta",
                 "x-fail-times=1"});
  EXPECT_EQ(r.code, 14) << r.raw;
  EXPECT_EQ(r.trailing["x-attempt"], "1");
  // A trailers-only answer: its one header block reaches grpcio as trailing metadata.
  EXPECT_EQ(r.trailing["rebound-attempts"], "1");
  EXPECT_TRUE(rebound.wait_for_log("the streamed request outgrew max_retry_body"))
      << "the log says why the call was not retried";
}

// A unary method of the same dependency stays held whole and retried as before.
TEST(GrpcStreaming, UnaryMethodsBesideStreamingOnesAreUnchanged) {
  GrpcServer server;
  ReboundProcess rebound(with(streaming_dependency(server.port())));
  auto r = call(rebound.port(), "/test.Peer/Fail", "unary",
                {"--meta", "x-call-id=s5", "--meta", "x-fail-times=1", "--meta", "x-fail-code=14"});
  ASSERT_EQ(r.code, 0) << r.raw;
  EXPECT_EQ(r.trailing["x-attempt"], "2");
}

// The upstream server goes away mid-stream: the client gets the messages that came and then
// UNAVAILABLE from rebound, not a hang and not a bare reset; rebound serves the next call.
TEST(GrpcStreaming, UpstreamLostMidStreamEndsTheCallWithUnavailable) {
  std::optional<GrpcServer> server(std::in_place);
  auto const port = server->port();
  ReboundProcess rebound(with(streaming_dependency(port)));
  auto const progress = make_temp_dir() + "/progress";
  CallResult r;
  std::thread client([&] {
    r = call(rebound.port(), "/test.Peer/Count", "server-stream",
             {"--payload", "50", "--meta", "x-gap-ms=100", "--meta", "x-progress-file=" + progress});
  });
  // Until the server has sent three messages (so two have surely passed through rebound).
  auto const limit = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::atoi(read_file(progress).c_str()) < 3 && std::chrono::steady_clock::now() < limit)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  server.reset();  // SIGKILL: its connections drop
  client.join();
  EXPECT_EQ(r.code, 14) << r.raw;
  EXPECT_EQ(r.trailing["rebound-error"], "connect_reset") << r.raw;
  EXPECT_NE(r.body.find("m0|m1"), std::string::npos) << "the messages before the loss arrived: " << r.raw;
  auto again = grpc_call(rebound.port(), "peer.test", "/test.Peer/Echo", {"--payload", "still-up"});
  EXPECT_EQ(again.code, 14) << "rebound answers the next call (its origin is gone): " << again.raw;
}

// The caller's grpc-timeout bounds a stream's whole life (not total_timeout, which bounds the
// retrying): past it the client gets DEADLINE_EXCEEDED with the messages that came in time.
TEST(GrpcStreaming, R3_CallersDeadlineEndsALongStream) {
  GrpcServer server;
  ReboundProcess rebound(with(streaming_dependency(server.port())));
  auto r = grpc_call(rebound.port(), "peer.test", "/test.Peer/Count",
                     {"--kind", "server-stream", "--timeout", "1", "--payload", "50", "--meta", "x-gap-ms=100"});
  EXPECT_EQ(r.code, 4) << r.raw;
  EXPECT_NE(r.body.find("m0|m1"), std::string::npos) << r.raw;
  auto after = call(rebound.port(), "/test.Peer/Count", "server-stream", {"--payload", "2"});
  EXPECT_EQ(after.code, 0) << "rebound serves the next stream: " << after.raw;
}

// Issue 29, defect 13: every gRPC answer is HTTP 200, so proxy_requests_total{code} said 200
// for a streaming call that ended UNAVAILABLE (and for every failed unary call). A call is
// counted by its grpc-status, mapped as google.rpc.Code maps to HTTP, once it is over.
TEST(GrpcStreaming, CallsAreCountedByTheirGrpcStatusNotTheirHttpStatus) {
  GrpcServer server;
  ReboundProcess rebound(with(streaming_dependency(server.port())));
  auto failed = call(rebound.port(), "/test.Peer/Count", "server-stream",
                     {"--payload", "5", "--meta", "x-call-id=m1", "--meta", "x-fail-after=2"});
  EXPECT_EQ(failed.code, 14) << failed.raw;
  auto fine = call(rebound.port(), "/test.Peer/Count", "server-stream", {"--payload", "2"});
  EXPECT_EQ(fine.code, 0) << fine.raw;
  auto not_found = grpc_call(rebound.port(), "peer.test", "/test.Peer/Fail",
                             {"--meta", "x-call-id=m2", "--meta", "x-fail-times=9", "--meta", "x-fail-code=5"});
  EXPECT_EQ(not_found.code, 5) << not_found.raw;
  auto const text = HttpClient(rebound.admin_port()).get("/metrics").body;
  auto const count = [&](const std::string& code) {
    auto const series = "proxy_requests_total{code=\"" + code + "\",dependency=\"peer\"";
    auto const at = text.find(series);
    if (at == std::string::npos) return std::string("none");
    auto const end = text.find('\n', at);
    return text.substr(text.rfind(' ', end) + 1, end - text.rfind(' ', end) - 1);
  };
  EXPECT_EQ(count("503"), "1") << "UNAVAILABLE after two messages\n" << text;
  EXPECT_EQ(count("200"), "1") << text;
  EXPECT_EQ(count("404"), "1") << "NOT_FOUND, a unary call\n" << text;
}

}  // namespace grpc_streaming_test
