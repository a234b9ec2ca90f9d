// Routes (SPEC 2) through the real binary: a request gets the policy of the first route of
// its dependency that matches its path and method, else the dependency's.
#include "helpers.hpp"

namespace itest::routes_test {
namespace {

TEST(Routes, FirstMatchingRouteSetsTheRetryPolicy) {
  ScriptedUpstream up;
  Script down;
  down.status = 503;
  down.body = "busy";
  for (auto const* p : {"/plain", "/v1/reports/daily", "/v1/payments"}) up.on(p, down);
  ReboundOptions o;
  o.extra = "dependencies:\n  api:\n    hosts: [\"" + up.authority() +
            "\"]\n"
            "    max_retries: 1\n    backoff: {base: 1ms, cap: 2ms}\n"
            "    routes:\n"
            "      - match: {path_prefix: /v1/reports}\n        max_retries: 4\n"
            "      - match: {path_prefix: /v1/payments, methods: [POST]}\n        retry_on: [502]\n";
  ReboundProcess rb(o);
  HttpClient client(rb.port());
  auto const base = "http://" + up.authority();

  EXPECT_EQ(client.get(base + "/plain").status, 503u);
  EXPECT_EQ(up.request_count("/plain"), 2u) << "the dependency's max_retries: 1";
  EXPECT_EQ(client.get(base + "/v1/reports/daily?day=1").status, 503u);
  EXPECT_EQ(up.request_count("/v1/reports/daily"), 5u) << "the route's max_retries: 4";
  EXPECT_EQ(client.request("POST", base + "/v1/payments", {}, "{}").status, 503u);
  EXPECT_EQ(up.request_count("/v1/payments"), 1u) << "the route retries 502 only";
  EXPECT_EQ(client.get(base + "/v1/payments").status, 503u);
  EXPECT_EQ(up.request_count("/v1/payments"), 3u) << "GET is not the route's method: the dependency's policy";
}

}  // namespace
}  // namespace itest::routes_test

namespace itest::routes_test {
namespace {

TEST(Origin, DependencyRequestsGoToItsOriginWithTheClientsHost) {
  ScriptedUpstream up;
  up.on("/x", respond(200));
  ReboundOptions o;
  o.extra = "dependencies:\n  payments:\n    hosts: [payments.internal]\n    origin: http://" + up.authority() + "\n";
  ReboundProcess rb(o);
  auto r = raw_exchange(rb.port(), absolute_request("GET", "payments.internal", "/x?y=1"));
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u);
  ASSERT_EQ(up.requests().size(), 1u);
  EXPECT_EQ(up.requests()[0].header("Host").value_or(""), "payments.internal");
  EXPECT_EQ(up.requests()[0].target, "/x?y=1");
  HttpClient admin(rb.admin_port());
  EXPECT_NE(admin.get("/config").body.find("\"origin\":\"http://" + up.authority() + "\""), std::string::npos);
}

}  // namespace
}  // namespace itest::routes_test
