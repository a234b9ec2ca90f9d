// `hedge:` in the YAML (issue 22 part 3): parsing, the route check of R-6, the effective
// config, and what `check` refuses.
#include "config/check.hpp"
#include "config/describe.hpp"
#include "config/load.hpp"
#include "diagnostics.hpp"

#include <gtest/gtest.h>

using namespace rebound::config;
using namespace std::chrono_literals;

namespace hedge_config_test {
namespace {

constexpr auto hedged = R"(
defaults:
  attempt_timeout: 2s
dependencies:
  search:
    hosts: [search.internal]
    hedge: {after: 50ms}
    routes:
      - match: {path_prefix: /v1/p95}
        hedge: {after: p95, max: 2}
      - match: {path_prefix: /v1/plain}
        hedge: off
)";

}  // namespace

TEST(HedgeConfig, OffByDefault) {
  auto const c = load_config_text("dependencies: {a: {hosts: [a]}}", "t.yaml");
  EXPECT_FALSE(c.defaults.hedge.enabled());
  EXPECT_FALSE(c.dependencies.at(0).effective.hedge.enabled());
}

TEST(HedgeConfig, ReadsAFixedDelayAndP95AndOffPerLayer) {
  auto const c = load_config_text(hedged, "t.yaml");
  auto const& d = c.dependencies.at(0);
  EXPECT_EQ(d.effective.hedge.max, 1u);  // max defaults to 1
  EXPECT_FALSE(d.effective.hedge.after_p95);
  EXPECT_EQ(d.effective.hedge.after, 50ms);
  EXPECT_TRUE(d.routes.at(0).effective.hedge.after_p95);
  EXPECT_EQ(d.routes.at(0).effective.hedge.max, 2u);
  EXPECT_FALSE(d.routes.at(1).effective.hedge.enabled());  // `off` overrides the dependency's
}

TEST(HedgeConfig, RefusesBadValuesWithTheirKey) {
  struct bad {
    const char* yaml;
    const char* path;
    const char* words;
  };
  for (auto const& b : {bad{"defaults: {hedge: {after: 50ms, max: 4}}", "defaults.hedge.max", "1 to 3"},
                        bad{"defaults: {hedge: {after: 50ms, max: 0}}", "defaults.hedge.max", "hedge: off"},
                        bad{"defaults: {hedge: {after: soon}}", "defaults.hedge.after", "p95 or a duration"},
                        bad{"defaults: {hedge: {after: 0ms}}", "defaults.hedge.after", "greater than 0"},
                        bad{"defaults: {hedge: {max: 1}}", "defaults.hedge.after", "is required"},
                        bad{"defaults: {hedge: yes}", "defaults.hedge", "expected `off` or a map"},
                        bad{"defaults: {hedge: {aftr: 50ms}}", "defaults.hedge", "did you mean \"after\""}}) {
    auto const d = errors_of(b.yaml);
    ASSERT_FALSE(d.empty()) << b.yaml;
    auto const all = messages(d);
    EXPECT_NE(all.find(b.path), std::string::npos) << b.yaml << "\n" << all;
    EXPECT_NE(all.find(b.words), std::string::npos) << b.yaml << "\n" << all;
  }
  EXPECT_NE(messages(errors_of("defaults: {hedgee: {after: 50ms}}")).find("did you mean \"hedge\""),
            std::string::npos);
}

