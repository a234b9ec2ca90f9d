#include "proxy/retry/dependency_guard.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <sstream>

using namespace rebound;

namespace dependency_guard_test {
namespace {

struct captured_log {
  std::ostringstream out;
  observe::logger log{std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::ostream_sink_st>(out))};
  observe::metrics metrics{"checkout"};
};

retry::dependency_policies with_dependency(std::string name, retry::breaker_policy b) {
  retry::dependency_policies deps;
  retry::policy p = deps.defaults;
  p.circuit_breaker = b;
  deps.named.emplace_back(std::move(name), p);
  return deps;
}

}  // namespace

TEST(DependencyGuard, ConfiguredDependenciesExistBeforeTheirFirstRequest) {
  captured_log c;
  retry::guard_registry reg(with_dependency("payments", {}), c.log, c.metrics);
  auto snaps = reg.snapshots();
  ASSERT_EQ(snaps.size(), 1u);
  EXPECT_EQ(snaps[0].name, "payments");
  EXPECT_EQ(snaps[0].budget.allowed, 10u) << "min_retries by default";
}

TEST(DependencyGuard, InventedHostNamesBeyondTheCapShareOneGuard) {
  captured_log c;
  retry::dependency_policies cfg;
  retry::guard_registry reg(cfg, c.log, c.metrics);
  retry::guard_cache cache(reg);
  auto const cap = cfg.max_unknown_hosts;
  for (std::size_t i = 0; i < cap; ++i)
    EXPECT_EQ(cache.find("h" + std::to_string(i) + ":80", cfg.defaults)->name(), "h" + std::to_string(i) + ":80");
  auto& a = *cache.find("one-more:80", cfg.defaults);
  auto& b = *cache.find("and-another:80", cfg.defaults);
  EXPECT_EQ(a.name(), "(other hosts)");
  EXPECT_EQ(&a, &b);
  EXPECT_EQ(reg.snapshots().size(), cap + 1);
}

TEST(DependencyGuard, MetricSeriesStayBoundedWhateverHostsAClientInvents) {
  captured_log c;
  retry::dependency_policies cfg;
  cfg.max_unknown_hosts = 5;
  retry::guard_registry reg(cfg, c.log, c.metrics);
  retry::guard_cache cache(reg);
  for (int i = 0; i < 6000; ++i) cache.find("h" + std::to_string(i) + ":80", cfg.defaults);
  reg.publish();
  auto const scrape = c.metrics.scrape();
  std::size_t labels = 0;
  for (std::size_t at = 0; (at = scrape.find("dependency=\"h", at)) != std::string::npos; ++at) ++labels;
  std::size_t per_host = 0;
  for (std::size_t at = 0; (at = scrape.find("dependency=\"h0:80\"", at)) != std::string::npos; ++at) ++per_host;
  EXPECT_GT(per_host, 0u);
  EXPECT_EQ(labels, 5 * per_host) << "only the first 5 invented hosts have series of their own";
  EXPECT_NE(scrape.find("dependency=\"(other hosts)\""), std::string::npos);
}

TEST(DependencyGuard, BreakerChangesAreLoggedWithFromToReasonAndDependency) {
  captured_log c;
  retry::breaker_policy b;
  b.min_requests = 2;
  b.failure_ratio = 0.5;
  auto cfg = with_dependency("payments", b);
  retry::guard_registry reg(cfg, c.log, c.metrics);
  auto& g = *reg.find("payments", cfg.named[0].second);
  EXPECT_TRUE(g.admit().allowed);
  g.record(true);
  g.record(true);
  auto const line = c.out.str();
  EXPECT_NE(line.find("\"event\":\"circuit_breaker_changed\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"dependency\":\"payments\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"from\":\"closed\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"to\":\"open\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"reason\":\"failure_ratio\""), std::string::npos) << line;
  EXPECT_NE(c.metrics.scrape().find("circuit_breaker_state{dependency=\"payments\",service=\"checkout\"} 2"),
            std::string::npos)
      << c.metrics.scrape();
  auto const refused = g.admit();
  EXPECT_FALSE(refused.allowed);
  EXPECT_GT(refused.retry_after.count(), 0);
  EXPECT_FALSE(g.allow_retry().granted);
  EXPECT_EQ(g.allow_retry().refusal, retry::error_type::circuit_open);
}

TEST(DependencyGuard, R7_ExhaustedBudgetOpensTheBreakerAndSaysWhy) {
  captured_log c;
  auto cfg = with_dependency("payments", {});
  cfg.named[0].second.budget.min_retries = 0;
  retry::guard_registry reg(cfg, c.log, c.metrics);
  auto& g = *reg.find("payments", cfg.named[0].second);
  for (int i = 0; i < 5; ++i) g.admit();
  EXPECT_TRUE(g.allow_retry().granted);  // 20% of 5
  auto const refused = g.allow_retry();
  EXPECT_FALSE(refused.granted);
  EXPECT_EQ(refused.refusal, retry::error_type::budget_exhausted);
  EXPECT_EQ(g.take_snapshot().state, retry::breaker_state::open);
  EXPECT_NE(c.out.str().find("\"reason\":\"budget_exhausted\""), std::string::npos) << c.out.str();
}

