// The refusals every way in (HTTP/1.1, CONNECT, gRPC, the inbound listener, the task API)
// makes before anything is sent, each written once: forwarding loops (508) and
// `unknown_hosts: deny` (403).
#include "proxy/plan/dependency_route.hpp"
#include "proxy/plan/loop_guard.hpp"

#include <gtest/gtest.h>

using namespace rebound;
using namespace rebound::http;

namespace loop_guard_test {
namespace {
plan::request_target target(std::string host, std::uint16_t port) {
  plan::request_target t;
  t.host = t.connect_host = host;
  t.port = port;
  t.authority = host + ":" + std::to_string(port);
  return t;
}
}  // namespace

TEST(LoopGuard, ATargetOnReboundsOwnListenerIsALoop) {
  config::endpoint const listen{"0.0.0.0", 8080};
  auto const loop = plan::refuse_loop(target("127.0.0.1", 8080), false, listen);
  ASSERT_TRUE(loop);
  EXPECT_EQ(loop->status, 508u);
  EXPECT_EQ(loop->type, error_type::loop_detected);
  EXPECT_TRUE(plan::refuse_loop(target("localhost", 8080), false, listen));
  EXPECT_FALSE(plan::refuse_loop(target("127.0.0.1", 8081), false, listen));
}

TEST(LoopGuard, ARequestThatPassedThisProcessIsALoopWhereverItGoes) {
  auto const token = plan::new_instance_token();
  EXPECT_TRUE(plan::via_value_names_instance("1.1 proxy-a, 1.1 " + plan::via_mark(token), token));
  EXPECT_FALSE(plan::via_value_names_instance("1.1 " + plan::via_mark("0000beef"), token == "0000beef" ? "1111beef" : token))
      << "another rebound's entry is not this one's";
  EXPECT_FALSE(plan::via_value_names_instance("1.1 rebound", "")) << "no token, no claim";
  EXPECT_TRUE(plan::refuse_loop(target("10.0.0.9", 443), true, config::endpoint{"127.0.0.1", 8080}));
}

TEST(DependencyRoute, UnknownHostsAreRefusedOnlyUnderDeny) {
  config::config cfg;
  auto t = target("unknown.example", 80);
  auto const route = plan::route_request(cfg, t, "GET", false);
  EXPECT_FALSE(plan::refuse_unknown_host(cfg, route, t)) << "allow is the default";
  cfg.unknown_hosts = config::unknown_hosts_policy::deny;
  auto const refused = plan::refuse_unknown_host(cfg, route, t);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 403u);
  EXPECT_EQ(refused->type, error_type::unknown_host);
  EXPECT_EQ(refused->dependency, "unknown.example:80");
}

}  // namespace loop_guard_test
