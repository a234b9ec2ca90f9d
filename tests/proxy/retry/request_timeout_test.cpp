// X-Request-Timeout, the caller's deadline (issue 22: deadlines travel): the one parser, with
// a table of hostile values, and the value each attempt sends on. No clock is read.
#include "proxy/retry/request_timeout.hpp"

#include <gtest/gtest.h>

using namespace rebound::retry;
using namespace std::chrono_literals;

namespace request_timeout_test {
namespace {

std::optional<std::chrono::milliseconds> parsed(std::string_view v) {
  auto const r = parse_request_timeout(v);
  if (auto const* ms = std::get_if<std::chrono::milliseconds>(&r)) return *ms;
  return std::nullopt;
}

}  // namespace

TEST(RequestTimeout, SecondsAndMillisecondsAreRead) {
  EXPECT_EQ(parsed("2"), 2000ms);
  EXPECT_EQ(parsed("1.5"), 1500ms);
  EXPECT_EQ(parsed("0.25"), 250ms);
  EXPECT_EQ(parsed("250ms"), 250ms);
  EXPECT_EQ(parsed(" 3 "), 3000ms);
  EXPECT_EQ(parsed("007"), 7000ms);
  EXPECT_EQ(parsed("1.0005"), 1000ms);  // below a millisecond is dropped, not rounded up
  EXPECT_EQ(parsed("0"), 0ms);
  EXPECT_EQ(parsed("0ms"), 0ms);
  EXPECT_EQ(parsed("0.0001"), 0ms);
}

// Huge values cap nothing a total_timeout does not already cap: they saturate, never wrap.
TEST(RequestTimeout, HugeValuesSaturateInsteadOfOverflowing) {
  EXPECT_EQ(parsed("99999999999999999999999999999999"), max_request_timeout);
  EXPECT_EQ(parsed("99999999999999999999999999999999ms"), max_request_timeout);
  EXPECT_EQ(parsed("9223372036854775807"), max_request_timeout);
  EXPECT_EQ(parsed("31535999.9999"), max_request_timeout - 1ms);  // just below the cap: kept
  EXPECT_EQ(parsed("31536000.5"), max_request_timeout);
  EXPECT_EQ(parsed(std::string(5000, '9')), max_request_timeout);
}

// Whatever a caller sends, the answer is a value or a reason: never a crash, never a deadline
// silently dropped.
TEST(RequestTimeout, MalformedValuesAreRefusedWithAReason) {
  using namespace std::string_view_literals;
  for (std::string_view v : std::initializer_list<std::string_view>{
           "", " ", "ms", "-1", "-0", "+1", "1e3", "1e999", "1E2", "inf", "nan", "0x10", "1.", ".5", "1.5ms", "1..5", "1.2.3",
        "1s", "250 ms", "250MS", "2m", "1,2", "1, 2", "abc", "1 2", "١", "\t\t", "1\r\n", "1\0"sv,
        "-9223372036854775808", "ms250", "msms", "1.-5", "1.5.", "0.ms"}) {
    auto const r = parse_request_timeout(v);
    auto const* bad = std::get_if<malformed_timeout>(&r);
    ASSERT_NE(bad, nullptr) << "accepted: [" << v << "]";
    EXPECT_NE(bad->why.find("X-Request-Timeout"), std::string::npos) << bad->why;
    EXPECT_NE(bad->why.find("250ms"), std::string::npos) << bad->why;
  }
}

// The 400's message quotes the caller's value, but short and printable.
TEST(RequestTimeout, MessageQuotesTheValueShortAndPrintable) {
  auto const r = parse_request_timeout(std::string(200, 'x') + "\x01");
  auto const& why = std::get<malformed_timeout>(r).why;
  EXPECT_LT(why.size(), 160u);
  EXPECT_EQ(why.find('\x01'), std::string::npos);
}

// Each attempt sends what it has left, in whole milliseconds rounded down, never negative.
TEST(RequestTimeout, SentValueIsTheTimeLeftRoundedDown) {
  auto const t0 = std::chrono::steady_clock::time_point{} + 1000h;
  EXPECT_EQ(format_request_timeout(t0 + 1500ms, t0), "1500ms");
  EXPECT_EQ(format_request_timeout(t0 + 1500ms, t0 + 400ms), "1100ms");
  EXPECT_EQ(format_request_timeout(t0 + 1500us, t0), "1ms");
  EXPECT_EQ(format_request_timeout(t0, t0), "0ms");
  EXPECT_EQ(format_request_timeout(t0, t0 + 5s), "0ms");
  // What it sends, the next hop reads back.
  EXPECT_EQ(parsed(format_request_timeout(t0 + 2345ms, t0)), 2345ms);
}

}  // namespace request_timeout_test
