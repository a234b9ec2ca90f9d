#include "proxy/observe/correlation.hpp"
#include "proxy/observe/traceparent.hpp"

#include <gtest/gtest.h>

using namespace rebound::observe;

TEST(Correlation, AnIdLikeValueIsUsable) {
  EXPECT_TRUE(usable_correlation_id("req-42"));
  EXPECT_TRUE(usable_correlation_id("3f1c2a9e-8d7b-4c6a-9e5f-0a1b2c3d4e5f"));
  EXPECT_TRUE(usable_correlation_id(std::string(128, 'a')));
}

TEST(Correlation, HostileValuesAreNotLogged) {
  EXPECT_FALSE(usable_correlation_id(""));
  EXPECT_FALSE(usable_correlation_id(std::string(129, 'a')));
  EXPECT_FALSE(usable_correlation_id("two words"));
  EXPECT_FALSE(usable_correlation_id("line\nbreak"));
  EXPECT_FALSE(usable_correlation_id("caf\xc3\xa9"));
}

TEST(Correlation, TraceparentGivesItsTraceId) {
  EXPECT_EQ(trace_id_of("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), "4bf92f3577b34da6a3ce929d0e0e4736");
  // A later version may carry more fields.
  EXPECT_EQ(trace_id_of("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra"),
            "4bf92f3577b34da6a3ce929d0e0e4736");
}

TEST(Correlation, MalformedTraceparentGivesNothing) {
  EXPECT_EQ(trace_id_of(""), "");
  EXPECT_EQ(trace_id_of("00-00000000000000000000000000000000-00f067aa0ba902b7-01"), "");  // all-zero trace-id
  EXPECT_EQ(trace_id_of("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"), "");  // upper case
  EXPECT_EQ(trace_id_of("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"), "");  // forbidden version
  EXPECT_EQ(trace_id_of("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x"), "");
  EXPECT_EQ(trace_id_of("00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01"), "");
  // Issue 46, defect 6: the tracer started a new trace for an all-zero parent id while the log
  // kept the caller's trace id: one parser decides both now.
  EXPECT_EQ(trace_id_of("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"), "");
  EXPECT_FALSE(rebound::observe::parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"));
}

TEST(Correlation, NewIdsAre32HexDigitsAndDiffer) {
  std::mt19937_64 rng(7);
  auto const made_a = new_correlation_id(rng), made_b = new_correlation_id(rng);
  std::string const a(made_a.view()), b(made_b.view());
  EXPECT_EQ(a.size(), 32u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
}

// One rule for every way in (HTTP/1.1, CONNECT, gRPC): X-Request-ID, then X-Correlation-ID,
// then traceparent's trace-id; an unusable value gives way to the next field.
TEST(Correlation, R10_TheFirstUsableFieldWinsInOneOrderForEveryWayIn) {
  auto const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  EXPECT_EQ(correlation_id_of({"req-1", "corr-1", tp}), "req-1");
  EXPECT_EQ(correlation_id_of({"", "corr-1", tp}), "corr-1");
  EXPECT_EQ(correlation_id_of({"has space", "corr-1", tp}), "corr-1") << "an unusable X-Request-ID gives way";
  EXPECT_EQ(correlation_id_of({"", "", tp}), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(correlation_id_of({"", "", "garbage"}), "") << "none usable: the caller makes one";
}
