#include "proxy/plan/locate.hpp"

#include "config/load.hpp"

#include <gtest/gtest.h>

using namespace rebound;

namespace locate_test {
namespace {

plan::located locate(const config::config& cfg, plan::target_in in, plan::listener where = plan::listener::proxy) {
  plan::located out;
  plan::locate(out, in, where, cfg);
  return out;
}

TEST(Locate, ARequestGoesToItsDependencysOriginWithTheHostItNamed) {
  auto const cfg = config::load_config_text(
      "dependencies: {payments: {hosts: [payments.internal], origin: 'http://10.0.0.7:9000'}}", "t.yaml");
  auto const got = locate(cfg, {"GET", "http://payments.internal/charge?id=1", "payments.internal", 1, 11, false});
  ASSERT_FALSE(got.refusal);
  EXPECT_EQ(got.route.name, "payments");
  EXPECT_EQ(got.target.connect_host, "10.0.0.7");
  EXPECT_EQ(got.target.port, 9000);
  EXPECT_EQ(got.target.authority, "payments.internal") << "the Host it carries stays the one the client named";
  EXPECT_FALSE(got.is_connect);
}

TEST(Locate, EachRefusalSaysWhetherTheConnectionMayCarryTheNextRequest) {
  config::config cfg;
  cfg.unknown_hosts = config::unknown_hosts_policy::deny;
  auto const https = locate(cfg, {"GET", "https://a.example/", "a.example", 1, 11, false});
  ASSERT_TRUE(https.refusal);
  EXPECT_EQ(https.refusal->status, 400u);
  EXPECT_TRUE(https.refusal_keeps_connection);

  auto const unknown = locate(cfg, {"GET", "/", "a.example", 1, 11, false});
  ASSERT_TRUE(unknown.refusal);
  EXPECT_EQ(unknown.refusal->status, 403u);
  EXPECT_TRUE(unknown.refusal_keeps_connection);

  auto const malformed = locate(cfg, {"GET", "/", "", 0, 11, false});
  ASSERT_TRUE(malformed.refusal) << "HTTP/1.1 without Host";
  EXPECT_EQ(malformed.refusal->status, 400u);
  EXPECT_FALSE(malformed.refusal_keeps_connection);

  auto const looped = locate(cfg, {"GET", "/", "a.example", 1, 11, true});
  ASSERT_TRUE(looped.refusal);
  EXPECT_EQ(looped.refusal->status, 508u) << "the loop is found before the host is looked up";
  EXPECT_FALSE(looped.refusal_keeps_connection);
}

TEST(Locate, TheInboundListenerSendsEveryRequestToTheAppAndRefusesConnect) {
  config::config cfg;
  cfg.inbound.app = {"127.0.0.1", 3000};
  cfg.unknown_hosts = config::unknown_hosts_policy::deny;
  auto const got = locate(cfg, {"POST", "/orders", "shop.example", 1, 11, false}, plan::listener::inbound);
  ASSERT_FALSE(got.refusal) << "no dependency is looked up: unknown_hosts does not apply";
  EXPECT_EQ(got.route.name, "inbound");
  EXPECT_EQ(got.route.policy, &cfg.inbound.forward);
  EXPECT_EQ(got.target.connect_host, "127.0.0.1");
  EXPECT_EQ(got.target.port, 3000);
  EXPECT_EQ(got.target.authority, "shop.example");

  auto const tunnel = locate(cfg, {"CONNECT", "a.example:443", "a.example:443", 1, 11, false}, plan::listener::inbound);
  ASSERT_TRUE(tunnel.refusal);
  EXPECT_EQ(tunnel.refusal->status, 405u);
}

TEST(Locate, AConnectGoesWhereTheClientAskedNotToAnOrigin) {
  auto const cfg = config::load_config_text(
      "dependencies: {payments: {hosts: [payments.internal], origin: 'http://10.0.0.7:9000'}}", "t.yaml");
  auto const got = locate(cfg, {"CONNECT", "payments.internal:443", "payments.internal:443", 1, 11, false});
  ASSERT_FALSE(got.refusal);
  EXPECT_TRUE(got.is_connect);
  EXPECT_EQ(got.route.name, "payments");
  EXPECT_EQ(got.target.connect_host, "payments.internal") << "rebound cannot see into a tunnel";
  EXPECT_EQ(got.target.port, 443);
}

}  // namespace
}  // namespace locate_test
