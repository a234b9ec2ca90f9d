#include "config/load.hpp"
#include "diagnostics.hpp"

#include <gtest/gtest.h>

using namespace rebound::config;
using namespace std::chrono_literals;

TEST(Policy, BuiltInsFollowR1R2R3) {
  auto c = load_config_text("", "t.yaml");
  EXPECT_EQ(c.defaults.context, context_kind::sync);
  EXPECT_EQ(c.defaults.max_retries, 3u);
  EXPECT_EQ(c.defaults.backoff.base, 1s);
  EXPECT_EQ(c.defaults.backoff.cap, 30s);
  EXPECT_EQ(c.defaults.backoff.jitter, jitter_kind::full);
  EXPECT_EQ(c.defaults.total_timeout, 30s);
  EXPECT_EQ(c.defaults.max_retry_body, 1u << 20);
  EXPECT_TRUE(c.defaults.idempotency.inject);
  EXPECT_EQ(c.defaults.idempotency.header, "Idempotency-Key");
}

TEST(Policy, R2_ContextChangesTheDefaultRetries) {
  auto c = load_config_text("defaults: {context: async}\n", "t.yaml");
  EXPECT_EQ(c.defaults.max_retries, 5u);
  EXPECT_EQ(c.defaults.total_timeout, 24h);
}

TEST(Policy, ResolutionIsDependencyThenDefaultsThenContext) {
  auto c = load_config_text(R"(
defaults: {max_retries: 2, backoff: {base: 100ms, cap: 2s}, attempt_timeout: 3s}
dependencies:
  a: {hosts: [a.test], max_retries: 4, backoff: {cap: 5s}}
  b: {hosts: [b.test], context: async}
)",
                            "t.yaml");
  auto const& a = c.dependencies[0].effective;
  EXPECT_EQ(a.max_retries, 4u);
  EXPECT_EQ(a.backoff.base, 100ms);  // from defaults
  EXPECT_EQ(a.backoff.cap, 5s);      // its own
  EXPECT_EQ(a.attempt_timeout, 3s);
  auto const& b = c.dependencies[1].effective;
  EXPECT_EQ(b.max_retries, 2u);  // defaults win over the context built-in
  EXPECT_EQ(b.total_timeout, 24h);
}

TEST(Policy, R1_EqualAndNoJitterAreRefused) {
  for (auto j : {"equal", "none"}) {
    auto d = errors_of(std::string("defaults: {backoff: {jitter: ") + j + "}}\n");
    ASSERT_EQ(d.size(), 1u) << j;
    EXPECT_EQ(d[0].rule, "R-1");
    EXPECT_EQ(d[0].path, "defaults.backoff.jitter");
  }
}

TEST(Policy, R1_BaseAboveCapIsRefused) {
  auto d = errors_of("defaults: {backoff: {base: 5s, cap: 1s}}\n");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].rule, "R-1");
}

TEST(Policy, R2_MaxRetriesOutsideTheRangeNeedsApproval) {
  auto d = errors_of("defaults: {max_retries: 7}\n");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].rule, "R-2");
  EXPECT_EQ(d[0].path, "defaults.max_retries");
  EXPECT_TRUE(errors_of("defaults: {max_retries: 7, approval: IAB-2026-114}\n").empty());
  EXPECT_EQ(errors_of("defaults: {max_retries: 0}\n").size(), 1u);
  EXPECT_EQ(errors_of("defaults: {context: webhook, max_retries: 2}\n").size(), 1u);
}

TEST(Policy, R2_DependencyFindingPointsAtTheDependency) {
  auto d = errors_of("dependencies:\n  a:\n    hosts: [a.test]\n    max_retries: 9\n");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].path, "dependencies.a.max_retries");
  EXPECT_EQ(d[0].line, 4);
}

TEST(Policy, R3_SyncTotalTimeoutAbove30sIsRefused) {
  auto d = errors_of("defaults: {total_timeout: 31s}\n");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].rule, "R-3");
  EXPECT_TRUE(errors_of("defaults: {context: async, total_timeout: 2h}\n").empty());
  EXPECT_EQ(errors_of("defaults: {context: async, total_timeout: 25h}\n").size(), 1u);
}

TEST(Policy, R4_RetryOnNarrowsAndRefusesFinalClasses) {
  auto c = load_config_text("defaults: {retry_on: [503, connect_refused]}\n", "t.yaml");
  EXPECT_TRUE(c.defaults.retry_on.contains(rebound::retry::retry_on::cls::s503));
  EXPECT_FALSE(c.defaults.retry_on.contains(rebound::retry::retry_on::cls::s500));
  auto d = errors_of("defaults: {retry_on: [503, 404]}\n");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].rule, "R-4");
  EXPECT_EQ(d[0].path, "defaults.retry_on[1]");
}

