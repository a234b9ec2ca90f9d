#include "config/load.hpp"

#include <gtest/gtest.h>

using namespace rebound::config;
using namespace std::chrono_literals;

namespace {

std::vector<diagnostic> errors_of(const std::string& yaml) {
  try {
    load_config_text(yaml, "t.yaml");
  } catch (const config_error& e) {
    return e.diagnostics();
  }
  return {};
}

}  // namespace

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
