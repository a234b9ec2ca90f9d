#include "proxy/retry/address_health.hpp"
#include "proxy/net.hpp"

#include <gtest/gtest.h>

namespace net = rebound::net;
using rebound::retry::address_health;
using namespace std::chrono_literals;

namespace address_health_test {
namespace {

auto const t0 = address_health::clock::time_point{} + 1000s;
auto const a = net::ip::make_address("10.0.0.1");
auto const b = net::ip::make_address("10.0.0.2");
auto const c = net::ip::make_address("10.0.0.3");

rebound::retry::outlier_policy policy() { return {}; }  // 5 in a row, 30 s x n up to 300 s, half

std::vector<net::ip::address> ejected(const address_health& h, address_health::clock::time_point now) {
  std::vector<net::ip::address> out;
  h.ejected(now, out);
  return out;
}

/// Fails `addr` `n` times at `now`; the ejection the last one made, if any.
std::optional<address_health::ejection> fail(address_health& h, const net::ip::address& addr, int n,
                                             address_health::clock::time_point now, std::size_t of = 2) {
  std::optional<address_health::ejection> last;
  for (int i = 0; i < n; ++i) last = h.failed(addr, of, now);
  return last;
}

TEST(AddressHealth, FiveFailuresInARowEjectAnAddressForThirtySeconds) {
  address_health h(policy());
  EXPECT_FALSE(fail(h, a, 4, t0));
  EXPECT_TRUE(ejected(h, t0).empty());
  auto const e = h.failed(a, 2, t0);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->address, a);
  EXPECT_EQ(e->times, 1u);
  EXPECT_EQ(e->ejected_for, 30s);
  EXPECT_EQ(ejected(h, t0 + 29s), std::vector{a});
  EXPECT_TRUE(ejected(h, t0 + 30s).empty());  // it comes back
}

TEST(AddressHealth, AGoodAnswerEndsTheRunOfFailures) {
  address_health h(policy());
  fail(h, a, 4, t0);
  h.answered(a, t0);
  EXPECT_EQ(h.tracked(), 0u);  // nothing left to look up
  EXPECT_FALSE(fail(h, a, 4, t0));
  EXPECT_TRUE(fail(h, a, 1, t0));
}

TEST(AddressHealth, EachEjectionLastsLongerUpToTheCap) {
  address_health h(policy());
  auto now = t0;
  std::vector<address_health::clock::duration> lasted;
  for (int round = 0; round < 12; ++round) {
    auto const e = fail(h, a, 5, now);
    ASSERT_TRUE(e) << round;
    lasted.push_back(e->ejected_for);
    now += e->ejected_for;  // back, and failing again at once
  }
  EXPECT_EQ(lasted[0], 30s);
  EXPECT_EQ(lasted[1], 60s);
  EXPECT_EQ(lasted[2], 90s);
  EXPECT_EQ(lasted[9], 300s);
  EXPECT_EQ(lasted[11], 300s);  // capped at max_ejection
}

TEST(AddressHealth, AnAddressHealthyForTheLongestEjectionIsForgiven) {
  address_health h(policy());
  fail(h, a, 5, t0);
  fail(h, a, 5, t0 + 30s);  // the second ejection: 60 s, until t0 + 90 s
  h.answered(a, t0 + 90s + 300s);
  EXPECT_EQ(h.tracked(), 0u);
  auto const e = fail(h, a, 5, t0 + 400s);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->times, 1u);
  EXPECT_EQ(e->ejected_for, 30s);
}

TEST(AddressHealth, FailuresWhileEjectedDoNotExtendTheEjection) {
  address_health h(policy());
  fail(h, a, 5, t0);
  EXPECT_FALSE(fail(h, a, 10, t0 + 1s));  // requests sent before the ejection, failing late
  EXPECT_TRUE(ejected(h, t0 + 30s).empty());
  EXPECT_FALSE(fail(h, a, 4, t0 + 30s));  // a fresh run after it came back
}

TEST(AddressHealth, NeverMoreThanTheShareOfTheNamesAddressesAreEjected) {
  address_health h(policy());
  EXPECT_TRUE(fail(h, a, 5, t0, 3));   // of 3 addresses, half rounds down to 1
  EXPECT_FALSE(fail(h, b, 5, t0, 3));  // the second waits for room
  EXPECT_EQ(ejected(h, t0), std::vector{a});
  EXPECT_TRUE(fail(h, b, 1, t0 + 30s, 3));  // a is back: b's next failure ejects it
  EXPECT_EQ(ejected(h, t0 + 30s), std::vector{b});
}

TEST(AddressHealth, ANameWithOneAddressNeverEjectsIt) {
  address_health h(policy());
  EXPECT_FALSE(fail(h, a, 50, t0, 1));
  EXPECT_TRUE(ejected(h, t0).empty());
}

TEST(AddressHealth, OffEjectsNothing) {
  auto p = policy();
  p.enabled = false;
  address_health h(p);
  EXPECT_FALSE(fail(h, a, 50, t0));
  EXPECT_EQ(h.tracked(), 0u);
}

TEST(AddressHealth, WhatIsTrackedIsBounded) {
  address_health h(policy());
  for (std::uint32_t i = 0; i < address_health::max_tracked + 100; ++i)
    h.failed(net::ip::address_v4(0x0a000000u + i), 1000, t0);
  EXPECT_EQ(h.tracked(), address_health::max_tracked);
}

TEST(AddressHealth, TheReadingShowsWhatIsEjectedAndForHowLong) {
  address_health h(policy());
  fail(h, c, 5, t0, 4);
  fail(h, a, 5, t0, 4);
  fail(h, b, 2, t0, 4);
  auto const r = h.read(t0 + 10s);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].address, a);  // in address order
  EXPECT_EQ(r[1].address, c);
  EXPECT_EQ(r[0].remaining, 20s);
  EXPECT_EQ(r[0].times, 1u);
}

TEST(AddressHealth, A5xxOrAGrpcStatusEnvoyMapsToOneFailsTheAddress) {
  using rebound::retry::attempt_outcome;
  using rebound::retry::fails_address;
  EXPECT_TRUE(fails_address(attempt_outcome{503}));
  EXPECT_TRUE(fails_address(attempt_outcome{500}));
  EXPECT_FALSE(fails_address(attempt_outcome{429}));  // the host is alive and says so
  EXPECT_FALSE(fails_address(attempt_outcome{404}));
  EXPECT_FALSE(fails_address(attempt_outcome{200}));
  EXPECT_TRUE(fails_address(attempt_outcome{200, std::nullopt, 14}));   // UNAVAILABLE
  EXPECT_TRUE(fails_address(attempt_outcome{200, std::nullopt, 13}));   // INTERNAL
  EXPECT_FALSE(fails_address(attempt_outcome{200, std::nullopt, 8}));   // RESOURCE_EXHAUSTED: 429
  EXPECT_FALSE(fails_address(attempt_outcome{200, std::nullopt, 5}));   // NOT_FOUND
  EXPECT_FALSE(fails_address(attempt_outcome{200, std::nullopt, 0}));
}

}  // namespace
}  // namespace address_health_test