TEST(DependencyGuard, R10_PublishSetsBudgetUtilizationForTheScrape) {
  captured_log c;
  auto cfg = with_dependency("payments", {});
  cfg.named[0].second.budget.min_retries = 4;
  retry::guard_registry reg(cfg, c.log, c.metrics);
  auto& g = *reg.find("payments", cfg.named[0].second);
  g.admit();
  EXPECT_TRUE(g.allow_retry().granted);  // 1 of the 4 allowed
  reg.publish();
  auto const text = c.metrics.scrape();
  EXPECT_NE(text.find("retry_budget_utilization_ratio{dependency=\"payments\",service=\"checkout\"} 0.25"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("circuit_breaker_state{dependency=\"payments\",service=\"checkout\"} 0"), std::string::npos)
      << text;
}

namespace {

retry::dependency_policies two_dependencies(unsigned payments_min_requests) {
  retry::dependency_policies deps;
  for (auto const* name : {"payments", "search"}) deps.named.emplace_back(name, deps.defaults);
  deps.named[0].second.circuit_breaker.min_requests = payments_min_requests;
  return deps;
}

}  // namespace

TEST(DependencyGuard, ReloadKeepsTheStateOfDependenciesWhoseSettingsDidNotChange) {
  captured_log c;
  retry::guard_registry reg(two_dependencies(20), c.log, c.metrics);
  auto const payments = reg.find("payments", {});
  auto const search = reg.find("search", {});
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(search->admit().allowed);
  ASSERT_TRUE(search->allow_retry().granted);

  auto cfg = two_dependencies(20);
  cfg.named.pop_back();                                           // search removed ...
  cfg.named.emplace_back("orders", cfg.defaults);                 // ... orders added
  cfg.named[0].second.attempt_timeout = std::chrono::seconds(5);  // not a guard setting
  auto const r = reg.reconfigure(cfg);

  EXPECT_EQ(r.kept, std::vector<std::string>{"payments"});
  EXPECT_EQ(r.added, std::vector<std::string>{"orders"});
  EXPECT_EQ(r.removed, std::vector<std::string>{"search"});
  EXPECT_TRUE(r.reset.empty());
  EXPECT_EQ(reg.find("payments", {}).get(), payments.get()) << "the same guard, with its state";
  std::vector<std::string> names;
  for (auto const& s : reg.snapshots()) names.push_back(s.name);
  EXPECT_EQ(names, (std::vector<std::string>{"orders", "payments"}));
}

TEST(DependencyGuard, ReloadWithChangedBreakerSettingsStartsThatDependencyAfresh) {
  captured_log c;
  retry::guard_registry reg(two_dependencies(20), c.log, c.metrics);
  auto const payments = reg.find("payments", {});
  auto const search = reg.find("search", {});
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(payments->admit().allowed);
  auto const r = reg.reconfigure(two_dependencies(40));
  EXPECT_EQ(r.reset, std::vector<std::string>{"payments"});
  EXPECT_EQ(r.kept, std::vector<std::string>{"search"});
  auto const fresh = reg.find("payments", {});
  EXPECT_NE(fresh.get(), payments.get());
  EXPECT_EQ(reg.find("search", {}).get(), search.get());
  EXPECT_EQ(fresh->take_snapshot().budget.requests, 0u);
  EXPECT_EQ(payments->take_snapshot().budget.requests, 5u) << "the old guard lives on for requests in flight";
}

// Reloads used to keep every replaced guard until the process ended: a config reloaded
// every minute with changed settings grew without bound.
TEST(DependencyGuard, AGuardReplacedByAReloadIsFreedOnceNoRequestHoldsIt) {
  captured_log c;
  retry::guard_registry reg(two_dependencies(20), c.log, c.metrics);
  auto held = reg.find("payments", {});  // a request in flight
  std::weak_ptr<retry::dependency_guard> old = held;
  reg.reconfigure(two_dependencies(40));
  EXPECT_FALSE(old.expired()) << "the request still uses it";
  held.reset();  // the request ends
  EXPECT_TRUE(old.expired());
  std::weak_ptr<retry::dependency_guard> removed = reg.find("search", {});
  auto cfg = two_dependencies(40);
  cfg.named.pop_back();
  reg.reconfigure(cfg);
  EXPECT_TRUE(removed.expired()) << "a dependency no longer configured and held by nobody";
}

TEST(DependencyGuard, ReloadKeepsUnknownHostsUnlessTheDefaultsChanged) {
  captured_log c;
  retry::dependency_policies cfg;
  retry::guard_registry reg(cfg, c.log, c.metrics);
  auto const host = reg.find("10.0.0.1:80", cfg.defaults);
  EXPECT_TRUE(reg.reconfigure(cfg).removed.empty());
  EXPECT_EQ(reg.find("10.0.0.1:80", cfg.defaults).get(), host.get());
  cfg.defaults.budget.min_retries = 3;
  reg.reconfigure(cfg);
  EXPECT_TRUE(reg.snapshots().empty()) << "made afresh on its next request";
  EXPECT_EQ(reg.find("10.0.0.1:80", cfg.defaults)->take_snapshot().budget.allowed, 3u);
}

}  // namespace dependency_guard_test