TEST(Policy, R7_BudgetAndBreakerDefaultsFollowSpec) {
  auto c = load_config_text("", "t.yaml");
  EXPECT_DOUBLE_EQ(c.defaults.budget.ratio, 0.2);
  EXPECT_EQ(c.defaults.budget.window, 30s);
  EXPECT_EQ(c.defaults.budget.min_retries, 10u);
  auto const& cb = c.defaults.circuit_breaker;
  EXPECT_EQ(cb.mode, breaker_mode::enforce);
  EXPECT_DOUBLE_EQ(cb.failure_ratio, 0.5);
  EXPECT_EQ(cb.min_requests, 20u);
  EXPECT_EQ(cb.window, 10s);
  EXPECT_TRUE(cb.open_on_budget_exhausted);
  EXPECT_EQ(cb.open_for, 30s);
  EXPECT_EQ(cb.half_open_probes, 3u);
}

TEST(Policy, R7_BudgetAndBreakerFieldsResolvePerField) {
  auto c = load_config_text(
      "defaults:\n  budget: {ratio: 0.1, min_retries: 0}\n  circuit_breaker: {mode: signal, open_for: 5s}\n"
      "dependencies:\n  pay:\n    hosts: [pay.internal]\n    budget: {window: 10s}\n"
      "    circuit_breaker: {failure_ratio: 0.25, min_requests: 5, half_open_probes: 1, open_on_budget_exhausted: "
      "false}\n",
      "t.yaml");
  auto const& p = c.dependencies.at(0).effective;
  EXPECT_DOUBLE_EQ(p.budget.ratio, 0.1);
  EXPECT_EQ(p.budget.min_retries, 0u);
  EXPECT_EQ(p.budget.window, 10s);
  EXPECT_EQ(p.circuit_breaker.mode, breaker_mode::signal);
  EXPECT_EQ(p.circuit_breaker.open_for, 5s);
  EXPECT_DOUBLE_EQ(p.circuit_breaker.failure_ratio, 0.25);
  EXPECT_EQ(p.circuit_breaker.min_requests, 5u);
  EXPECT_EQ(p.circuit_breaker.half_open_probes, 1u);
  EXPECT_FALSE(p.circuit_breaker.open_on_budget_exhausted);
  EXPECT_EQ(c.defaults.budget.window, 30s);
}

TEST(Policy, R7_BudgetRatioAboveTwentyPercentIsRefused) {
  auto d = errors_of("defaults:\n  budget: {ratio: 0.5}\n");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].path, "defaults.budget.ratio");
  EXPECT_EQ(d[0].rule, "R-7");
  EXPECT_EQ(d[0].line, 2);
}

TEST(Policy, R7_DisabledBudgetIsRefused) {
  for (auto const* yaml : {"defaults:\n  budget: off\n", "defaults:\n  budget: {ratio: 0}\n",
                           "dependencies:\n  a:\n    hosts: [a]\n    budget: false\n"}) {
    SCOPED_TRACE(yaml);
    auto d = errors_of(yaml);
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(d[0].rule, "R-7");
  }
}

TEST(Policy, BreakerValuesAreChecked) {
  auto d = errors_of(
      "defaults:\n  circuit_breaker: {mode: maybe, failure_ratio: 1.5, min_requests: 0, open_for: 0s, probes: 2}\n");
  std::vector<std::string> paths;
  for (auto const& x : d) paths.push_back(x.path);
  EXPECT_EQ(d.size(), 5u);
  for (auto const* want : {"defaults.circuit_breaker.mode", "defaults.circuit_breaker.failure_ratio",
                           "defaults.circuit_breaker.min_requests", "defaults.circuit_breaker.open_for",
                           "defaults.circuit_breaker.probes"})
    EXPECT_NE(std::find(paths.begin(), paths.end(), want), paths.end()) << want;
}

TEST(Policy, R2_AboveTheRangeWithApprovalIsAWarningReportedOncePerPlace) {
  std::vector<diagnostic> warnings;
  auto c = load_config_text(R"(
defaults:
  max_retries: 8
  approval: ADR-9
dependencies:
  a: {hosts: [a]}
  b: {hosts: [b], routes: [{match: {path_prefix: /x}}]}
)",
                            "t.yaml", &warnings);
  EXPECT_EQ(c.dependencies[1].routes[0].effective.max_retries, 8u);
  ASSERT_EQ(warnings.size(), 1u) << "defaults, two dependencies and a route inherit one setting";
  EXPECT_TRUE(warnings[0].warning);
  EXPECT_EQ(warnings[0].rule, "R-2");
  EXPECT_EQ(warnings[0].path, "defaults.max_retries");
  EXPECT_EQ(to_string(warnings[0]),
            "t.yaml:3:16: warning: defaults.max_retries: max_retries 8 is above 1..5 for this "
            "context, allowed by approval \"ADR-9\" (R-2)");
}

