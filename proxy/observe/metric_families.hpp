#pragma once
/** What the metrics registry (metrics.cpp) and each dependency's series (dependency_metrics.cpp)
    share: the histograms' buckets, the names and help of the counters whose series appear
    with their first event, and the per-thread shards' helpers. Internal to observe/. */
#include "proxy/observe/thread_shard.hpp"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <atomic>
#include <cstddef>

namespace rebound::observe::detail {

using prometheus::Histogram;

/// Backoff waits: R-1's base of a few ms up to the 5 minute caps of async contexts.
inline const Histogram::BucketBoundaries& backoff_buckets() {
  static const Histogram::BucketBoundaries b{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                             1,     2.5,    5,     10,   30,    60,   120, 300};
  return b;
}

/// Attempts a request took: R-2's counts, from one up to the longest async schedules.
inline const Histogram::BucketBoundaries& attempt_count_buckets() {
  static const Histogram::BucketBoundaries b{1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50};
  return b;
}

/// Upstream attempts: a loopback answer (100 us) up to the longest attempt_timeout worth having.
inline const Histogram::BucketBoundaries& latency_buckets() {
  static const Histogram::BucketBoundaries b{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                             0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30,    60};
  return b;
}

/// A task's age when it ends: a first attempt that works (ms) up to R-3's 24 hours and a replay.
inline const Histogram::BucketBoundaries& task_age_buckets() {
  static const Histogram::BucketBoundaries b{0.01, 0.05, 0.1,  0.5,  1,     5,     30,    60,    300,
                                             900,  1800, 3600, 7200, 14400, 43200, 86400, 172800};
  return b;
}

/// A commit is an fsync: tens of microseconds on a cache-backed disk, tens of ms on a busy one.
inline const Histogram::BucketBoundaries& commit_buckets() {
  static const Histogram::BucketBoundaries b{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                             0.01,   0.025,   0.05,   0.1,   0.25,   1};
  return b;
}

/// The counters whose series appear only with their first event, with their help text.
struct counter_name {
  const char* name;
  const char* help;
};
inline constexpr counter_name attempts_total{"retry_attempts_total",
                                             "Upstream attempts, by attempt number (1 = the original request)"};
inline constexpr counter_name exhausted_total{"retry_exhausted_total",
                                              "Requests whose retries ran out (max_retries) while still failing"};
inline constexpr counter_name declined_total{
    "retry_declined_total",
    "Retries not made because the layer below already retried (layered) or shed the call (overloaded)"};
inline constexpr counter_name hedges_total{
    "retry_hedges_total",
    "Hedges sent (a second copy of a slow idempotent request), by outcome: won, lost (cancelled), failed"};
inline constexpr counter_name hedges_suppressed_total{
    "retry_hedges_suppressed_total",
    "Hedges due but not sent, by reason: budget_exhausted, circuit_open (R-7) or concurrency_limited"};
inline constexpr counter_name limited_total{
    "requests_limited_total",
    "Requests the dependency's concurrency limit cut short: answered 503 concurrency_limited at once, or a retry "
    "not sent"};
inline constexpr counter_name address_ejections_total{
    "upstream_address_ejections_total",
    "Addresses of the dependency's name ejected for failing outlier_detection.consecutive_failures times in a row "
    "(each ejection counted once)"};
inline constexpr counter_name dlq_total{"dlq_messages_total", "Messages moved to a dead-letter queue (R-8)"};
inline constexpr counter_name requests_total{"proxy_requests_total",
                                             "Requests answered, by the status code the client got"};
inline constexpr counter_name upgrades_total{
    "proxy_upgrades_total",
    "Upgrade requests (WebSocket), by outcome: switched (101 relayed, then a tunnel), declined (the upstream "
    "answered without switching), refused (the route's upgrades: or a malformed handshake), failed (no answer)"};
inline constexpr counter_name upgrade_bytes_total{
    "proxy_upgrade_bytes_total", "Bytes through upgraded connections, by direction: upstream or client"};
inline constexpr counter_name idempotent_total{"idempotent_requests_total",
                                               "Inbound requests through the idempotency gate (R-6), by outcome"};

inline prometheus::Family<prometheus::Counter>& counter(const counter_name& c, prometheus::Registry& r) {
  return prometheus::BuildCounter().Name(c.name).Help(c.help).Register(r);
}

template <class T, class... Args>
T& lazily(std::atomic<T*>& slot, prometheus::Family<T>& family, const prometheus::Labels& labels, const Args&... args) {
  if (auto* c = slot.load(std::memory_order_acquire)) return *c;
  // Family::Add returns the existing child for equal labels, so two workers racing here
  // store the same pointer.
  auto& c = family.Add(labels, args...);
  slot.store(&c, std::memory_order_release);
  return c;
}

using observe::this_thread_shard;

/// The bucket a value falls in, as prometheus-cpp's Observe finds it (the first bound >= it);
/// the last slot is +Inf.
inline std::size_t bucket_of(const Histogram::BucketBoundaries& bounds, double value) {
  return static_cast<std::size_t>(std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin());
}

inline constexpr auto relaxed = std::memory_order_relaxed;

}  // namespace rebound::observe::detail
