#include "proxy/plan/request_plan.hpp"

#include "proxy/auth/jwt.hpp"
#include "proxy/wire/head_fields.hpp"

#include <boost/beast/http/fields.hpp>

#include <gtest/gtest.h>

using namespace rebound;
using namespace std::chrono_literals;
namespace bhttp = boost::beast::http;

namespace request_plan_test {
namespace {

using steady = std::chrono::steady_clock;
using stored_fields = std::vector<std::pair<std::string, std::string>>;

/// A dependency under test: a policy, a route to it and a target on it.
struct rig {
  retry::policy policy;
  plan::dependency_route route;
  plan::request_target target;
  std::mt19937_64 rng{7};
  steady::time_point now = steady::now();

  rig() {
    route.name = "payments";
    route.policy = &policy;
    target = *plan::parse_request_target("POST", "http://payments:8080/charge?card=4111", "", 0, 11).value;
  }

  plan::request_in in(plan::door d, bhttp::verb v = bhttp::verb::post, std::string_view task_id = {},
                      std::string_view task_key = {}) {
    return {d, route, target, v, bhttp::to_string(v), rng, now, task_id, task_key};
  }
};

/// The same head as HTTP/1.1 fields, HTTP/2 fields (lower-case names) and a stored task's.
struct three_heads {
  bhttp::fields http1;
  h2::fields h2;
  stored_fields stored;

