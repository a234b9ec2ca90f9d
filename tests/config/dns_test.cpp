// `dns:` in the YAML (issue 50): the servers rebound asks and how long it keeps their answers.
#include "config/describe.hpp"
#include "config/load.hpp"
#include "diagnostics.hpp"

#include <gtest/gtest.h>

using namespace rebound::config;
using namespace std::chrono_literals;

namespace dns_config_test {

TEST(DnsConfig, TheDefaultsAskResolvConfsServersAndBoundTheTtl) {
  auto const c = load_config_text("", "t.yaml");
  EXPECT_TRUE(c.dns.servers.empty());
  EXPECT_EQ(c.dns.min_ttl, 5s);
  EXPECT_EQ(c.dns.max_ttl, 5min);
  EXPECT_EQ(c.dns.stale_for, 5min);
  EXPECT_EQ(c.dns.timeout, 2s);
  EXPECT_EQ(c.dns.connect_stagger, 250ms);
}

TEST(DnsConfig, ServersAreWrittenAsCAresTakesThemWithThePortAlwaysGiven) {
  auto const c = load_config_text(R"(
dns:
  servers: [10.0.0.2, "127.0.0.1:5353", "fd00::2", "[fd00::3]:5300"]
  min_ttl: 1s
  max_ttl: 1m
  stale_for: 0s
  timeout: 500ms
  connect_stagger: 100ms
)",
                                  "t.yaml");
  EXPECT_EQ(c.dns.servers, (std::vector<std::string>{"10.0.0.2:53", "127.0.0.1:5353", "[fd00::2]:53", "[fd00::3]:5300"}));
  EXPECT_EQ(c.dns.min_ttl, 1s);
  EXPECT_EQ(c.dns.max_ttl, 1min);
  EXPECT_EQ(c.dns.stale_for, 0s);
  EXPECT_EQ(c.dns.timeout, 500ms);
  EXPECT_EQ(c.dns.connect_stagger, 100ms);
}

TEST(DnsConfig, TheEffectiveConfigShowsItAndLoadsBack) {
  auto const c = load_config_text("dns: {servers: [\"127.0.0.1:5353\"], max_ttl: 30s}", "t.yaml");
  auto const shown = effective_config_json(c);
  EXPECT_NE(shown.find(R"("dns":{"servers":["127.0.0.1:5353"],"min_ttl":"5s","max_ttl":"30s")"), std::string::npos)
      << shown;
  EXPECT_EQ(load_config_text(shown, "effective.json").dns, c.dns);
}

TEST(DnsConfig, ANameAMisspeltKeyOrAnInvertedTtlRangeIsRefused) {
  auto const refused = messages(errors_of(R"(
dns:
  servers: [dns.internal, "10.0.0.2:99999"]
  min_ttl: 10m
  max_ttl: 1m
  stale_fro: 1m
  timeout: 0s
  connect_stagger: 1ms
)"));
  EXPECT_NE(refused.find("dns.servers[0]: invalid DNS server \"dns.internal\""), std::string::npos) << refused;
  EXPECT_NE(refused.find("dns.servers[1]: invalid DNS server"), std::string::npos) << refused;
  EXPECT_NE(refused.find("dns.min_ttl: must not exceed dns.max_ttl (1m)"), std::string::npos) << refused;
  EXPECT_NE(refused.find("dns.stale_fro: unknown key"), std::string::npos) << refused;
  EXPECT_NE(refused.find("did you mean \"stale_for\""), std::string::npos) << refused;
  EXPECT_NE(refused.find("dns.timeout: must be between 100ms and 1m"), std::string::npos) << refused;
  EXPECT_NE(refused.find("dns.connect_stagger: must be between 10ms and 10s"), std::string::npos) << refused;
}

}  // namespace dns_config_test
