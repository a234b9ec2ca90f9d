#include "config/describe.hpp"
#include "config/load.hpp"
#include "config/typed_values.hpp"

#include <gtest/gtest.h>

using namespace rebound::config;
using namespace std::chrono_literals;

namespace describe_test {
namespace {

constexpr auto tuned = R"(
listen: 127.0.0.1:4000
admin: "[::1]:9000"
service: checkout
workers: 2
drain_timeout: 90s
unknown_hosts: deny
limits: {max_request_head: 16KiB, max_request_body: 0, idle_timeout: 1500ms}
defaults:
  backoff: {base: 250ms, cap: 2m}
  retry_on: [503, connect_refused]
  max_retry_body: 512KiB
  budget: {ratio: 0.15, window: 1m, min_retries: 0}
dependencies:
  payments:
    hosts: [payments.internal, "Payments.internal:8080"]
    context: async
    max_retries: 9
    approval: "ADR-17: payments settle within a day"
    idempotency: {header: X-Idem, inject: false}
    circuit_breaker: {mode: signal, failure_ratio: 0.25, open_for: 1h}
)";

}  // namespace

TEST(EffectiveConfig, ReadsLikeTheYaml) {
  auto const json = effective_config_json(load_config_text(tuned, "t.yaml"));
  for (auto const* part :
       {R"("listen":"127.0.0.1:4000")", R"("admin":"[::1]:9000")", R"("drain_timeout":"90s")",
        R"("base":"250ms","cap":"2m","jitter":"full")", R"("retry_on":["503","connect_refused"])",
        R"("max_retry_body":"512KiB")", R"("ratio":0.15,"window":"1m","min_retries":0)",
        R"("hosts":["payments.internal","Payments.internal:8080"])", R"("context":"async","max_retries":9)",
        R"("mode":"signal","failure_ratio":0.25)", R"("open_for":"1h")", R"("idle_timeout":"1500ms")"})
    EXPECT_NE(json.find(part), std::string::npos) << part << " not in " << json;
}

TEST(EffectiveConfig, DependencyCarriesItsResolvedPolicy) {
  // The dependency sets none of these; they come from defaults and the built-ins.
  auto const json = effective_config_json(load_config_text(tuned, "t.yaml"));
  auto const dep = json.substr(json.find("\"payments\""));
  EXPECT_NE(dep.find(R"("base":"250ms")"), std::string::npos) << dep;
  EXPECT_NE(dep.find(R"("ratio":0.15)"), std::string::npos) << dep;
  EXPECT_NE(dep.find(R"("header":"X-Idem","inject":false)"), std::string::npos) << dep;
}

TEST(EffectiveConfig, LoadingItGivesTheSameConfig) {
  auto const once = effective_config_json(load_config_text(tuned, "t.yaml"));
  auto const twice = effective_config_json(load_config_text(once, "effective.json"));
  EXPECT_EQ(once, twice);
}

TEST(EffectiveConfig, BuiltInDefaultsRoundTrip) {
  auto const once = effective_config_json(default_config());
  EXPECT_EQ(effective_config_json(load_config_text(once, "effective.json")), once);
}

TEST(TypedValues, FormatIsTheInverseOfParse) {
  for (auto d : {0ms, 1ms, 999ms, 1000ms, 1500ms, 60000ms, 90000ms, 3600000ms, 86400000ms})
    EXPECT_EQ(parse_duration(format_duration(d)).value, d) << format_duration(d);
  for (std::uint64_t s : {0ull, 1ull, 1023ull, 1024ull, 1536ull, 1ull << 20, 3ull << 30})
    EXPECT_EQ(parse_size(format_size(s)).value, s) << format_size(s);
  EXPECT_EQ(format_duration(90s), "90s");
  EXPECT_EQ(format_duration(2min), "2m");
  EXPECT_EQ(format_size(1 << 20), "1MiB");
}

// Issue 22: the effective policy says whether it retries what a layer below gave up on.
TEST(EffectiveConfig, ShowsRetryLayered) {
  auto const json = effective_config_json(
      load_config_text("dependencies:\n  edge:\n    hosts: [edge.test]\n    retry_layered: true\n", "t.yaml"));
  EXPECT_NE(json.find(R"("retry_layered":false)"), std::string::npos) << json;  // defaults
  EXPECT_NE(json.find(R"("retry_layered":true)"), std::string::npos) << json;   // edge
  EXPECT_NE(policy_json(rebound::retry::policy{}).find(R"("retry_layered":false)"), std::string::npos);
}

}  // namespace describe_test