  explicit three_heads(std::initializer_list<std::pair<std::string, std::string>> fs) {
    for (auto const& [name, value] : fs) {
      http1.insert(name, value);
      std::string lower(name);
      for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      h2.push_back({lower, value});
      stored.emplace_back(name, value);
    }
  }
};

std::string b64url(std::string_view s) {
  auto out = auth::base64_encode(s);
  while (!out.empty() && out.back() == '=') out.pop_back();
  for (auto& c : out) c = c == '+' ? '-' : c == '/' ? '_' : c;
  return out;
}

TEST(RequestPlan, R10_OneCorrelationRuleReadsEveryDoorsHeadAlike) {
  constexpr std::string_view tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  three_heads const h{{"X-Request-ID", "has space"}, {"X-Correlation-ID", "corr-1"}, {"traceparent", std::string(tp)}};
  EXPECT_EQ(plan::correlation_id_of(plan::fields_view(h.http1)), "corr-1") << "an unusable X-Request-ID gives way";
  EXPECT_EQ(plan::correlation_id_of(plan::list_view(h.h2)), "corr-1");
  EXPECT_EQ(plan::correlation_id_of(plan::list_view(h.stored)), "corr-1");
  EXPECT_EQ(plan::traceparent_of(plan::list_view(h.h2)), tp);

  three_heads const twice{{"traceparent", std::string(tp)}, {"traceparent", std::string(tp)}};
  EXPECT_EQ(plan::traceparent_of(plan::fields_view(twice.http1)), "") << "two traceparents start a new trace (W3C)";
  EXPECT_EQ(plan::traceparent_of(plan::list_view(twice.h2)), "");
  EXPECT_EQ(plan::correlation_id_of(plan::list_view(twice.h2)), "");
}

TEST(RequestPlan, R10_AnIdIsMadeAndSentOnOnlyWhereTheDoorSendsOne) {
  three_heads const none{{"Accept", "*/*"}};
  for (auto d : {plan::door::http1, plan::door::grpc}) {
    rig r;
    plan::request_plan p;
    ASSERT_FALSE(plan::plan_request(p, plan::list_view(none.stored), r.in(d)));
    EXPECT_TRUE(p.correlation_made);
    EXPECT_EQ(p.facts.correlation_id.size(), 32u);
    std::vector<std::pair<std::string, std::string>> set;
    plan::edits_of(p, "Idempotency-Key", [&](std::string_view n, std::string_view v) { set.emplace_back(n, v); });
    ASSERT_FALSE(set.empty());
    EXPECT_EQ(set.front().first, plan::request_id_field);
    EXPECT_EQ(set.front().second, p.facts.correlation_id);
  }
  rig r;
  plan::request_plan delivered;
  ASSERT_FALSE(plan::plan_request(delivered, plan::list_view(none.stored),
                                  r.in(plan::door::delivery, bhttp::verb::post, "task-42", "key-42")));
  EXPECT_FALSE(delivered.correlation_made);
  EXPECT_EQ(delivered.facts.correlation_id, "task-42") << "a delivery without the caller's id is named by its task";
  plan::request_plan handed;
  ASSERT_FALSE(plan::plan_request(handed, plan::list_view(none.stored), r.in(plan::door::hand_over)));
  EXPECT_FALSE(handed.correlation_made) << "a handed-over call is named by its task id until delivered";
  plan::request_plan inbound;
  ASSERT_FALSE(plan::plan_request(inbound, plan::list_view(none.stored), r.in(plan::door::inbound)));
  EXPECT_FALSE(inbound.correlation_made) << "nothing is added to what reaches the app";
  three_heads const named{{"X-Request-ID", "order-7-call"}};
  plan::request_plan named_inbound;
  ASSERT_FALSE(plan::plan_request(named_inbound, plan::fields_view(named.http1), r.in(plan::door::inbound)));
  EXPECT_EQ(named_inbound.facts.correlation_id, "order-7-call");
}

TEST(RequestPlan, TheFactsNameThePathWithoutItsQuery) {
  rig r;
  plan::request_plan p;
  stored_fields const none;
  ASSERT_FALSE(plan::plan_request(p, plan::list_view(none), r.in(plan::door::http1)));
  EXPECT_EQ(p.facts.dependency, "payments");
  EXPECT_EQ(p.facts.method, "POST");
  EXPECT_EQ(p.facts.path, "/charge") << "R-9: no query string in a log line";
  EXPECT_EQ(p.facts.server_address, "payments");
  EXPECT_EQ(p.facts.server_port, 8080);
  EXPECT_FALSE(p.facts.grpc);
}

TEST(RequestPlan, R3_TheCallersDeadlineIsReadFromItsDoorsField) {
  rig r;
  {
    three_heads const h{{"X-Request-Timeout", "2, 1.5"}, {"X-Request-Timeout", "3"}, {"grpc-timeout", "1m"}};
    plan::request_plan p;
    ASSERT_FALSE(plan::plan_request(p, plan::fields_view(h.http1), r.in(plan::door::http1)));
    EXPECT_EQ(p.facts.deadline, r.now + 1500ms) << "the earliest of every element wins; grpc-timeout is gRPC's";
    plan::request_plan g;
    ASSERT_FALSE(plan::plan_request(g, plan::list_view(h.h2), r.in(plan::door::grpc)));
    EXPECT_EQ(g.facts.deadline, r.now + 1ms) << "X-Request-Timeout is HTTP/1.1's";
    EXPECT_TRUE(g.facts.grpc);
    plan::request_plan d;
    ASSERT_FALSE(plan::plan_request(d, plan::list_view(h.stored), r.in(plan::door::delivery)));
    EXPECT_FALSE(d.facts.deadline) << "a delivery's deadline is its task's window";
  }
  {
    three_heads const bad{{"X-Request-Timeout", "soon"}};
    plan::request_plan p;
    auto const refused = plan::plan_request(p, plan::fields_view(bad.http1), r.in(plan::door::http1));
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 400u);
    EXPECT_EQ(refused->dependency, "payments");
  }
  {
    three_heads const spent{{"X-Request-Timeout", "0"}, {"grpc-timeout", "0S"}};
    plan::request_plan p;
    auto const refused = plan::plan_request(p, plan::fields_view(spent.http1), r.in(plan::door::http1));
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 504u);
    plan::request_plan g;
    auto const grpc_refused = plan::plan_request(g, plan::list_view(spent.h2), r.in(plan::door::grpc));
    ASSERT_TRUE(grpc_refused);
    EXPECT_EQ(grpc_refused->type, retry::error_type::deadline_exceeded);
  }
  {
    three_heads const malformed{{"grpc-timeout", "soon"}};
    plan::request_plan g;
    EXPECT_FALSE(plan::plan_request(g, plan::list_view(malformed.h2), r.in(plan::door::grpc)))
        << "a malformed grpc-timeout is ignored, as gRPC servers do";
    EXPECT_FALSE(g.facts.deadline);
  }
}

