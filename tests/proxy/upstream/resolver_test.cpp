// The resolver against a real DNS server on 127.0.0.1 (integration/dns_server.hpp): c-ares on
// the io_context's own reactor. The cache's clock is the test's, so a TTL runs out without a
// sleep; only dns.timeout (a real timer) is waited for, in the one test about it.
#include "proxy/upstream/resolver.hpp"

#include "integration/dns_server.hpp"
#include "proxy/net.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <gtest/gtest.h>

namespace net = rebound::net;
using rebound::upstream::resolve_result;
using rebound::upstream::resolver_service;
using namespace std::chrono_literals;

namespace resolver_test {
namespace {

struct fixture {
  itest::DnsServer dns;
  net::io_context ioc{1};
  resolver_service::clock::time_point now = resolver_service::clock::now();
  resolver_service& resolver = net::use_service<resolver_service>(ioc);

  explicit fixture(rebound::config::dns_settings s = {}) {
    s.servers = {dns.address()};
    resolver.configure(s, nullptr, nullptr, [this] { return now; });
  }

  /// Resolves each name at once (concurrently), running the loop until all are answered.
  std::vector<resolve_result> resolve_all(const std::vector<std::string>& names) {
    std::vector<resolve_result> out(names.size());
    std::size_t done = 0;
    for (std::size_t i = 0; i < names.size(); ++i)
      net::co_spawn(
          ioc,
          [&, i]() -> net::awaitable<void> {
            out[i] = co_await resolver.resolve(names[i], resolver_service::clock::now() + 10s);
            ++done;
          },
          net::detached);
    ioc.restart();
    while (done < names.size() && ioc.run_one_for(10s) > 0) {
    }
    return out;
  }
  resolve_result resolve(const std::string& name) { return resolve_all({name}).front(); }
  /// Runs the loop until the lookups made in the background have settled.
  void settle() {
    ioc.restart();
    while (resolver.lookups_pending() > 0 && ioc.run_one_for(10s) > 0) {
    }
  }
};

std::vector<net::ip::address> addrs(std::initializer_list<const char*> list) {
  std::vector<net::ip::address> out;
  for (auto const* a : list) out.push_back(net::ip::make_address(a));
  return out;
}

// Issue 50: a worker that has not asked for a name yet still passes an ejected address over:
// its connect asks and tries that address last. It said "no other address" before, so a
// worker's first call went to the ejected address (Grpc.ARetryGoesToTheNamesOtherAddress...
// failed when the calls before it had all landed on the other worker).
TEST(Resolver, ANameNotAskedYetMayOfferAnotherAddressAndAnAnswerSaysWhetherItDoes) {
  fixture f;
  f.dns.set("svc.test", {{"127.0.0.2", "127.0.0.3"}, 60});
  EXPECT_TRUE(f.resolver.offers_another("svc.test", addrs({"127.0.0.2"})));
  ASSERT_EQ(f.resolve("svc.test").addresses.size(), 2u);
  EXPECT_TRUE(f.resolver.offers_another("svc.test", addrs({"127.0.0.2"})));
  EXPECT_FALSE(f.resolver.offers_another("svc.test", addrs({"127.0.0.2", "127.0.0.3"})));
}

TEST(Resolver, ANameIsAskedOnceAndKeptForItsTtl) {
  fixture f;
  f.dns.set("svc.test", {{"127.0.0.2", "fd00::2"}, 30});
  auto const r = f.resolve("svc.test");
  EXPECT_EQ(r.addresses, addrs({"fd00::2", "127.0.0.2"})) << r.message;
  auto const asked = f.dns.queries("svc.test");
  EXPECT_GE(asked, 2u);  // A and AAAA, together
  f.now += 26s;
  EXPECT_EQ(f.resolve("svc.test").addresses, addrs({"fd00::2", "127.0.0.2"}));
  EXPECT_EQ(f.dns.queries("svc.test"), asked);
  EXPECT_EQ(f.resolver.lookups_started(), 1u);
}

TEST(Resolver, PastItsTtlANameIsAskedAgainInTheBackgroundAndItsNewAddressIsUsed) {
  fixture f;
  f.dns.set("svc.test", {{"127.0.0.2"}, 30});
  EXPECT_EQ(f.resolve("svc.test").addresses, addrs({"127.0.0.2"}));
  f.dns.set("svc.test", {{"127.0.0.3"}, 30});
  f.now += 31s;
  // The request is not held up: it gets the answer at hand while the servers are asked.
  EXPECT_EQ(f.resolve("svc.test").addresses, addrs({"127.0.0.2"}));
  EXPECT_EQ(f.resolver.lookups_started(), 2u);
  f.settle();
  EXPECT_EQ(f.resolve("svc.test").addresses, addrs({"127.0.0.3"}));
  EXPECT_EQ(f.resolver.lookups_started(), 2u);
}

TEST(Resolver, InTheLastTenthOfItsTtlANameIsRefreshedBeforeItRunsOut) {
  fixture f;
  f.dns.set("svc.test", {{"127.0.0.2"}, 30});
  ASSERT_EQ(f.resolve("svc.test").addresses, addrs({"127.0.0.2"}));
  f.dns.set("svc.test", {{"127.0.0.3"}, 30});
  f.now += 26s;  // not yet
  EXPECT_EQ(f.resolve("svc.test").addresses, addrs({"127.0.0.2"}));
  EXPECT_EQ(f.resolver.lookups_started(), 1u);
  f.now += 2s;  // 28 s of 30: asked in the background
  EXPECT_EQ(f.resolve("svc.test").addresses, addrs({"127.0.0.2"}));
  f.settle();
  f.now += 3s;  // past the first TTL, within the refreshed one
  EXPECT_EQ(f.resolve("svc.test").addresses, addrs({"127.0.0.3"}));
  EXPECT_EQ(f.resolver.lookups_started(), 2u);
}

TEST(Resolver, ConcurrentRequestsForANameWaitForOneLookup) {
  fixture f;
  f.dns.set("svc.test", {{"127.0.0.2"}, 30});
  auto const all = f.resolve_all({"svc.test", "svc.test", "svc.test", "svc.test", "svc.test"});
  for (auto const& r : all) EXPECT_EQ(r.addresses, addrs({"127.0.0.2"})) << r.message;
  EXPECT_EQ(f.resolver.lookups_started(), 1u);
}

TEST(Resolver, ANameThatDoesNotExistFailsAndIsNotAskedAgainWithinMinTtl) {
  fixture f;
  auto const r = f.resolve("nope.test");
  EXPECT_TRUE(r.addresses.empty());
  EXPECT_EQ(r.error, rebound::http::error_type::dns_failure);
  EXPECT_NE(r.message.find("no such name"), std::string::npos) << r.message;
  EXPECT_TRUE(f.resolve("nope.test").addresses.empty());
  EXPECT_EQ(f.resolver.lookups_started(), 1u);
  f.now += 6s;  // min_ttl (5s) later, it is asked again
  f.dns.set("nope.test", {{"127.0.0.4"}, 30});
  EXPECT_EQ(f.resolve("nope.test").addresses, addrs({"127.0.0.4"}));
}

TEST(Resolver, AStalledServerDoesNotDelayANameItAnsweredBefore) {
  fixture f;
  f.dns.set("svc.test", {{"127.0.0.2"}, 60});
  ASSERT_EQ(f.resolve("svc.test").addresses, addrs({"127.0.0.2"}));
  f.dns.stall(true);
  f.now += 30s;
  EXPECT_EQ(f.resolve("svc.test").addresses, addrs({"127.0.0.2"}));
  EXPECT_EQ(f.resolver.lookups_started(), 1u);  // nothing was asked, so nothing waited
  f.now += 40s;  // past the TTL: asked in the background, the request answered at once
  EXPECT_EQ(f.resolve("svc.test").addresses, addrs({"127.0.0.2"}));
  EXPECT_EQ(f.resolver.lookups_started(), 2u);
  EXPECT_EQ(f.resolver.lookups_pending(), 1u);  // still unanswered when the request had its answer
}

TEST(Resolver, AFailingServerIsBridgedByTheLastAnswerForStaleForThenTheLookupFails) {
  rebound::config::dns_settings s;
  s.stale_for = 60s;
  fixture f(s);
  f.dns.set("svc.test", {{"127.0.0.2"}, 10});
  ASSERT_EQ(f.resolve("svc.test").addresses, addrs({"127.0.0.2"}));
  f.dns.set("svc.test", {{}, 10, /*SERVFAIL*/ 2});
  f.now += 11s;
  EXPECT_EQ(f.resolve("svc.test").addresses, addrs({"127.0.0.2"}));
  f.settle();  // the background lookup fails: the last answer bridges
  EXPECT_EQ(f.resolver.lookups_started(), 2u);
  f.now += 2s;  // within min_ttl of the failure: the bridge is used without asking
  EXPECT_EQ(f.resolve("svc.test").addresses, addrs({"127.0.0.2"}));
  EXPECT_EQ(f.resolver.lookups_started(), 2u);
  f.now += 60s;  // past stale_for: R-4's DNS failure
  auto const r = f.resolve("svc.test");
  EXPECT_TRUE(r.addresses.empty());
  EXPECT_EQ(r.error, rebound::http::error_type::dns_failure);
}

TEST(Resolver, ALookupWithNoAnswerWithinTheTimeoutFails) {
  rebound::config::dns_settings s;
  s.timeout = 300ms;
  fixture f(s);
  f.dns.stall(true);
  auto const r = f.resolve("svc.test");
  EXPECT_TRUE(r.addresses.empty());
  EXPECT_NE(r.message.find("no answer within 300ms"), std::string::npos) << r.message;
}

}  // namespace
}  // namespace resolver_test