TEST(HedgeConfig, CheckRefusesAHedgeOnARouteWithNonIdempotentMethods) {
  auto const d = errors_of(R"(
dependencies:
  payments:
    hosts: [payments.internal]
    routes:
      - match: {path_prefix: /v1/payments, methods: [GET, POST]}
        hedge: {after: 50ms}
)");
  ASSERT_EQ(d.size(), 1u) << messages(d);
  EXPECT_FALSE(d[0].warning);
  EXPECT_EQ(d[0].rule, "R-6");
  EXPECT_EQ(d[0].path, "dependencies.payments.routes[0].hedge");
  EXPECT_EQ(d[0].line, 7);
  EXPECT_NE(d[0].message.find("POST"), std::string::npos) << d[0].message;
  EXPECT_NE(d[0].message.find("not idempotent"), std::string::npos) << d[0].message;
  for (auto const* m : {"PATCH", "CONNECT"}) {
    auto const y = std::string("dependencies: {p: {hosts: [p], routes: [{match: {methods: [") + m +
                   "]}, hedge: {after: 50ms}}]}}";
    auto const e = errors_of(y);
    ASSERT_EQ(e.size(), 1u) << y;
    EXPECT_EQ(e[0].rule, "R-6");
  }
}

TEST(HedgeConfig, AnInheritedHedgeOnAPostRouteIsAWarningOnly) {
  std::vector<diagnostic> warnings;
  auto const c = load_config_text(R"(
dependencies:
  payments:
    hosts: [payments.internal]
    hedge: {after: 50ms}
    routes:
      - match: {path_prefix: /v1/payments, methods: [POST]}
      - match: {path_prefix: /v1/items, methods: [GET, PUT, DELETE, HEAD, OPTIONS]}
)",
                                  "t.yaml", &warnings);
  ASSERT_EQ(warnings.size(), 1u) << messages(warnings);
  EXPECT_TRUE(warnings[0].warning);
  EXPECT_EQ(warnings[0].rule, "R-6");
  EXPECT_EQ(warnings[0].path, "dependencies.payments.routes[0].hedge");
  EXPECT_TRUE(c.dependencies.at(0).routes.at(0).effective.hedge.enabled());  // applied to idempotent methods only
}

TEST(HedgeConfig, CheckRefusesADelayNoShorterThanTheAttemptTimeout) {
  auto const d = errors_of("defaults: {attempt_timeout: 1s, hedge: {after: 1s}}");
  ASSERT_EQ(d.size(), 1u) << messages(d);
  EXPECT_EQ(d[0].path, "defaults.hedge");
  EXPECT_NE(d[0].message.find("shorter than attempt_timeout"), std::string::npos);
  EXPECT_TRUE(errors_of("defaults: {attempt_timeout: 1s, hedge: {after: p95}}").empty());
}

TEST(HedgeConfig, CheckRefusesAHedgeOnAHandedOverOrGrpcContext) {
  policy p;
  p.hedge = {1, false, std::chrono::milliseconds(50)};
  for (auto const ctx : {context_kind::async, context_kind::webhook, context_kind::grpc}) {
    p.context = ctx;
    auto const f = check_policy(p);
    ASSERT_FALSE(f.empty());
    EXPECT_EQ(f.back().key, "hedge");
    EXPECT_FALSE(f.back().warning);
  }
  p.context = context_kind::sync;
  EXPECT_TRUE(check_policy(p).empty());
}

TEST(HedgeConfig, EffectiveConfigShowsItAndLoadsBack) {
  auto const once = effective_config_json(load_config_text(hedged, "t.yaml"));
  EXPECT_NE(once.find(R"("hedge":{"after":"50ms","max":1})"), std::string::npos) << once;
  EXPECT_NE(once.find(R"("hedge":{"after":"p95","max":2})"), std::string::npos) << once;
  EXPECT_NE(once.find(R"("hedge":"off")"), std::string::npos) << once;
  auto const twice = effective_config_json(load_config_text(once, "effective.json"));
  EXPECT_EQ(once, twice);
}

TEST(HedgeConfig, IdempotentMethodsAreTheOnesAHedgeMayCopy) {
  for (auto const* m : {"GET", "HEAD", "OPTIONS", "PUT", "DELETE"}) EXPECT_TRUE(idempotent_method(m)) << m;
  for (auto const* m : {"POST", "PATCH", "CONNECT", "get", "PURGE"}) EXPECT_FALSE(idempotent_method(m)) << m;
}

}  // namespace hedge_config_test
