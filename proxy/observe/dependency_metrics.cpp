#include "proxy/observe/metrics.hpp"

#include "proxy/observe/metric_families.hpp"

// One dependency's series: counted per worker thread on its own shard (no shared cache line
// per request) and folded into the registry's families when /metrics is scraped.
namespace rebound::observe {

using namespace detail;
using prometheus::Histogram;

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
      auto const known =
          std::find_if(now.codes.begin(), now.codes.begin() + codes, [&](auto& c) { return c.first == code; });
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

}  // namespace rebound::observe
