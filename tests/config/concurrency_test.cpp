// `concurrency:` in the YAML (issue 51): parsing, per dependency only, the effective config,
// and what the loader refuses.
#include "config/describe.hpp"
#include "config/load.hpp"
#include "diagnostics.hpp"

#include <gtest/gtest.h>

using namespace rebound::config;
using namespace std::chrono_literals;

namespace concurrency_config_test {
TEST(ConcurrencyConfig, OffByDefault) {
  auto const c = load_config_text("dependencies: {a: {hosts: [a]}}", "t.yaml");
  EXPECT_FALSE(c.defaults.concurrency.enabled());
  EXPECT_FALSE(c.dependencies.at(0).effective.concurrency.enabled());
}

TEST(ConcurrencyConfig, ADependencyOverridesTheDefaultsAndItsRoutesFollowIt) {
  auto const c = load_config_text(R"(
defaults:
  concurrency: {mode: adaptive, min_limit: 4, max_limit: 400, tolerance: 0.5, probe_interval: 30s}
dependencies:
  search:
    hosts: [search.internal]
    routes:
      - match: {path_prefix: /v1}
        max_retries: 1
  billing:
    hosts: [billing.internal]
    concurrency: {mode: fixed, limit: 50}
  legacy:
    hosts: [legacy.internal]
    concurrency: off
)",
                                  "t.yaml");
  auto const& search = c.dependencies.at(0);
  EXPECT_EQ(search.effective.concurrency.mode, concurrency_mode::adaptive);
  EXPECT_EQ(search.effective.concurrency.min_limit, 4u);
  EXPECT_EQ(search.effective.concurrency.max_limit, 400u);
  EXPECT_DOUBLE_EQ(search.effective.concurrency.tolerance, 0.5);
  EXPECT_EQ(search.effective.concurrency.probe_interval, 30s);
  EXPECT_EQ(search.routes.at(0).effective.concurrency, search.effective.concurrency);
  EXPECT_EQ(c.dependencies.at(1).effective.concurrency.mode, concurrency_mode::fixed);
  EXPECT_EQ(c.dependencies.at(1).effective.concurrency.limit, 50u);
  EXPECT_FALSE(c.dependencies.at(2).effective.concurrency.enabled());
  auto const json = effective_config_json(c);
  EXPECT_NE(json.find(R"("concurrency":{"mode":"fixed","limit":50})"), std::string::npos) << json;
}

TEST(ConcurrencyConfig, RefusesBadValuesWithTheirKey) {
  struct bad {
    const char* yaml;
    const char* path;
    const char* words;
  };
  for (auto const& b :
       {bad{"defaults: {concurrency: {mode: fixed}}", "defaults.concurrency.limit", "required with mode: fixed"},
        bad{"defaults: {concurrency: {mode: adaptive, limit: 5}}", "defaults.concurrency.limit", "fixed only"},
        bad{"defaults: {concurrency: {mode: fixed, limit: 0}}", "defaults.concurrency.limit", "between 1"},
        bad{"defaults: {concurrency: {mode: gradient}}", "defaults.concurrency.mode", "off, fixed or adaptive"},
        bad{"defaults: {concurrency: {limit: 5}}", "defaults.concurrency.mode", "is required"},
        bad{"defaults: {concurrency: {mode: adaptive, min_limit: 50, max_limit: 10}}", "defaults.concurrency.min_limit",
            "above max_limit"},
        bad{"defaults: {concurrency: {mode: adaptive, probe_interval: 100ms}}", "defaults.concurrency.probe_interval",
            "at least 1s"},
        bad{"defaults: {concurrency: {mode: adaptive, tolerance: 2}}", "defaults.concurrency.tolerance", ""},
        bad{"defaults: {concurrency: 10}", "defaults.concurrency", "expected `off` or a map"},
        bad{"defaults: {concurrency: {mode: adaptive, max_limt: 10}}", "defaults.concurrency", "did you mean"},
        bad{"dependencies: {a: {hosts: [a], routes: [{match: {path_prefix: /x}, concurrency: {mode: adaptive}}]}}",
            "routes[0].concurrency", "per dependency"}}) {
    auto const d = errors_of(b.yaml);
    ASSERT_FALSE(d.empty()) << b.yaml;
    auto const all = messages(d);
    EXPECT_NE(all.find(b.path), std::string::npos) << b.yaml << "\n" << all;
    EXPECT_NE(all.find(b.words), std::string::npos) << b.yaml << "\n" << all;
  }
}

TEST(ConcurrencyConfig, WarnsWhenAFixedLimitIsBelowTheWorkers) {
  std::vector<diagnostic> warnings;
  load_config_text("workers: 4\ndependencies: {a: {hosts: [a], concurrency: {mode: fixed, limit: 2}}}", "t.yaml",
                   &warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(to_string(warnings[0]).find("dependencies.a.concurrency.limit"), std::string::npos);
  EXPECT_NE(to_string(warnings[0]).find("up to 4 go through"), std::string::npos);
  warnings.clear();
  load_config_text("workers: 2\ndependencies: {a: {hosts: [a], concurrency: {mode: fixed, limit: 2}}}", "t.yaml",
                   &warnings);
  EXPECT_TRUE(warnings.empty());
}

}  // namespace concurrency_config_test
