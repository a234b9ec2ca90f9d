#include "proxy/observe/metrics.hpp"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

using namespace std::chrono_literals;
using rebound::observe::metrics;

namespace metrics_test {
namespace {
bool has(const std::string& text, const std::string& line) { return text.find(line) != std::string::npos; }
}  // namespace

TEST(Metrics, R10_EveryFamilyOfSpecSection8IsExposedWithItsType) {
  metrics m("checkout");
  m.dependency("payments");
  auto const text = m.scrape();
  for (auto const* line :
       {"# TYPE retry_attempts_total counter", "# TYPE retry_exhausted_total counter",
        "# TYPE retry_backoff_duration_seconds histogram", "# TYPE retry_budget_utilization_ratio gauge",
        "# TYPE dlq_messages_total counter", "# TYPE circuit_breaker_state gauge",
        "# TYPE proxy_requests_total counter", "# TYPE upstream_request_duration_seconds histogram"})
    EXPECT_TRUE(has(text, line)) << line << "\n" << text;
}

TEST(Metrics, R10_AttemptsAreCountedByAttemptNumberWithTheirDuration) {
  metrics m("checkout");
  auto& d = m.dependency("payments");
  d.attempt(1, 300us);
  d.attempt(2, 20ms);
  d.attempt(2, 20ms);
  auto const text = m.scrape();
  EXPECT_TRUE(has(text, "retry_attempts_total{attempt_number=\"1\",dependency=\"payments\",service=\"checkout\"} 1"))
      << text;
  EXPECT_TRUE(has(text, "retry_attempts_total{attempt_number=\"2\",dependency=\"payments\",service=\"checkout\"} 2"))
      << text;
  EXPECT_TRUE(has(text, "upstream_request_duration_seconds_count{dependency=\"payments\",service=\"checkout\"} 3"))
      << text;
  // 300 us falls in the 0.0005 bucket; both 20 ms attempts in 0.025.
  EXPECT_TRUE(has(
      text, "upstream_request_duration_seconds_bucket{dependency=\"payments\",service=\"checkout\",le=\"0.0005\"} 1"))
      << text;
  EXPECT_TRUE(has(
      text, "upstream_request_duration_seconds_bucket{dependency=\"payments\",service=\"checkout\",le=\"0.025\"} 3"))
      << text;
}

TEST(Metrics, R10_BackoffBucketsSpanAMillisecondToFiveMinutes) {
  metrics m("checkout");
  auto& d = m.dependency("payments");
  d.backoff(1ms);
  d.backoff(300s);
  auto const text = m.scrape();
  EXPECT_TRUE(
      has(text, "retry_backoff_duration_seconds_bucket{dependency=\"payments\",service=\"checkout\",le=\"0.001\"} 1"))
      << text;
  EXPECT_TRUE(
      has(text, "retry_backoff_duration_seconds_bucket{dependency=\"payments\",service=\"checkout\",le=\"300\"} 2"))
      << text;
  EXPECT_TRUE(has(text, "retry_backoff_duration_seconds_sum{dependency=\"payments\",service=\"checkout\"} 300.001"))
      << text;
}

TEST(Metrics, AnsweredCodesEachGetTheirOwnSeriesBeyondTheFastTable) {
  metrics m("checkout");
  auto& d = m.dependency("payments");
  // More distinct codes than the lock-free table holds: the rest still count.
  for (unsigned code = 200; code < 230; ++code)
    for (unsigned i = 0; i < code - 199; ++i) d.answered(code);
  d.answered(99);   // not an HTTP status: ignored
  d.answered(600);  // same
  auto const text = m.scrape();
  for (unsigned code = 200; code < 230; ++code)
    EXPECT_TRUE(has(text, "proxy_requests_total{code=\"" + std::to_string(code) +
                              "\",dependency=\"payments\",service=\"checkout\"} " + std::to_string(code - 199)))
        << code << "\n"
        << text;
  EXPECT_FALSE(has(text, "code=\"99\""));
  EXPECT_FALSE(has(text, "code=\"600\""));
}

TEST(Metrics, ConcurrentWorkersCountEveryAnswer) {
  metrics m("checkout");
  auto& d = m.dependency("payments");
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 5000; ++i) d.answered(i % 2 ? 200 : 503);
    });
  for (auto& t : ts) t.join();
  auto const text = m.scrape();
  EXPECT_TRUE(has(text, "proxy_requests_total{code=\"200\",dependency=\"payments\",service=\"checkout\"} 10000"))
      << text;
  EXPECT_TRUE(has(text, "proxy_requests_total{code=\"503\",dependency=\"payments\",service=\"checkout\"} 10000"))
      << text;
}

