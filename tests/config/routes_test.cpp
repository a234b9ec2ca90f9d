#include "config/describe.hpp"
#include "config/load.hpp"
#include "diagnostics.hpp"

#include <gtest/gtest.h>

using namespace rebound::config;
using namespace std::chrono_literals;

namespace routes_test {
namespace {

constexpr auto payments = R"(
defaults:
  attempt_timeout: 5s
dependencies:
  payments:
    hosts: [payments.internal]
    max_retries: 2
    backoff: {base: 100ms, cap: 1s}
    routes:
      - match: {path_prefix: /v1/payments, methods: [POST]}
        backoff: {base: 200ms, cap: 2s}
        attempt_timeout: 2s
      - match: {path_prefix: /v1/reports}
        context: async
        max_retries: 7
      - match: {methods: [DELETE]}
        retry_on: [503]
)";

}  // namespace

TEST(Routes, ResolutionIsRouteThenDependencyThenDefaultsThenContext) {
  auto const c = load_config_text(payments, "t.yaml");
  auto const& d = c.dependencies.at(0);
  ASSERT_EQ(d.routes.size(), 3u);
  auto const& post = d.routes[0].effective;
  EXPECT_EQ(post.backoff.base, 200ms);  // route
  EXPECT_EQ(post.attempt_timeout, 2s);  // route
  EXPECT_EQ(post.max_retries, 2u);      // dependency
  auto const& reports = d.routes[1].effective;
  EXPECT_EQ(reports.context, context_kind::async);
  EXPECT_EQ(reports.max_retries, 7u);
  EXPECT_EQ(reports.backoff.base, 100ms);  // dependency
  EXPECT_EQ(reports.attempt_timeout, 5s);  // defaults
  EXPECT_EQ(reports.total_timeout, 24h);   // the built-in of the route's context (R-3)
  auto const& del = d.routes[2].effective;
  EXPECT_TRUE(del.retry_on.contains(rebound::retry::retry_on::cls::s503));
  EXPECT_FALSE(del.retry_on.contains(rebound::retry::retry_on::cls::s502));
}

TEST(Routes, FirstMatchWinsOnPathPrefixAndMethod) {
  auto const c = load_config_text(payments, "t.yaml");
  auto const& d = c.dependencies.at(0);
  EXPECT_EQ(&d.policy_for("POST", "/v1/payments/42"), &d.routes[0].effective);
  EXPECT_EQ(&d.policy_for("GET", "/v1/payments/42"), &d.effective) << "method not listed";
  EXPECT_EQ(&d.policy_for("GET", "/v1/reports/daily"), &d.routes[1].effective) << "no methods: every method";
  EXPECT_EQ(&d.policy_for("DELETE", "/v1/reports/x"), &d.routes[1].effective) << "the first match wins";
  EXPECT_EQ(&d.policy_for("DELETE", "/other"), &d.routes[2].effective) << "no path_prefix: every path";
  EXPECT_EQ(&d.policy_for("post", "/v1/payments"), &d.effective) << "methods are case-sensitive";
}

TEST(Routes, R2_RouteFindingsPointAtTheRoute) {
  auto const e = errors_of(R"(
dependencies:
  payments:
    hosts: [p]
    routes:
      - match: {path_prefix: /v1}
        max_retries: 9
)");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].path, "dependencies.payments.routes[0].max_retries");
  EXPECT_EQ(e[0].rule, "R-2");
  EXPECT_EQ(e[0].line, 7);
}

TEST(Routes, R2_ApprovalOnTheRouteAllowsItsRetries) {
  auto const c = load_config_text(R"(
dependencies:
  payments:
    hosts: [p]
    routes:
      - match: {path_prefix: /v1/reports}
        max_retries: 7
        approval: IAB-2026-114
)",
                                  "t.yaml");
  EXPECT_EQ(c.dependencies[0].routes[0].effective.max_retries, 7u);
}

TEST(Routes, R7_BudgetAndBreakerBelongToTheDependency) {
  auto const e = errors_of(R"(
dependencies:
  payments:
    hosts: [p]
    routes:
      - match: {path_prefix: /v1}
        budget: {ratio: 0.1}
        circuit_breaker: {mode: off}
)");
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].path, "dependencies.payments.routes[0].budget");
  EXPECT_EQ(e[0].rule, "R-7");
  EXPECT_EQ(e[1].path, "dependencies.payments.routes[0].circuit_breaker");
}

TEST(Routes, BadMatchesAreRefusedWithWhatIsAccepted) {
  auto const e = errors_of(R"(
dependencies:
  payments:
    hosts: [p]
    routes:
      - match: {path_prefx: /v1}
      - match: {path_prefix: v1/payments}
      - match: {methods: [post]}
      - match: {methods: []}
      - match: /v1
      - max_retrys: 2
    )");
  ASSERT_EQ(e.size(), 6u);
  EXPECT_NE(e[0].message.find("did you mean \"path_prefix\""), std::string::npos) << e[0].message;
  EXPECT_NE(e[1].message.find("expected a path starting with /"), std::string::npos) << e[1].message;
  EXPECT_NE(e[2].message.find("did you mean \"POST\""), std::string::npos) << e[2].message;
  EXPECT_EQ(e[3].path, "dependencies.payments.routes[3].match.methods");
  EXPECT_EQ(e[4].path, "dependencies.payments.routes[4].match");
  EXPECT_NE(e[5].message.find("did you mean \"max_retries\""), std::string::npos) << e[5].message;
}

TEST(Routes, RoutesMustBeAList) {
  auto const e = errors_of("dependencies:\n  p:\n    hosts: [p]\n    routes: {match: {}}\n");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].path, "dependencies.p.routes");
}

TEST(Routes, EffectiveConfigKeepsRoutesAndLoadsBack) {
  auto const once = effective_config_json(load_config_text(payments, "t.yaml"));
  EXPECT_NE(once.find(R"("routes":[{"match":{"path_prefix":"/v1/payments","methods":["POST"]})"), std::string::npos)
      << once;
  EXPECT_EQ(effective_config_json(load_config_text(once, "effective.json")), once);
}

TEST(Routes, GrpcStreamingNamesStreamingMethodsByRoute) {
  auto const c = load_config_text(R"(
dependencies:
  chat:
    hosts: [chat.internal]
    context: grpc
    routes:
      - match: {path_prefix: /chat.Chat/Stream}
        grpc_streaming: true
)",
                                  "t.yaml");
  auto const& d = c.dependencies.at(0);
  EXPECT_TRUE(d.policy_for("POST", "/chat.Chat/Stream").grpc_streaming);
  EXPECT_FALSE(d.policy_for("POST", "/chat.Chat/Send").grpc_streaming) << "unary unless a route says otherwise";
  auto const json = effective_config_json(c);
  EXPECT_NE(json.find(R"("grpc_streaming":true)"), std::string::npos) << json;
  EXPECT_EQ(effective_config_json(load_config_text(json, "effective.json")), json);
}

TEST(Routes, GrpcStreamingMustBeABoolean) {
  auto const e = errors_of("dependencies:\n  p:\n    hosts: [p]\n    grpc_streaming: sometimes\n");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].path, "dependencies.p.grpc_streaming");
}

}  // namespace routes_test
