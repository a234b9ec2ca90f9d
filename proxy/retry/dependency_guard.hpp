#pragma once
/** What rebound tracks per dependency across all workers: the retry budget and the
    circuit breaker, and the gate the retry loop asks. Also the registry that finds a
    dependency's guard by name.

    The pure rules live in budget.hpp and breaker.hpp; this file adds the clock, the random
    draw for the breaker's jitter, and the log events of breaker changes. */
#include "proxy/retry/name_hash.hpp"
#include "proxy/retry/policy.hpp"
#include "proxy/observe/log.hpp"
#include "proxy/observe/metrics.hpp"
#include "proxy/retry/breaker.hpp"
#include "proxy/retry/budget.hpp"
#include "proxy/retry/concurrency_lane.hpp"
#include "proxy/retry/latency_tracker.hpp"
#include "proxy/retry/loop_hooks.hpp"
#include "proxy/retry/address_health.hpp"

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rebound::retry {

class dependency_guard final : public dependency_gate, public attempt_observer, public address_observer {
 public:
  /// `lanes`: the workers, each of which holds its share of the concurrency limit.
  dependency_guard(std::string name, const retry::policy& p, const observe::logger& log,
                   observe::dependency_metrics& metrics, unsigned lanes = 1);

  admission admit() override;
  retry_permit allow_retry() override;
  void record(bool failed) override;

  void attempt_done(const attempt_report& r) override;
  void hedge(std::string_view outcome) override { metrics_.hedge(outcome); }
  void hedge_suppressed(std::string_view reason) override { metrics_.hedge_suppressed(reason); }
  /// The 95th percentile of the time attempts took to bring back a response head over the
  /// last 10 s (`hedge: {after: p95}`); none before latency_tracker::min_samples.
  std::optional<duration> observed_p95() const;
  void retry_scheduled(duration wait) override { metrics_.backoff(wait); }
  void exhausted() override { metrics_.exhausted(); }
  void ended(unsigned attempts, call_end how, std::string_view context) override {
    metrics_.request_ended(attempts, to_string(how), context);
  }
  void declined(std::string_view reason) override { metrics_.declined(reason); }
  void limited() override { metrics_.limited(); }
  /** Outlier ejection per address (address_health.hpp), shared by the workers: an
      address failing on one worker is passed over by all. The lock is taken only while some
      address has failures on record; a healthy dependency's requests never take it. */
  void address_failed(const net::ip::address& a, std::size_t name_addresses) override;
  void address_answered(const net::ip::address& a) override;
  void ejected_addresses(std::vector<net::ip::address>& out) override;

  /// Worker `i`'s share of the concurrency limit (issue 51); null when `concurrency` is off.
  concurrency_lane* lane(std::size_t i) { return lanes_.empty() ? nullptr : lanes_[i % lanes_.size()].get(); }
  /// The client got `code`, from the upstream or from rebound (proxy_requests_total).
  void answered(unsigned code) { metrics_.answered(code); }
  void dead_lettered(std::string_view reason, std::string_view context) { metrics_.dead_lettered(reason, context); }
  /// An inbound request through the idempotency gate: idempotent_requests_total{outcome}.
  void idempotent(std::string_view outcome) { metrics_.idempotent(outcome); }
  void upgrade_ended(std::string_view protocol, std::string_view outcome, std::uint64_t to_upstream,
                     std::uint64_t to_client) {
    metrics_.upgrade_ended(protocol, outcome, to_upstream, to_client);
  }
  /// Sets the gauges that describe a moment (budget utilization, breaker state); a scrape
  /// calls it, so they are as fresh as the scrape.
  void publish() const;

  const std::string& name() const { return name_; }
  /// Whether `p` sets this guard's budget and breaker as they are (a reload may keep it).
  bool same_settings(const retry::policy& p) const {
    return budget_.policy() == p.budget && breaker_.policy() == p.circuit_breaker && concurrency_ == p.concurrency &&
           outlier_ == p.outlier_detection;
  }

  /// For GET /dependencies (SPEC 7).
  struct snapshot {
    std::string name;
    retry_budget::usage budget;
    breaker_state state = breaker_state::closed;
    std::chrono::milliseconds in_state{0};
    retry::breaker_mode mode = retry::breaker_mode::enforce;
    /// The lanes added up; min_rtt the least any lane measured.
    retry::concurrency_mode concurrency = retry::concurrency_mode::off;
    concurrency_lane::reading limit;
    std::vector<address_health::reading> ejected;  ///< the addresses ejected now
  };
  snapshot take_snapshot() const;

 private:
  double draw();
  concurrency_lane::reading lanes_reading() const;
  void report(const std::optional<breaker_transition>& t, std::string_view detail = {});

  std::string name_;
  retry::breaker_mode mode_;
  bool open_on_budget_exhausted_;
  const observe::logger& log_;
  observe::dependency_metrics& metrics_;
  retry_budget budget_;
  circuit_breaker breaker_;
  latency_tracker latency_;
  retry::concurrency_policy concurrency_;
  std::vector<std::unique_ptr<concurrency_lane>> lanes_;  ///< one per worker; none when off
  retry::outlier_policy outlier_;
  mutable std::mutex addresses_mutex_;
  address_health addresses_;
  std::atomic<std::size_t> addresses_tracked_{0};  ///< addresses_.tracked(), read without the lock
  std::atomic<std::uint64_t> draws_;  ///< a lock-free source for the breaker's jitter (splitmix64)
};

/** Every dependency's guard: the configured ones made at start-up, unknown hosts' on first
    use. Workers keep their own cache in front of it, so its mutex is taken once per worker
    and new host, never per request. */
class guard_registry {
 public:
  /// The name unknown hosts past `limits.max_unknown_hosts` share, in logs and metrics.
  static constexpr std::string_view other_hosts = "(other hosts)";

  /// `lanes`: the worker count, each worker's guard_cache naming its lane.
  guard_registry(const dependency_policies& deps, const observe::logger& log, observe::metrics& metrics,
                 unsigned lanes = 1);
  /// The guard of `name`; held by the caller for as long as it uses it (a request, a cache).
  std::shared_ptr<dependency_guard> find(const std::string& name, const retry::policy& p);

  /// What a reload did to the guards, by dependency name.
  struct reload_report {
    std::vector<std::string> kept;     ///< same budget and breaker settings: state carried over
    std::vector<std::string> reset;    ///< settings changed: a fresh budget and breaker
    std::vector<std::string> added;    ///< newly configured
    std::vector<std::string> removed;  ///< no longer configured
  };
  /** A new config (SIGHUP). Guards of dependencies that still exist with the same budget and
      breaker settings keep their state; the others are replaced, and unknown hosts' guards
      follow `defaults` the same way. A replaced guard lives while requests in flight or a
      worker's cache still hold it, and is freed with the last of them; workers clear their
      caches afterwards. */
  reload_report reconfigure(const dependency_policies& deps);
  std::vector<dependency_guard::snapshot> snapshots() const;
  /// publish() of every guard, before a scrape.
  void publish() const;

 private:
  const observe::logger& log_;
  observe::metrics& metrics_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<dependency_guard>> guards_;
  std::unordered_map<std::string, bool> configured_;  ///< names the current config names
  std::size_t unknown_ = 0;
  /// limits.max_unknown_hosts: at most this many unknown hosts get a guard (and metric
  /// series) each; the rest share `(other hosts)`, so a client inventing host names can grow
  /// neither memory nor the metrics scrape without bound.
  std::size_t max_unknown_;
  unsigned lanes_;
};

/// One worker's view of the registry.
class guard_cache {
 public:
  /// `lane`: this worker's number, its lane in every guard's concurrency limit.
  explicit guard_cache(guard_registry& r, unsigned lane = 0) : registry_(r), lane_(lane) {}
  /// This worker's share of `g`'s concurrency limit; null when it has none.
  concurrency_lane* lane_of(dependency_guard& g) const { return g.lane(lane_); }
  /// After the registry's reconfigure(), on the worker's own thread.
  void clear() { cache_.clear(); }
  std::shared_ptr<dependency_guard> find(std::string_view name, const retry::policy& p) {
    if (auto it = cache_.find(name); it != cache_.end()) return it->second;
    auto g = registry_.find(std::string(name), p);
    // Names past the registry's cap share one guard and are not cached either, so invented
    // host names grow no worker's memory.
    if (g->name() == name) cache_.emplace(std::string(name), g);
    return g;
  }

 private:
  guard_registry& registry_;
  unsigned lane_;
  std::unordered_map<std::string, std::shared_ptr<dependency_guard>, name_hash, std::equal_to<>> cache_;
};

}  // namespace rebound::retry