TEST(RequestPlan, R6_EachDoorTakesItsKeyByItsRule) {
  rig r;
  stored_fields const none;
  {
    r.policy.idempotency.inject = false;
    plan::request_plan p;
    ASSERT_FALSE(plan::plan_request(p, plan::list_view(none), r.in(plan::door::http1)));
    EXPECT_FALSE(p.facts.may_retry) << "a POST without a key goes once";
    EXPECT_FALSE(p.key_made);
    plan::request_plan get;
    ASSERT_FALSE(plan::plan_request(get, plan::list_view(none), r.in(plan::door::http1, bhttp::verb::get)));
    EXPECT_TRUE(get.facts.may_retry);
    plan::request_plan handed;
    ASSERT_FALSE(plan::plan_request(handed, plan::list_view(none), r.in(plan::door::hand_over)));
    EXPECT_TRUE(handed.key_made) << "a hand-over always carries a key, whatever the policy injects";
    EXPECT_TRUE(handed.facts.may_retry);
    r.policy.idempotency.inject = true;
  }
  {
    plan::request_plan p;
    ASSERT_FALSE(plan::plan_request(p, plan::list_view(none), r.in(plan::door::grpc)));
    EXPECT_TRUE(p.key_made);
    EXPECT_TRUE(p.facts.may_retry);
    EXPECT_EQ(p.facts.idempotency_key, p.key);
  }
  {
    three_heads const h{{"idempotency-key", "order-7"}};
    plan::request_plan p;
    ASSERT_FALSE(plan::plan_request(p, plan::fields_view(h.http1), r.in(plan::door::http1)));
    EXPECT_EQ(p.key, "order-7") << "the policy's field name, read without regard to case";
    EXPECT_FALSE(p.key_made);
    EXPECT_TRUE(p.facts.may_retry);
  }
  {
    three_heads const twice{{"Idempotency-Key", "a"}, {"Idempotency-Key", "b"}};
    for (auto d : {plan::door::http1, plan::door::grpc, plan::door::hand_over}) {
      plan::request_plan p;
      auto const refused = plan::plan_request(p, plan::list_view(twice.h2), r.in(d));
      ASSERT_TRUE(refused);
      EXPECT_EQ(refused->status, 400u) << "two keys are refused at every door";
    }
  }
  {
    three_heads const twice{{"Idempotency-Key", "a"}, {"Idempotency-Key", "b"}};
    plan::request_plan gate;
    EXPECT_FALSE(plan::plan_request(gate, plan::list_view(twice.h2), r.in(plan::door::inbound)))
        << "the inbound gate judges its keys itself (inbound/gate_step.cpp)";
    EXPECT_FALSE(gate.key_made);
    EXPECT_FALSE(gate.facts.may_retry) << "a request to the app goes once";
  }
  {
    plan::request_plan d;
    ASSERT_FALSE(
        plan::plan_request(d, plan::list_view(none), r.in(plan::door::delivery, bhttp::verb::post, "t", "k-1")));
    EXPECT_EQ(d.facts.idempotency_key, "k-1");
    EXPECT_TRUE(d.facts.may_retry);
    EXPECT_FALSE(d.key_made);
  }
}

TEST(RequestPlan, R9_TheCallersOwnJwtBoundsItsRetriesWhereItIsForwarded) {
  rig r;
  auto const token = b64url(R"({"alg":"none"})") + "." + b64url(R"({"exp":1700000000})") + ".sig";
  three_heads const h{{"Authorization", "Bearer " + token}};
  plan::request_plan p;
  ASSERT_FALSE(plan::plan_request(p, plan::list_view(h.h2), r.in(plan::door::grpc)));
  ASSERT_TRUE(p.facts.credential_expires);
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::seconds>(p.facts.credential_expires->time_since_epoch()).count(),
            1700000000);
  plan::request_plan handed;
  ASSERT_FALSE(plan::plan_request(handed, plan::fields_view(h.http1), r.in(plan::door::hand_over)));
  EXPECT_FALSE(handed.facts.credential_expires) << "a stored call is delivered with what it carries, later";
}

}  // namespace
}  // namespace request_plan_test
