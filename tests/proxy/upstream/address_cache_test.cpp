#include "proxy/upstream/address_cache.hpp"
#include "proxy/net.hpp"

#include <gtest/gtest.h>

namespace net = rebound::net;
using rebound::upstream::address_cache;
using rebound::upstream::interleave_families;
using namespace std::chrono_literals;

namespace address_cache_test {
namespace {

using state = address_cache::state;

rebound::config::dns_settings settings() {
  rebound::config::dns_settings s;
  s.min_ttl = 5s;
  s.max_ttl = 300s;
  s.stale_for = 60s;
  return s;
}

std::vector<net::ip::address> addrs(std::initializer_list<const char*> list) {
  std::vector<net::ip::address> out;
  for (auto const* a : list) out.push_back(net::ip::make_address(a));
  return out;
}

auto const t0 = address_cache::clock::time_point{} + 1000s;

TEST(AddressCache, AnAnswerIsKeptForItsTtlAndThenAskedAgain) {
  address_cache c(settings());
  EXPECT_EQ(c.find("svc", t0).s, state::unknown);
  c.answered("svc", addrs({"10.0.0.1"}), 30s, t0);
  auto const f = c.find("svc", t0 + 26s);
  ASSERT_EQ(f.s, state::fresh);
  EXPECT_EQ(*f.addresses, addrs({"10.0.0.1"}));
  EXPECT_EQ(c.find("svc", t0 + 27s).s, state::refresh);  // its last tenth: asked while still used
  EXPECT_EQ(c.find("svc", t0 + 30s).s, state::expired);
}

TEST(AddressCache, TheTtlIsHeldBetweenMinTtlAndMaxTtl) {
  address_cache c(settings());
  c.answered("zero", addrs({"10.0.0.1"}), 0s, t0);
  EXPECT_EQ(c.find("zero", t0 + 4s).s, state::fresh);  // a TTL of 0 would ask on every connection
  EXPECT_EQ(c.find("zero", t0 + 5s).s, state::expired);
  c.answered("week", addrs({"10.0.0.1"}), std::chrono::hours(24 * 7), t0);
  EXPECT_EQ(c.find("week", t0 + 269s).s, state::fresh);
  EXPECT_EQ(c.find("week", t0 + 299s).s, state::refresh);
  EXPECT_EQ(c.find("week", t0 + 300s).s, state::expired);  // a moved service is found within max_ttl
}

TEST(AddressCache, ANameThatDoesNotExistIsRememberedForMinTtl) {
  address_cache c(settings());
  c.absent("nope", "no such name", t0);
  auto const f = c.find("nope", t0 + 4s);
  EXPECT_EQ(f.s, state::absent);
  EXPECT_EQ(f.why, "no such name");
  EXPECT_EQ(c.find("nope", t0 + 5s).s, state::unknown);
}

TEST(AddressCache, AServerFailureIsBridgedByTheLastAnswerForStaleForPastItsTtl) {
  address_cache c(settings());
  c.answered("svc", addrs({"10.0.0.1"}), 10s, t0);
  // Past the TTL the servers fail: the last answer is used, the outage said once.
  auto const b = c.failed("svc", t0 + 11s);
  ASSERT_NE(b.addresses, nullptr);
  EXPECT_EQ(*b.addresses, addrs({"10.0.0.1"}));
  EXPECT_TRUE(b.first);
  // Not asked again before min_ttl: requests meanwhile take the bridge at once.
  EXPECT_EQ(c.find("svc", t0 + 15s).s, state::bridged);
  EXPECT_EQ(c.find("svc", t0 + 16s).s, state::expired);
  auto const again = c.failed("svc", t0 + 16s);
  ASSERT_NE(again.addresses, nullptr);
  EXPECT_FALSE(again.first);
  // stale_for after the TTL, the bridge ends: the failure is the request's.
  EXPECT_EQ(c.failed("svc", t0 + 70s).addresses, nullptr);
  EXPECT_EQ(c.find("svc", t0 + 70s).s, state::unknown);
}

TEST(AddressCache, AnAnswerAfterAnOutageEndsTheBridge) {
  address_cache c(settings());
  c.answered("svc", addrs({"10.0.0.1"}), 10s, t0);
  (void)c.failed("svc", t0 + 11s);
  c.answered("svc", addrs({"10.0.0.2"}), 10s, t0 + 17s);
  auto const f = c.find("svc", t0 + 18s);
  ASSERT_EQ(f.s, state::fresh);
  EXPECT_EQ(*f.addresses, addrs({"10.0.0.2"}));
  EXPECT_TRUE(c.failed("svc", t0 + 28s).first);  // the next outage is said again
}

TEST(AddressCache, NothingBridgesANameNeverAnswered) {
  address_cache c(settings());
  EXPECT_EQ(c.failed("svc", t0).addresses, nullptr);
  c.absent("gone", "no such name", t0);
  EXPECT_EQ(c.failed("gone", t0 + 1s).addresses, nullptr);
}

TEST(AddressCache, ItHoldsAtMostMaxNamesAndForgetsWhatIsPastUseFirst) {
  address_cache c(settings());
  c.answered("old", addrs({"10.0.0.1"}), 5s, t0);
  for (std::size_t i = 0; i + 1 < address_cache::max_names; ++i)
    c.answered("n" + std::to_string(i), addrs({"10.0.0.2"}), 300s, t0 + 100s);
  EXPECT_EQ(c.size(), address_cache::max_names);
  c.answered("new", addrs({"10.0.0.3"}), 300s, t0 + 100s);  // "old" is past its stale_for
  EXPECT_EQ(c.size(), address_cache::max_names);
  EXPECT_EQ(c.find("old", t0 + 100s).s, state::unknown);
  EXPECT_EQ(c.find("new", t0 + 100s).s, state::fresh);
  c.answered("newer", addrs({"10.0.0.4"}), 300s, t0 + 101s);  // none past use: the soonest to expire goes
  EXPECT_EQ(c.size(), address_cache::max_names);
  EXPECT_EQ(c.find("newer", t0 + 101s).s, state::fresh);
}

TEST(AddressCache, AddressesAreTriedIPv6FirstThenTheFamiliesAlternate) {
  auto const in = addrs({"10.0.0.1", "10.0.0.2", "10.0.0.3", "fd00::1", "fd00::2"});
  EXPECT_EQ(interleave_families(in), addrs({"fd00::1", "10.0.0.1", "fd00::2", "10.0.0.2", "10.0.0.3"}));
  EXPECT_EQ(interleave_families(addrs({"10.0.0.1", "10.0.0.2"})), addrs({"10.0.0.1", "10.0.0.2"}));
}

}  // namespace
}  // namespace address_cache_test
