#include "proxy/retry/dependency_guard.hpp"

#include "proxy/retry/policy.hpp"

#include <algorithm>
#include <random>

namespace rebound::retry {
namespace {

using clock = std::chrono::steady_clock;

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

dependency_guard::dependency_guard(std::string name, const retry::policy& p, const observe::logger& log,
                                   observe::dependency_metrics& metrics, unsigned lanes)
    : name_(std::move(name)),
      mode_(p.circuit_breaker.mode),
      open_on_budget_exhausted_(p.circuit_breaker.open_on_budget_exhausted),
      log_(log),
      metrics_(metrics),
      budget_(p.budget),
      breaker_(p.circuit_breaker),
      concurrency_(p.concurrency),
      outlier_(p.outlier_detection),
      addresses_(p.outlier_detection),
      draws_(std::random_device{}()) {
  if (!concurrency_.enabled()) return;
  lanes = std::max(1u, lanes);
  for (unsigned i = 0; i < lanes; ++i)
    lanes_.push_back(std::make_unique<concurrency_lane>(concurrency_, lanes, splitmix64(draws_.fetch_add(1))));
}

double dependency_guard::draw() {
  auto const x = splitmix64(draws_.fetch_add(1, std::memory_order_relaxed));
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

void dependency_guard::report(const std::optional<breaker_transition>& t, std::string_view detail) {
  if (!t) return;
  metrics_.set_breaker_state(static_cast<int>(t->to));
  auto const level = t->to == breaker_state::open ? spdlog::level::warn : spdlog::level::info;
  log_.event(level, "circuit_breaker_changed",
             {{"dependency", name_},
              {"from", to_string(t->from)},
              {"to", to_string(t->to)},
              {"reason", t->reason},
              {"mode", retry::to_string(mode_)},
              {"detail", detail}});
}

admission dependency_guard::admit() {
  auto const now = clock::now();
  auto d = breaker_.admit(now);
  report(d.transition);
  if (!d.allowed) return {false, d.retry_after};
  budget_.deposit(now);
  return {};
}

retry_permit dependency_guard::allow_retry() {
  if (!breaker_.allow_retry())
    return {false, error_type::circuit_open, "the circuit breaker is not closed: no retries"};
  auto const now = clock::now();
  if (budget_.try_withdraw(now)) return {};
  if (open_on_budget_exhausted_) report(breaker_.budget_exhausted(now, draw()), "retry budget exhausted (R-7)");
  return {false, error_type::budget_exhausted, "retry budget exhausted (R-7)"};
}

void dependency_guard::attempt_done(const attempt_report& r) {
  metrics_.attempt(r.attempt, r.took);
  // What slow means for this dependency: attempts that brought back a head, whatever its
  // status, and copies cancelled because a hedge won (they took at least this long; left
  // out, the slow tail hedging cuts would vanish from the p95 that sets the hedge's delay).
  if (r.outcome.status || r.cancelled) latency_.record(r.took, clock::now());
}

std::optional<duration> dependency_guard::observed_p95() const {
  auto const q = latency_.quantile(0.95, clock::now());
  if (!q) return std::nullopt;
  return std::chrono::ceil<duration>(*q);
}

void dependency_guard::record(bool failed) { report(breaker_.record(failed, clock::now(), draw())); }

void dependency_guard::publish() const {
  metrics_.set_budget_utilization(budget_.in_window(clock::now()).utilization());
  metrics_.set_breaker_state(static_cast<int>(breaker_.state()));
  if (!lanes_.empty()) {
    auto const r = lanes_reading();
    metrics_.set_concurrency(r.limit, r.in_flight);
  }
}

concurrency_lane::reading dependency_guard::lanes_reading() const {
  concurrency_lane::reading sum;
  for (auto const& l : lanes_) {
    auto const r = l->read();
    sum.limit += r.limit;
    sum.in_flight += r.in_flight;
    sum.probing = sum.probing || r.probing;
    if (r.min_rtt && (!sum.min_rtt || *r.min_rtt < *sum.min_rtt)) sum.min_rtt = r.min_rtt;
  }
  return sum;
}

void dependency_guard::address_failed(const net::ip::address& a, std::size_t name_addresses) {
  if (!outlier_.enabled || name_addresses < 2) return;  // one address is never ejected: nothing to record
  auto const now = clock::now();
  std::optional<address_health::ejection> ejected;
  {
    std::lock_guard lock(addresses_mutex_);
    ejected = addresses_.failed(a, name_addresses, now);
    addresses_tracked_.store(addresses_.tracked(), std::memory_order_release);
  }
  if (!ejected) return;
  metrics_.address_ejected();
  auto const address = a.to_string();
  log_.warn("address_ejected",
            {{"dependency", name_},
             {"address", address},
             {"consecutive_failures", outlier_.consecutive_failures},
             {"ejections", ejected->times},
             {"ejected_for_ms",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(ejected->ejected_for).count())}});
}

void dependency_guard::address_answered(const net::ip::address& a) {
  if (addresses_tracked_.load(std::memory_order_acquire) == 0) return;
  std::lock_guard lock(addresses_mutex_);
  addresses_.answered(a, clock::now());
  addresses_tracked_.store(addresses_.tracked(), std::memory_order_release);
}

void dependency_guard::ejected_addresses(std::vector<net::ip::address>& out) {
  if (addresses_tracked_.load(std::memory_order_acquire) == 0) return;
  std::lock_guard lock(addresses_mutex_);
  addresses_.ejected(clock::now(), out);
}

dependency_guard::snapshot dependency_guard::take_snapshot() const {
  auto const now = clock::now();
  snapshot s;
  s.name = name_;
  s.budget = budget_.in_window(now);
  s.state = breaker_.state();
  s.in_state = std::chrono::duration_cast<std::chrono::milliseconds>(now - breaker_.since());
  s.mode = mode_;
  s.concurrency = concurrency_.mode;
  if (!lanes_.empty()) s.limit = lanes_reading();
  std::lock_guard lock(addresses_mutex_);
  s.ejected = addresses_.read(now);
  return s;
}

guard_registry::guard_registry(const dependency_policies& deps, const observe::logger& log, observe::metrics& metrics,
                               unsigned lanes)
    : log_(log), metrics_(metrics), max_unknown_(deps.max_unknown_hosts), lanes_(lanes) {
  for (auto const& [name, p] : deps.named) {
    guards_.emplace(name, std::make_shared<dependency_guard>(name, p, log, metrics.dependency(name), lanes_));
    configured_.emplace(name, true);
  }
}

guard_registry::reload_report guard_registry::reconfigure(const dependency_policies& deps) {
  reload_report r;
  std::lock_guard lock(mutex_);
  max_unknown_ = deps.max_unknown_hosts;  // hosts already over a lowered cap keep their guard
  auto replace = [&](const std::string& name, const retry::policy& p) {
    // The guard replaced lives on in the requests and caches that hold it.
    guards_[name] = std::make_shared<dependency_guard>(name, p, log_, metrics_.dependency(name), lanes_);
  };
  std::unordered_map<std::string, bool> configured;
  for (auto const& [name, p] : deps.named) {
    configured.emplace(name, true);
    auto it = guards_.find(name);
    if (it == guards_.end()) {
      replace(name, p);
      r.added.push_back(name);
    } else if (it->second->same_settings(p)) {
      r.kept.push_back(name);
    } else {
      replace(name, p);
      r.reset.push_back(name);
    }
  }
  for (auto it = guards_.begin(); it != guards_.end();) {
    if (configured.count(it->first)) {
      ++it;
      continue;
    }
    if (configured_.count(it->first)) {
      r.removed.push_back(it->first);
    } else if (it->second->same_settings(deps.defaults)) {
      ++it;  // an unknown host whose defaults did not change keeps its state
      continue;
    } else {
      --unknown_;
    }
    // Removed, or an unknown host under changed defaults: made afresh on its next request.
    it = guards_.erase(it);
  }
  configured_ = std::move(configured);
  for (auto* list : {&r.kept, &r.reset, &r.added, &r.removed}) std::sort(list->begin(), list->end());
  return r;
}

void guard_registry::publish() const {
  std::lock_guard lock(mutex_);
  for (auto const& [name, g] : guards_) g->publish();
}

std::shared_ptr<dependency_guard> guard_registry::find(const std::string& name, const retry::policy& p) {
  std::lock_guard lock(mutex_);
  if (auto it = guards_.find(name); it != guards_.end()) return it->second;
  std::string key = name;
  if (unknown_ >= max_unknown_) {
    key = other_hosts;
    if (auto it = guards_.find(key); it != guards_.end()) return it->second;
  }
  ++unknown_;
  auto [it, inserted] =
      guards_.emplace(key, std::make_shared<dependency_guard>(key, p, log_, metrics_.dependency(key), lanes_));
  return it->second;
}

std::vector<dependency_guard::snapshot> guard_registry::snapshots() const {
  std::vector<dependency_guard::snapshot> out;
  std::lock_guard lock(mutex_);
  out.reserve(guards_.size());
  for (auto const& [name, g] : guards_) out.push_back(g->take_snapshot());
  std::sort(out.begin(), out.end(), [](auto const& a, auto const& b) { return a.name < b.name; });
  return out;
}

}  // namespace rebound::retry
