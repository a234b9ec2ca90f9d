#include "proxy/observe/metrics.hpp"

#include <prometheus/text_serializer.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace rebound::observe {
namespace {

using prometheus::Histogram;

/// Backoff waits: R-1's base of a few ms up to the 5 minute caps of async contexts.
const Histogram::BucketBoundaries& backoff_buckets() {
  static const Histogram::BucketBoundaries b{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                             1,     2.5,    5,     10,   30,    60,   120, 300};
  return b;
}

/// Attempts a request took: R-2's counts, from one up to the longest async schedules.
const Histogram::BucketBoundaries& attempt_count_buckets() {
  static const Histogram::BucketBoundaries b{1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50};
  return b;
}

/// Upstream attempts: a loopback answer (100 us) up to the longest attempt_timeout worth having.
const Histogram::BucketBoundaries& latency_buckets() {
  static const Histogram::BucketBoundaries b{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                             0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30,    60};
  return b;
}

/// A task's age when it ends: a first attempt that works (ms) up to R-3's 24 hours and a replay.
const Histogram::BucketBoundaries& task_age_buckets() {
  static const Histogram::BucketBoundaries b{0.01, 0.05, 0.1,  0.5,  1,     5,     30,    60,    300,
                                             900,  1800, 3600, 7200, 14400, 43200, 86400, 172800};
  return b;
}

/// A commit is an fsync: tens of microseconds on a cache-backed disk, tens of ms on a busy one.
const Histogram::BucketBoundaries& commit_buckets() {
  static const Histogram::BucketBoundaries b{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                             0.01,   0.025,   0.05,   0.1,   0.25,   1};
  return b;
}

/// The counters whose series appear only with their first event, with their help text.
struct counter_name {
  const char* name;
  const char* help;
};
constexpr counter_name attempts_total{"retry_attempts_total",
                                      "Upstream attempts, by attempt number (1 = the original request)"};
constexpr counter_name exhausted_total{"retry_exhausted_total",
                                       "Requests whose retries ran out (max_retries) while still failing"};
constexpr counter_name declined_total{
    "retry_declined_total",
    "Retries not made because the layer below already retried (layered) or shed the call (overloaded)"};
constexpr counter_name hedges_total{
    "retry_hedges_total",
    "Hedges sent (a second copy of a slow idempotent request), by outcome: won, lost (cancelled), failed"};
constexpr counter_name hedges_suppressed_total{
    "retry_hedges_suppressed_total",
    "Hedges due but not sent, by reason: budget_exhausted, circuit_open (R-7) or concurrency_limited"};
constexpr counter_name limited_total{
    "requests_limited_total",
    "Requests the dependency's concurrency limit cut short: answered 503 concurrency_limited at once, or a retry "
    "not sent"};
constexpr counter_name address_ejections_total{
    "upstream_address_ejections_total",
    "Addresses of the dependency's name ejected for failing outlier_detection.consecutive_failures times in a row "
    "(each ejection counted once)"};
constexpr counter_name dlq_total{"dlq_messages_total", "Messages moved to a dead-letter queue (R-8)"};
constexpr counter_name requests_total{"proxy_requests_total", "Requests answered, by the status code the client got"};
constexpr counter_name upgrades_total{
    "proxy_upgrades_total",
    "Upgrade requests (WebSocket), by outcome: switched (101 relayed, then a tunnel), declined (the upstream "
    "answered without switching), refused (the route's upgrades: or a malformed handshake), failed (no answer)"};
constexpr counter_name upgrade_bytes_total{"proxy_upgrade_bytes_total",
                                           "Bytes through upgraded connections, by direction: upstream or client"};
constexpr counter_name idempotent_total{"idempotent_requests_total",
                                        "Inbound requests through the idempotency gate (R-6), by outcome"};

prometheus::Family<prometheus::Counter>& counter(const counter_name& c, prometheus::Registry& r) {
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

/// The shard the calling thread writes, given out round robin on the thread's first write:
/// workers are made one after another at start-up, so each gets a shard of its own.
std::size_t this_thread_shard(std::size_t count) {
  static std::atomic<std::size_t> next{0};
  thread_local std::size_t const mine = next.fetch_add(1, std::memory_order_relaxed);
  return mine % count;
}

/// The bucket a value falls in, as prometheus-cpp's Observe finds it (the first bound >= it);
/// the last slot is +Inf.
std::size_t bucket_of(const Histogram::BucketBoundaries& bounds, double value) {
  return static_cast<std::size_t>(std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin());
}

constexpr auto relaxed = std::memory_order_relaxed;

}  // namespace

dependency_metrics::dependency_metrics(metrics& owner, std::string name)
    : owner_(owner),
      name_(std::move(name)),
      exhausted_(owner.exhausted_.Add(owner.labels(name_))),
      backoff_(owner.backoff_.Add(owner.labels(name_), backoff_buckets())),
      upstream_duration_(owner.upstream_duration_.Add(owner.labels(name_), latency_buckets())),
      budget_utilization_(owner.budget_utilization_.Add(owner.labels(name_))),
      breaker_state_(owner.breaker_state_.Add(owner.labels(name_))) {
  if (latency_buckets().size() + 1 != latency_slots || attempt_count_buckets().size() + 1 != attempt_count_slots)
    throw std::logic_error("dependency_metrics: a shard's buckets do not match the histogram's");
}

dependency_metrics::~dependency_metrics() {
  for (auto& s : shards_) delete s.load(std::memory_order_acquire);
}

dependency_metrics::shard& dependency_metrics::mine() {
  auto& slot = shards_[this_thread_shard(shard_count)];
  auto* s = slot.load(std::memory_order_acquire);
  if (s) return *s;
  auto* fresh = new shard{};
  if (slot.compare_exchange_strong(s, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;  // another thread of this shard made it first: `s` is theirs
  return *s;
}

void dependency_metrics::attempt(unsigned attempt_number, std::chrono::microseconds took) {
  auto labels = [&] {
    auto l = owner_.labels(name_);
    l.emplace("attempt_number", std::to_string(attempt_number));
    return l;
  };
  // The cached child first: building the label map was three allocations and a locked
  // Family lookup on every attempt (bench/README.md, "allocations per request").
  auto& mine = this->mine();
  auto const seconds = std::chrono::duration<double>(took).count();
  mine.latency[bucket_of(latency_buckets(), seconds)].fetch_add(1, relaxed);
  mine.latency_sum_us.fetch_add(static_cast<std::uint64_t>(std::max<std::int64_t>(took.count(), 0)), relaxed);
  if (attempt_number == 1) {
    mine.first_attempts.fetch_add(1, relaxed);
  } else if (attempt_number >= 1 && attempt_number <= attempt_slots) {
    auto& slot = attempts_[attempt_number - 1];
    if (auto* c = slot.load(std::memory_order_acquire))
      c->Increment();
    else
      lazily(slot, owner_.attempts_, labels()).Increment();
  } else
    owner_.attempts_.Add(labels()).Increment();
}

void dependency_metrics::backoff(std::chrono::milliseconds wait) {
  backoff_.Observe(std::chrono::duration<double>(wait).count());
}

void dependency_metrics::exhausted() { exhausted_.Increment(); }

void dependency_metrics::request_ended(unsigned attempts, std::string_view outcome, std::string_view context) {
  if (context == "sync" && outcome == "success") {
    auto& mine = this->mine();
    mine.sync_successes[bucket_of(attempt_count_buckets(), attempts)].fetch_add(1, relaxed);
    mine.sync_success_attempts.fetch_add(attempts, relaxed);
    return;
  }
  constexpr std::array<std::string_view, 5> contexts{"sync", "async", "webhook", "batch", "grpc"};
  constexpr std::array<std::string_view, 3> outcomes{"success", "failure", "abandoned"};
  auto const c = std::find(contexts.begin(), contexts.end(), context) - contexts.begin();
  auto const o = std::find(outcomes.begin(), outcomes.end(), outcome) - outcomes.begin();
  auto const known = c < std::ssize(contexts) && o < std::ssize(outcomes);
  auto const slot = static_cast<std::size_t>(known ? c * std::ssize(outcomes) + o : 0);
  if (known)
    if (auto* h = ended_[slot].load(std::memory_order_acquire)) return h->Observe(attempts);
  auto l = owner_.labels(name_);
  l.emplace("context", std::string(context));
  l.emplace("outcome", std::string(outcome));
  if (!known) return owner_.request_attempts_.Add(l, attempt_count_buckets()).Observe(attempts);
  auto& h = owner_.request_attempts_.Add(l, attempt_count_buckets());
  ended_[slot].store(&h, std::memory_order_release);
  h.Observe(attempts);
}

void dependency_metrics::declined(std::string_view reason) {
  int const slot = reason == "layered" ? 0 : reason == "overloaded" ? 1 : -1;
  if (slot >= 0)
    if (auto* c = declined_[slot].load(std::memory_order_acquire)) return c->Increment();
  auto l = owner_.labels(name_);
  l.emplace("reason", std::string(reason));
  if (slot >= 0) return lazily(declined_[slot], owner_.declined_, l).Increment();
  owner_.declined_.Add(l).Increment();
}

void dependency_metrics::hedge(std::string_view outcome) {
  int const slot = outcome == "won" ? 0 : outcome == "lost" ? 1 : outcome == "failed" ? 2 : -1;
  auto l = owner_.labels(name_);
  l.emplace("outcome", std::string(outcome));
  if (slot < 0) return owner_.hedges_.Add(l).Increment();
  if (auto* c = hedges_[slot].load(std::memory_order_acquire)) return c->Increment();
  lazily(hedges_[slot], owner_.hedges_, l).Increment();
}

void dependency_metrics::hedge_suppressed(std::string_view reason) {
  auto l = owner_.labels(name_);
  l.emplace("reason", std::string(reason));
  owner_.hedges_suppressed_.Add(l).Increment();  // only while the budget or breaker refuses: Family::Add's lock is fine
}

void dependency_metrics::dead_lettered(std::string_view reason, std::string_view context) {
  auto labels = owner_.labels(name_);
  labels.emplace("reason", std::string(reason));
  labels.emplace("context", std::string(context));
  owner_.dlq_messages_.Add(labels).Increment();  // rare: Family::Add's lock is no cost here
}

void dependency_metrics::idempotent(std::string_view outcome) {
  auto labels = owner_.labels(name_);
  labels.emplace("outcome", std::string(outcome));
  owner_.idempotent_.Add(labels).Increment();
}

void dependency_metrics::upgrade_ended(std::string_view protocol, std::string_view outcome, std::uint64_t to_upstream,
                                       std::uint64_t to_client) {
  auto labels = owner_.labels(name_);
  labels.emplace("protocol", std::string(protocol));
  auto counted = labels;
  counted.emplace("outcome", std::string(outcome));
  owner_.upgrades_.Add(counted).Increment();
  if (to_upstream == 0 && to_client == 0) return;
  for (auto [direction, n] : {std::pair{"upstream", to_upstream}, std::pair{"client", to_client}}) {
    auto l = labels;
    l.emplace("direction", direction);
    owner_.upgrade_bytes_.Add(l).Increment(static_cast<double>(n));
  }
}

void dependency_metrics::answered(unsigned code) {
  if (code < 100 || code > 599) return;
  auto& mine = this->mine();
  for (std::size_t i = 0; i < codes_per_shard; ++i) {
    auto held = mine.codes[i].load(relaxed);
    if (held == 0 && mine.codes[i].compare_exchange_strong(held, code, relaxed)) held = code;
    if (held == code) {
      mine.code_counts[i].fetch_add(1, relaxed);
      return;
    }
  }
  code_counter(code).Increment();  // a fifth code in this shard: rare enough for the registry
}

prometheus::Counter& dependency_metrics::code_counter(unsigned code) {
  constexpr std::uint64_t address_mask = (std::uint64_t{1} << 48) - 1;
  auto const child = [&]() -> prometheus::Counter& {
    auto l = owner_.labels(name_);
    l.emplace("code", std::to_string(code));
    return owner_.requests_.Add(l);
  };
  for (unsigned i = 0; i < code_slots; ++i) {
    auto& slot = codes_[(code + i) % code_slots];
    auto word = slot.load(std::memory_order_acquire);
    if (word == 0) {
      auto& c = child();
      auto const mine = (std::uint64_t{code} << 48) | reinterpret_cast<std::uintptr_t>(&c);
      if (slot.compare_exchange_strong(word, mine, std::memory_order_acq_rel)) return c;
      // Another worker filled the slot first: `word` now holds its entry.
    }
    if ((word >> 48) == code) return *reinterpret_cast<prometheus::Counter*>(word & address_mask);
  }
  return child();
}

void dependency_metrics::fold() {
  totals now;
  std::size_t codes = 0;
  for (auto const& slot : shards_) {
    auto const* s = slot.load(std::memory_order_acquire);
    if (!s) continue;
    now.first_attempts += s->first_attempts.load(relaxed);
    for (std::size_t i = 0; i < latency_slots; ++i) now.latency[i] += s->latency[i].load(relaxed);
    now.latency_sum_us += s->latency_sum_us.load(relaxed);
    for (std::size_t i = 0; i < attempt_count_slots; ++i) now.sync_successes[i] += s->sync_successes[i].load(relaxed);
    now.sync_success_attempts += s->sync_success_attempts.load(relaxed);
    for (std::size_t i = 0; i < codes_per_shard; ++i) {
      auto const code = s->codes[i].load(relaxed);
      if (code == 0) continue;
      auto const n = s->code_counts[i].load(relaxed);
      auto const known = std::find_if(now.codes.begin(), now.codes.begin() + codes, [&](auto& c) { return c.first == code; });
      if (known != now.codes.begin() + codes)
        known->second += n;
      else
        now.codes[codes++] = {code, n};
    }
  }
  // Each total only grows: a shard's count is read after the code it counts was claimed,
  // and a later fold sees at least what an earlier one did.
  if (auto const d = now.first_attempts - folded_.first_attempts) {
    auto l = owner_.labels(name_);
    l.emplace("attempt_number", "1");
    lazily(attempts_[0], owner_.attempts_, l).Increment(static_cast<double>(d));
  }
  auto const fold_histogram = [](prometheus::Histogram& h, auto const& now_slots, auto const& was_slots, double sum) {
    std::vector<double> increments(now_slots.size());
    bool any = false;
    for (std::size_t i = 0; i < now_slots.size(); ++i) {
      increments[i] = static_cast<double>(now_slots[i] - was_slots[i]);
      any = any || increments[i] > 0;
    }
    if (any) h.ObserveMultiple(increments, sum);
  };
  fold_histogram(upstream_duration_, now.latency, folded_.latency,
                 static_cast<double>(now.latency_sum_us - folded_.latency_sum_us) / 1e6);
  if (now.sync_successes != folded_.sync_successes) {
    auto l = owner_.labels(name_);
    l.emplace("context", "sync");
    l.emplace("outcome", "success");
    auto& h = lazily(ended_[0], owner_.request_attempts_, l, attempt_count_buckets());
    fold_histogram(h, now.sync_successes, folded_.sync_successes,
                   static_cast<double>(now.sync_success_attempts - folded_.sync_success_attempts));
  }
  for (std::size_t i = 0; i < codes; ++i) {
    auto const [code, n] = now.codes[i];
    auto const was = std::find_if(folded_.codes.begin(), folded_.codes.end(), [&](auto& c) { return c.first == code; });
    auto const before = was != folded_.codes.end() ? was->second : 0;
    if (n > before) code_counter(code).Increment(static_cast<double>(n - before));
  }
  folded_ = now;
}

void dependency_metrics::limited() {
  if (auto* c = limited_.load(std::memory_order_acquire)) return c->Increment();
  lazily(limited_, owner_.limited_, owner_.labels(name_)).Increment();
}

void dependency_metrics::address_ejected() {
  owner_.address_ejections_.Add(owner_.labels(name_)).Increment();  // rare: Family::Add's lock is fine
}

void dependency_metrics::set_concurrency(unsigned limit, unsigned in_flight) {
  owner_.concurrency_limit_.Add(owner_.labels(name_)).Set(limit);  // at a scrape: Family::Add's lock is fine
  owner_.in_flight_.Add(owner_.labels(name_)).Set(in_flight);
}

void dependency_metrics::set_budget_utilization(double ratio) { budget_utilization_.Set(ratio); }
void dependency_metrics::set_breaker_state(int state) { breaker_state_.Set(state); }

metrics::metrics(std::string service)
    : service_(std::move(service)),
      registry_(std::make_shared<prometheus::Registry>()),
      attempts_(counter(attempts_total, *registry_)),
      exhausted_(counter(exhausted_total, *registry_)),
      declined_(counter(declined_total, *registry_)),
      hedges_(counter(hedges_total, *registry_)),
      hedges_suppressed_(counter(hedges_suppressed_total, *registry_)),
      backoff_(prometheus::BuildHistogram()
                   .Name("retry_backoff_duration_seconds")
                   .Help("Waits scheduled before a retry")
                   .Register(*registry_)),
      request_attempts_(prometheus::BuildHistogram()
                            .Name("retry_request_attempts")
                            .Help("Attempts a request or handed-over task took, counted when it ended, by outcome "
                                  "(success, failure, abandoned) and context")
                            .Register(*registry_)),
      budget_utilization_(prometheus::BuildGauge()
                              .Name("retry_budget_utilization_ratio")
                              .Help("Retries spent over retries allowed in the budget window (R-7)")
                              .Register(*registry_)),
      dlq_messages_(counter(dlq_total, *registry_)),
      breaker_state_(prometheus::BuildGauge()
                         .Name("circuit_breaker_state")
                         .Help("Circuit breaker state: 0 closed, 1 half-open, 2 open")
                         .Register(*registry_)),
      limited_(counter(limited_total, *registry_)),
      address_ejections_(counter(address_ejections_total, *registry_)),
      concurrency_limit_(prometheus::BuildGauge()
                             .Name("dependency_concurrency_limit")
                             .Help("Attempts the dependency may have in flight at once, all workers' shares added up")
                             .Register(*registry_)),
      in_flight_(prometheus::BuildGauge()
                     .Name("dependency_requests_in_flight")
                     .Help("Attempts in flight to the dependency, all workers added up")
                     .Register(*registry_)),
      requests_(counter(requests_total, *registry_)),
      upstream_duration_(prometheus::BuildHistogram()
                             .Name("upstream_request_duration_seconds")
                             .Help("Upstream attempts, from connect to the response head")
                             .Register(*registry_)),
      idempotent_(counter(idempotent_total, *registry_)),
      upgrades_(counter(upgrades_total, *registry_)),
      upgrade_bytes_(counter(upgrade_bytes_total, *registry_)),
      task_age_(prometheus::BuildHistogram()
                    .Name("retry_task_age_seconds")
                    .Help("Age of handed-over tasks when they end (delivered or dead-lettered), from accept")
                    .Register(*registry_)),
      tasks_(prometheus::BuildGauge()
                 .Name("retry_tasks")
                 .Help("Handed-over tasks in the store, by status, as last counted")
                 .Register(*registry_)),
      backlog_over_24h_(prometheus::BuildGauge()
                            .Name("retry_tasks_pending_over_24h")
                            .Help("Handed-over tasks not yet ended (pending or in flight) accepted more than 24 "
                                  "hours ago, as last counted")
                            .Register(*registry_)),
      oldest_pending_(prometheus::BuildGauge()
                          .Name("retry_task_oldest_pending_age_seconds")
                          .Help("Age of the oldest handed-over task not yet ended, as last counted (0: none)")
                          .Register(*registry_)),
      store_up_(prometheus::BuildGauge()
                    .Name("store_up")
                    .Help("1 while the task store answers, 0 while it is unavailable")
                    .Register(*registry_)),
      spans_exported_(prometheus::BuildCounter()
                          .Name("trace_spans_exported_total")
                          .Help("Spans the trace collector accepted (tracing.endpoint)")
                          .Register(*registry_)),
      spans_dropped_(prometheus::BuildCounter()
                         .Name("trace_spans_dropped_total")
                         .Help("Spans not exported, by reason: queue_full (the export queue was full), "
                               "export_failed (the collector refused, timed out or was unreachable)")
                         .Register(*registry_)),
      alert_notices_(prometheus::BuildCounter()
                         .Name("alert_notices_total")
                         .Help("R-8's alert notices (alert.webhook), by outcome: delivered, failed (its retries "
                               "ran out), lost (it could not be stored)")
                         .Register(*registry_)),
      dns_lookups_(prometheus::BuildCounter()
                       .Name("dns_lookups_total")
                       .Help("DNS lookups of upstream names, by result: answered, absent (no such name or no "
                             "address), stale (the servers failed; the last answer was used), failed")
                       .Register(*registry_)),
      store_commit_(prometheus::BuildHistogram()
                        .Name("store_commit_duration_seconds")
                        .Help("Commits of the task store, each with its fsync and the calls grouped into it")
                        .Register(*registry_)
                        .Add({{"service", service_}}, commit_buckets())) {
  // The name every Prometheus client library gives it: rules tell a new process (whose
  // counters start again) from a scrape gap by it (deploy/prometheus/rebound-rules.yml).
  prometheus::BuildGauge()
      .Name("process_start_time_seconds")
      .Help("Start time of the process since the Unix epoch, in seconds")
      .Register(*registry_)
      .Add({{"service", service_}})
      .Set(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
}

void metrics::task_ended(const std::string& dependency, std::string_view context, std::chrono::duration<double> age) {
  auto l = labels(dependency);
  l.emplace("context", std::string(context));
  task_age_.Add(l, task_age_buckets()).Observe(age.count());
}

void metrics::set_tasks(std::string_view store, std::string_view status, std::uint64_t n) {
  tasks_.Add({{"service", service_}, {"store", std::string(store)}, {"status", std::string(status)}})
      .Set(static_cast<double>(n));
}

void metrics::set_backlog(std::string_view store, std::uint64_t over_24h, std::chrono::duration<double> oldest) {
  prometheus::Labels const l{{"service", service_}, {"store", std::string(store)}};
  backlog_over_24h_.Add(l).Set(static_cast<double>(over_24h));
  oldest_pending_.Add(l).Set(oldest.count());
}

void metrics::set_store_up(bool up) { store_up_.Add({{"service", service_}}).Set(up ? 1 : 0); }

void metrics::spans_exported(std::size_t n) {
  spans_exported_.Add({{"service", service_}}).Increment(static_cast<double>(n));
}

void metrics::spans_dropped(std::string_view reason, std::size_t n) {
  spans_dropped_.Add({{"service", service_}, {"reason", std::string(reason)}}).Increment(static_cast<double>(n));
}

void metrics::alert_notice(std::string_view outcome) {
  alert_notices_.Add({{"service", service_}, {"outcome", std::string(outcome)}}).Increment();
}

void metrics::dns_lookup(std::string_view result) {
  dns_lookups_.Add({{"service", service_}, {"result", std::string(result)}}).Increment();
}

void metrics::store_commit(std::chrono::nanoseconds took) {
  store_commit_.Observe(std::chrono::duration<double>(took).count());
}

dependency_metrics& metrics::dependency(const std::string& name) {
  std::lock_guard lock(mutex_);
  auto& slot = dependencies_[name];
  if (!slot) slot = std::make_unique<dependency_metrics>(*this, name);
  return *slot;
}

std::string metrics::scrape() const {
  {
    std::lock_guard lock(mutex_);
    for (auto const& [name, d] : dependencies_) d->fold();
  }
  auto families = registry_->Collect();
  auto text = prometheus::TextSerializer().Serialize(families);
  // prometheus-cpp leaves out a family with no series yet (no attempt made, no message
  // dead-lettered). Its HELP and TYPE lines still go out, so a dashboard or alert rule finds
  // the name from the first scrape on and no series has to be invented to carry it.
  for (auto const& c : {attempts_total, exhausted_total, declined_total, hedges_total, hedges_suppressed_total, dlq_total,
                        requests_total, limited_total, address_ejections_total}) {
    bool const present =
        std::any_of(families.begin(), families.end(), [&](auto const& mf) { return mf.name == c.name; });
    if (!present) text += std::string("# HELP ") + c.name + " " + c.help + "\n# TYPE " + c.name + " counter\n";
  }
  return text;
}

}  // namespace rebound::observe