TEST(Policy, R6_InjectOffIsAWarningUnlessNothingIsRetried) {
  std::vector<diagnostic> warnings;
  load_config_text("defaults:\n  idempotency: {inject: false}\n", "t.yaml", &warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0].rule, "R-6");
  EXPECT_EQ(warnings[0].path, "defaults.idempotency.inject");
}

TEST(Policy, AnInvalidFileCarriesItsWarningsWithItsErrors) {
  auto const e = errors_of("defaults:\n  max_retries: 8\n  approval: ADR-9\n  backoff: {jitter: none}\n");
  ASSERT_EQ(e.size(), 2u);
  EXPECT_FALSE(e[0].warning);
  EXPECT_EQ(e[0].rule, "R-1");
  EXPECT_TRUE(e[1].warning);
  EXPECT_EQ(e[1].rule, "R-2");
}

TEST(Policy, R3_WebhookRetriesFollowTheStandardsTableUnlessABackoffOrScheduleIsWritten) {
  auto c = load_config_text(R"(
dependencies:
  hooks: {hosts: [hooks.internal], context: webhook}
  paced: {hosts: [paced.internal], context: webhook, backoff: {base: 2s, cap: 1m}}
  listed: {hosts: [listed.internal], context: async, schedule: [1s, 10s, 1m]}
)",
                            "t.yaml");
  std::vector<rebound::config::duration> const table{1s, 5s, 30s, 2min, 15min, 1h, 4h};
  EXPECT_EQ(c.dependencies[0].effective.schedule, table);
  EXPECT_TRUE(c.dependencies[1].effective.schedule.empty()) << "a written backoff spaces the retries";
  EXPECT_EQ(c.dependencies[2].effective.schedule, (std::vector<rebound::config::duration>{1s, 10s, 1min}));
  EXPECT_TRUE(c.defaults.schedule.empty()) << "sync retries follow the R-1 backoff";
}

TEST(Policy, R1_AScheduleThatDoesNotIncreaseIsRefused) {
  auto d = errors_of("defaults: {context: webhook, schedule: [1s, 5s, 5s, 1m]}\n");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].rule, "R-1");
  EXPECT_NE(d[0].message.find("increase"), std::string::npos) << d[0].message;
  EXPECT_EQ(d[0].line, 1);
}

TEST(Policy, AScheduleMustBeAListOfDurations) {
  EXPECT_FALSE(errors_of("defaults: {schedule: 5s}\n").empty());
  EXPECT_FALSE(errors_of("defaults: {schedule: [1s, soon]}\n").empty());
  EXPECT_FALSE(errors_of("defaults: {schedule: []}\n").empty());
  EXPECT_FALSE(errors_of("defaults: {schedule: [0s, 1s]}\n").empty());
}

// R-2's gRPC row (3, 1-5) and R-3's synchronous cap.
TEST(Policy, R2_GrpcContextHasItsOwnRow) {
  auto c = load_config_text("defaults: {context: grpc}\n", "t.yaml");
  EXPECT_EQ(c.defaults.context, context_kind::grpc);
  EXPECT_EQ(c.defaults.max_retries, 3u);
  EXPECT_EQ(c.defaults.total_timeout, 30s);
  EXPECT_EQ(allowed_retries(context_kind::grpc).low, 1u);
  EXPECT_EQ(allowed_retries(context_kind::grpc).high, 5u);
  EXPECT_EQ(max_total_timeout(context_kind::grpc), 30s);
  EXPECT_FALSE(c.hands_over()) << "a gRPC call is answered, never handed over";
}

// R-4's gRPC column in a config: the retryable classes narrow, a final one is refused by name.
TEST(Policy, R4_RetryOnKnowsTheGrpcClasses) {
  auto c = load_config_text("defaults: {context: grpc, retry_on: [grpc_unavailable, connect_refused]}\n", "t.yaml");
  EXPECT_TRUE(c.defaults.retry_on.contains(rebound::retry::retry_on::cls::grpc_unavailable));
  EXPECT_FALSE(c.defaults.retry_on.contains(rebound::retry::retry_on::cls::grpc_aborted));
  auto d = errors_of("defaults: {retry_on: [grpc_unavailable, grpc_not_found]}\n");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].rule, "R-4");
  EXPECT_EQ(d[0].path, "defaults.retry_on[1]");
  // R-2's gRPC range is 1-5.
  auto r = errors_of("defaults: {context: grpc, max_retries: 6}\n");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].rule, "R-2");
}