TEST(Metrics, TheSameDependencyIsTheSameChildren) {
  metrics m("checkout");
  EXPECT_EQ(&m.dependency("payments"), &m.dependency("payments"));
  EXPECT_NE(&m.dependency("payments"), &m.dependency("ledger"));
}

// Issue 22: retries a layer below made unnecessary, by reason; the name is there from the
// first scrape, so an alert rule can be written before the first one happens.
TEST(Metrics, DeclinedRetriesAreCountedByReason) {
  metrics m("checkout");
  auto& d = m.dependency("payments");
  EXPECT_TRUE(has(m.scrape(), "# TYPE retry_declined_total counter"));
  d.declined("layered");
  d.declined("layered");
  d.declined("overloaded");
  auto const text = m.scrape();
  EXPECT_TRUE(has(text, "retry_declined_total{dependency=\"payments\",reason=\"layered\",service=\"checkout\"} 2"))
      << text;
  EXPECT_TRUE(has(text, "retry_declined_total{dependency=\"payments\",reason=\"overloaded\",service=\"checkout\"} 1"))
      << text;
}

}  // namespace metrics_test

namespace metrics_test {
namespace {

/// The value of the series `line` starts with, or -1 when the scrape has none.
double value_of(const std::string& text, const std::string& series) {
  auto const at = text.find(series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 1));
}

TEST(Metrics, CountsKeptPerThreadAddUpAtEveryScrapeAndNeverTwice) {
  // The success path's series are written to per-thread shards and folded into the registry
  // when scraped: what many threads count must all arrive, once, however often it is scraped.
  metrics m("checkout");
  auto& d = m.dependency("payments");
  constexpr int threads = 12;  // more than the shards: some threads share one
  constexpr int each = 2000;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int i = 0; i < each; ++i) {
        d.attempt(1, 300us);
        d.request_ended(1, "success", "sync");
        d.answered(200);
        d.answered(static_cast<unsigned>(201 + (i + t) % 6));  // more codes than a shard's table holds
        if (i % 500 == 0) m.scrape();                           // folds while others count
      }
    });
  for (auto& th : pool) th.join();
  for (int scrape = 0; scrape < 2; ++scrape) {
    auto const text = m.scrape();
    auto const l = std::string("{dependency=\"payments\",service=\"checkout\"}");
    EXPECT_EQ(value_of(text, "retry_attempts_total{attempt_number=\"1\",dependency=\"payments\",service=\"checkout\"}"),
              threads * each)
        << text;
    EXPECT_EQ(value_of(text, "upstream_request_duration_seconds_count" + l), threads * each);
    EXPECT_NEAR(value_of(text, "upstream_request_duration_seconds_sum" + l), threads * each * 0.0003, 1e-6);
    EXPECT_EQ(value_of(text, "upstream_request_duration_seconds_bucket{dependency=\"payments\",service=\"checkout\","
                             "le=\"0.00025\"}"),
              0);
    EXPECT_EQ(value_of(text, "upstream_request_duration_seconds_bucket{dependency=\"payments\",service=\"checkout\","
                             "le=\"0.0005\"}"),
              threads * each);
    EXPECT_EQ(value_of(text, "retry_request_attempts_count{context=\"sync\",dependency=\"payments\",outcome=\"success\","
                             "service=\"checkout\"}"),
              threads * each);
    EXPECT_EQ(value_of(text, "proxy_requests_total{code=\"200\",dependency=\"payments\",service=\"checkout\"}"),
              threads * each);
    double others = 0;
    for (unsigned code = 201; code <= 206; ++code)
      others += value_of(text, "proxy_requests_total{code=\"" + std::to_string(code) +
                                   "\",dependency=\"payments\",service=\"checkout\"}");
    EXPECT_EQ(others, threads * each);
  }
}

}  // namespace
}  // namespace metrics_test
