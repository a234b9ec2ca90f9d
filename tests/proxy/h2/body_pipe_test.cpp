// The pipe a streamed gRPC body flows through between two HTTP/2 streams: flow-control
// credit only for what the consumer took, a replay for a retry while every byte is kept.
#include "proxy/h2/body_pipe.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using rebound::h2::body_pipe;

namespace body_pipe_test {
namespace {

void put(body_pipe& p, const std::string& s) { p.append(reinterpret_cast<const std::uint8_t*>(s.data()), s.size()); }

std::string take(body_pipe& p, std::size_t max) {
  std::string out(max, '\0');
  out.resize(p.read(reinterpret_cast<std::uint8_t*>(out.data()), max));
  return out;
}

}  // namespace

TEST(BodyPipe, CreditsOnlyWhatTheConsumerTook) {
  body_pipe p;
  std::size_t credited = 0;
  p.on_consumed = [&](std::size_t n) { credited += n; };
  put(p, "hello world");
  EXPECT_EQ(credited, 0u) << "a byte not yet read holds its flow-control window";
  EXPECT_EQ(take(p, 5), "hello");
  EXPECT_EQ(credited, 5u);
  EXPECT_EQ(take(p, 100), " world");
  EXPECT_EQ(credited, 11u);
  EXPECT_EQ(take(p, 100), "");
  EXPECT_FALSE(p.drained()) << "not ended: the consumer waits";
  p.end({{"grpc-status", "0"}});
  EXPECT_TRUE(p.drained());
  ASSERT_EQ(p.trailers().size(), 1u);
  EXPECT_EQ(p.trailers()[0].value, "0");
}

TEST(BodyPipe, RewindReplaysEverythingKeptWithoutCreditingTwice) {
  body_pipe p(1024);
  std::size_t credited = 0;
  p.on_consumed = [&](std::size_t n) { credited += n; };
  put(p, "first message");
  EXPECT_EQ(take(p, 100), "first message");
  ASSERT_TRUE(p.rewind());
  put(p, "+second");
  EXPECT_EQ(take(p, 100), "first message+second") << "a retry sends the whole request again";
  EXPECT_EQ(credited, 20u) << "bytes read twice are credited once";
}

TEST(BodyPipe, OutgrowingTheKeepLimitEndsReplay) {
  body_pipe p(8);
  put(p, "12345678");
  EXPECT_TRUE(p.replayable());
  put(p, "9");
  EXPECT_FALSE(p.replayable()) << "past max_retry_body the request is sent once";
  take(p, 100);
  EXPECT_FALSE(p.rewind());
}

TEST(BodyPipe, StopKeepingFreesWhatWasRead) {
  body_pipe p(1 << 20);
  put(p, std::string(100'000, 'a'));
  take(p, 100'000);
  p.stop_keeping();
  EXPECT_FALSE(p.rewind());
  put(p, "b");
  EXPECT_EQ(take(p, 10), "b");
  EXPECT_EQ(p.total(), 100'001u);
}

TEST(BodyPipe, AbandonedPipeCreditsArrivalsAtOnce) {
  body_pipe p;
  std::size_t credited = 0;
  bool told = false;
  p.on_consumed = [&](std::size_t n) { credited += n; };
  p.on_abandoned = [&] { told = true; };
  put(p, "unread");
  p.abandon();
  EXPECT_TRUE(told) << "the producer resets its stream";
  EXPECT_EQ(credited, 6u) << "what nobody will read must not hold the connection's window";
  put(p, "more");
  EXPECT_EQ(credited, 10u);
}

TEST(BodyPipe, DetachProducerFailsAnUnendedBodyAndReturnsWhatIsOwed) {
  body_pipe p;
  int wakes = 0;
  p.on_data = [&] { ++wakes; };
  p.on_consumed = [](std::size_t) { FAIL() << "a detached producer is never called"; };
  put(p, "abcdef");
  EXPECT_EQ(wakes, 1);
  EXPECT_EQ(p.detach_producer(), 6u);
  EXPECT_TRUE(p.failed());
  EXPECT_EQ(wakes, 2) << "the consumer learns of the failure and resets its stream";
  take(p, 100);
  EXPECT_EQ(p.detach_producer(), 0u);
}

TEST(BodyPipe, EndedBodyStaysEndedWhenItsProducerGoes) {
  body_pipe p;
  put(p, "x");
  p.end({});
  p.detach_producer();
  EXPECT_FALSE(p.failed()) << "a stream that closes after its end did not fail";
  EXPECT_EQ(take(p, 10), "x");
  EXPECT_TRUE(p.drained());
}

}  // namespace body_pipe_test
