#pragma once
/** R-10's metrics (SPEC section 8), kept in a prometheus-cpp registry and served as text by
    the admin listener. The registry is the one piece of process-wide mutable state rebound
    has; everything else is per worker or per dependency.

    A request never looks a metric up by its labels: each dependency's children are found
    once, when the dependency is first used, and held in a dependency_metrics; status codes
    and attempt numbers have slots filled on first use. */
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace rebound::observe {

class metrics;

/// One dependency's metric children.
class dependency_metrics {
 public:
  /// A finished attempt: retry_attempts_total{attempt_number}, upstream_request_duration_seconds.
  void attempt(unsigned attempt_number, std::chrono::microseconds took);
  /// A scheduled retry's wait: retry_backoff_duration_seconds.
  void backoff(std::chrono::milliseconds wait);
  /// retry_exhausted_total.
  void exhausted();
  /** A request or handed-over task ended after `attempts` attempts, by outcome (success,
      failure, abandoned) and its route's context: retry_request_attempts. */
  void request_ended(unsigned attempts, std::string_view outcome, std::string_view context);
  /// A retry not made because the layer below spoke: retry_declined_total{reason}, the
  /// reason being `layered` or `overloaded` (retry/layers.hpp).
  void declined(std::string_view reason);
  /// A hedge sent, by what became of it: retry_hedges_total{outcome} (won, lost, failed).
  void hedge(std::string_view outcome);
  /// A hedge due but not sent: retry_hedges_suppressed_total{reason}.
  void hedge_suppressed(std::string_view reason);
  /// A handed-over call dead-lettered: dlq_messages_total{reason,context}.
  void dead_lettered(std::string_view reason, std::string_view context);
  /// idempotent_requests_total{outcome}: stored, replayed, conflict, mismatch, missing, not_stored.
  void idempotent(std::string_view outcome);
  /** An upgrade request (issue 32) ended, by outcome: proxy_upgrades_total{protocol,outcome},
      and the bytes its tunnel carried each way: proxy_upgrade_bytes_total{protocol,direction}.
      One call per upgrade, when it ends: each takes Family::Add's lock, as rare as a handshake. */
  void upgrade_ended(std::string_view protocol, std::string_view outcome, std::uint64_t to_upstream,
                     std::uint64_t to_client);
  /// A request answered, by rebound or by the upstream: proxy_requests_total{code}.
  void answered(unsigned code);
  /// A request the concurrency limit cut short (issue 51): requests_limited_total.
  void limited();
  /// An address of the dependency's name ejected (issue 50): upstream_address_ejections_total.
  void address_ejected();
  /// The concurrency limit and the attempts in flight, all workers' lanes added up:
  /// dependency_concurrency_limit and dependency_requests_in_flight (series only for a
  /// dependency with a limit: they are made on the first call).
  void set_concurrency(unsigned limit, unsigned in_flight);
  void set_budget_utilization(double ratio);
  void set_breaker_state(int state);  ///< 0 closed, 1 half-open, 2 open

  dependency_metrics(metrics& owner, std::string name);
  ~dependency_metrics();
  dependency_metrics(const dependency_metrics&) = delete;
  dependency_metrics& operator=(const dependency_metrics&) = delete;

  /** Adds what the threads counted in their shards since the last call to the registry's
      children. metrics::scrape calls it, one caller at a time, before it collects. */
  void fold();

 private:
  static constexpr unsigned attempt_slots = 32;

  /** What every proxied request writes, kept per thread instead of in the registry's
      children: a prometheus-cpp counter is one atomic and a histogram a mutex, both shared by
      every worker, so two workers counting requests bounced the same cache lines between
      their cores on every request. Each thread writes its own shard (relaxed adds on a line
      no other writer touches, unless more threads than shards share one); fold() adds the
      shards up when /metrics is scraped. Only the success path's series live here: a first
      attempt, its duration, a sync request that succeeded first time or later, and the
      status codes most answers carry. Everything rarer goes to the registry directly. */
  static constexpr std::size_t shard_count = 8;
  static constexpr std::size_t latency_slots = 19;  ///< latency_buckets() and +Inf
  static constexpr std::size_t attempt_count_slots = 13;  ///< attempt_count_buckets() and +Inf
  static constexpr std::size_t codes_per_shard = 4;
  struct alignas(64) shard {
    std::atomic<std::uint64_t> first_attempts{0};  ///< retry_attempts_total{attempt_number="1"}
    std::array<std::atomic<std::uint64_t>, latency_slots> latency{};  ///< per bucket, not cumulative
    std::atomic<std::uint64_t> latency_sum_us{0};
    std::array<std::atomic<std::uint64_t>, attempt_count_slots> sync_successes{};  ///< retry_request_attempts
    std::atomic<std::uint64_t> sync_success_attempts{0};                           ///< its sum
    std::array<std::atomic<std::uint32_t>, codes_per_shard> codes{};  ///< a status code, 0 while free
    std::array<std::atomic<std::uint64_t>, codes_per_shard> code_counts{};
  };
  /// The shard of the calling thread, made on its first write.
  shard& mine();
  /// proxy_requests_total's child for `code`, through the lock-free table below.
  prometheus::Counter& code_counter(unsigned code);

  std::array<std::atomic<shard*>, shard_count> shards_{};
  /// What fold() added so far, summed over the shards (only fold() touches it).
  struct totals {
    std::uint64_t first_attempts = 0;
    std::array<std::uint64_t, latency_slots> latency{};
    std::uint64_t latency_sum_us = 0;
    std::array<std::uint64_t, attempt_count_slots> sync_successes{};
    std::uint64_t sync_success_attempts = 0;
    std::array<std::pair<unsigned, std::uint64_t>, shard_count * codes_per_shard> codes{};
  };
  totals folded_;

  metrics& owner_;
  std::string name_;
  prometheus::Counter& exhausted_;
  prometheus::Histogram& backoff_;
  prometheus::Histogram& upstream_duration_;
  prometheus::Gauge& budget_utilization_;
  prometheus::Gauge& breaker_state_;
  std::array<std::atomic<prometheus::Counter*>, attempt_slots> attempts_{};
  /// retry_request_attempts' children, one per context (sync, async, webhook, batch, grpc)
  /// and outcome (success, failure, abandoned): every request records one.
  std::array<std::atomic<prometheus::Histogram*>, 15> ended_{};
  /// retry_declined_total's children for `layered` and `overloaded`: in an outage every
  /// request may count one, so they are looked up once.
  std::array<std::atomic<prometheus::Counter*>, 2> declined_{};
  /// retry_hedges_total's children: won, lost, failed.
  std::array<std::atomic<prometheus::Counter*>, 3> hedges_{};
  /// requests_limited_total's child: under overload every request may count one.
  std::atomic<prometheus::Counter*> limited_{};
  /// proxy_requests_total's children by code: a tiny open-addressed table, each word a
  /// code (high 16 bits) and its counter's address (low 48), so 4,096 dependencies do not
  /// carry 500 slots each. Codes beyond its size take Family::Add's lock.
  static constexpr unsigned code_slots = 16;
  std::array<std::atomic<std::uint64_t>, code_slots> codes_{};
};

class metrics {
 public:
  explicit metrics(std::string service);
  metrics(const metrics&) = delete;
  metrics& operator=(const metrics&) = delete;

  /// The children of `dependency`, made on first use; the reference stays valid.
  dependency_metrics& dependency(const std::string& name);

  // Async delivery (seed 001, R-8). Rare next to requests: each takes Family::Add's lock.
  /// A handed-over task ended (delivered, dead-lettered): retry_task_age_seconds{dependency,context}.
  void task_ended(const std::string& dependency, std::string_view context, std::chrono::duration<double> age);
  /** What a store holds is the store's, not this process's: these series carry `store`
      (task_store::identity), so replicas with a file each are added up and instances sharing
      one database are counted once (max per store, then sum). */
  /// retry_tasks{store,status}: tasks in the store by status, as last counted.
  void set_tasks(std::string_view store, std::string_view status, std::uint64_t n);
  /** Tasks not yet ended (pending or in flight), as last counted: how many were accepted
      more than 24 hours ago (retry_tasks_pending_over_24h, seed 003's "events in retry > 24
      hours") and the age of the oldest (retry_task_oldest_pending_age_seconds, 0 with none). */
  void set_backlog(std::string_view store, std::uint64_t over_24h, std::chrono::duration<double> oldest);
  /// store_up: 1 while the store answers the scheduler's calls, 0 while it does not.
  void set_store_up(bool up);
  /// Spans a collector accepted (trace_spans_exported_total) and spans lost, by reason:
  /// queue_full (the export queue was full) or export_failed (trace_spans_dropped_total).
  void spans_exported(std::size_t n);
  void spans_dropped(std::string_view reason, std::size_t n);
  /// An alert notice ended `delivered` or `failed`, or was `lost` before it was stored:
  /// alert_notices_total{outcome}. Kept apart from retry_request_attempts, so rebound's own
  /// notices never count in a dependency's dead-letter rate.
  void alert_notice(std::string_view outcome);
  /** A DNS lookup of an upstream name ended (dns_lookups_total{result}): `answered` (addresses),
      `absent` (the name does not exist or has no address), `stale` (the servers failed and the
      last answer bridged it), `failed` (the servers failed with nothing to bridge). Once per
      name and TTL at most, so the shared counter costs nothing on the request path. */
  void dns_lookup(std::string_view result);
  /// A store commit and its fsync: store_commit_duration_seconds.
  void store_commit(std::chrono::nanoseconds took);

  /// The Prometheus text exposition format (version 0.0.4) of everything.
  std::string scrape() const;

 private:
  friend class dependency_metrics;
  prometheus::Labels labels(const std::string& dependency) const {
    return {{"service", service_}, {"dependency", dependency}};
  }

  std::string service_;
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& attempts_;
  prometheus::Family<prometheus::Counter>& exhausted_;
  prometheus::Family<prometheus::Counter>& declined_;
  prometheus::Family<prometheus::Counter>& hedges_;
  prometheus::Family<prometheus::Counter>& hedges_suppressed_;
  prometheus::Family<prometheus::Histogram>& backoff_;
  prometheus::Family<prometheus::Histogram>& request_attempts_;
  prometheus::Family<prometheus::Gauge>& budget_utilization_;
  prometheus::Family<prometheus::Counter>& dlq_messages_;
  prometheus::Family<prometheus::Gauge>& breaker_state_;
  prometheus::Family<prometheus::Counter>& limited_;
  prometheus::Family<prometheus::Counter>& address_ejections_;
  prometheus::Family<prometheus::Gauge>& concurrency_limit_;
  prometheus::Family<prometheus::Gauge>& in_flight_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& upstream_duration_;
  prometheus::Family<prometheus::Counter>& idempotent_;
  prometheus::Family<prometheus::Counter>& upgrades_;
  prometheus::Family<prometheus::Counter>& upgrade_bytes_;
  prometheus::Family<prometheus::Histogram>& task_age_;
  prometheus::Family<prometheus::Gauge>& tasks_;
  // Series only once a store is counted: a process without one has no store to be down.
  prometheus::Family<prometheus::Gauge>& backlog_over_24h_;
  prometheus::Family<prometheus::Gauge>& oldest_pending_;
  prometheus::Family<prometheus::Gauge>& store_up_;
  prometheus::Family<prometheus::Counter>& spans_exported_;
  prometheus::Family<prometheus::Counter>& spans_dropped_;
  prometheus::Family<prometheus::Counter>& alert_notices_;
  prometheus::Family<prometheus::Counter>& dns_lookups_;
  prometheus::Histogram& store_commit_;

  mutable std::mutex mutex_;  ///< dependencies_, and one fold at a time
  std::unordered_map<std::string, std::unique_ptr<dependency_metrics>> dependencies_;
};

}  // namespace rebound::observe
