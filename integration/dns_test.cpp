// Issue 50 end to end: the real binary resolves upstream names with its own DNS client
// against a DNS server in this process (integration/dns_server.hpp), and connects to hosts on
// other loopback addresses (127.0.0.2, 127.0.0.3) the way it would to a name's hosts.
#include "async_helpers.hpp"
#include "dns_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <optional>
#include <thread>

namespace itest::dns_test {
namespace {

ReboundOptions resolving_with(const DnsServer& dns, const std::string& dns_keys, const std::string& policy = {}) {
  ReboundOptions o;
  o.workers = 1;  // one worker, one cache: what a test asks next finds what the last one left
  o.extra = "dns:\n  servers: [\"" + dns.address() + "\"]\n" + dns_keys +
            "defaults:\n  backoff: {base: 5ms, cap: 20ms}\n" + policy;
  return o;
}

std::string get(const std::string& authority, const std::string& path = "/") {
  return absolute_request("GET", authority, path);
}

/// An answer after which the upstream closes: each request opens a connection, so each asks
/// for the name's addresses (a pooled connection would need none).
Script closing() {
  Script s;
  s.close_after = true;
  return s;
}

std::optional<Response> ask(ReboundProcess& rb, const std::string& request) {
  RawConnection c(rb.port());
  if (!c.send(request)) return std::nullopt;
  return c.read_response();
}

/** A listener whose accept queue is full: a SYN to it is dropped, so a connect hangs as it
    does to a host that is down behind a firewall (a blackhole), not refused at once. */
struct blackhole {
  int listener = -1, filler = -1;
  blackhole(const std::string& address, std::uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    ::inet_pton(AF_INET, address.c_str(), &a.sin_addr);
    listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listener, 0) != 0)
      throw std::runtime_error("blackhole: cannot listen on " + address);
    filler = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(filler, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
      throw std::runtime_error("blackhole: cannot fill the queue");
  }
  ~blackhole() {
    ::close(filler);
    ::close(listener);
  }
};

/// An HTTP server on [::1]:port that answers every connection `body` and closes; none when
/// this machine has no IPv6 loopback.
struct ipv6_host {
  int listener = -1;
  std::atomic<bool> stopping{false};
  std::atomic<int> served{0};
  std::thread thread;
  ipv6_host(std::uint16_t port, std::string body) {
    listener = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(port);
    a.sin6_addr = in6addr_loopback;
    if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listener, 16) != 0) {
      if (listener >= 0) ::close(listener);
      listener = -1;
      return;
    }
    thread = std::thread([this, body] {
      while (!stopping) {
        pollfd p{listener, POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0) continue;
        int const fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) continue;
        char buf[4096];
        (void)::recv(fd, buf, sizeof buf, 0);  // the request head (small, one segment on loopback)
        auto const answer = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                            "\r\nConnection: close\r\n\r\n" + body;
        (void)::send(fd, answer.data(), answer.size(), MSG_NOSIGNAL);
        ::close(fd);
        ++served;
      }
    });
  }
  bool listening() const { return listener >= 0; }
  ~ipv6_host() {
    stopping = true;
    if (thread.joinable()) thread.join();
    if (listener >= 0) ::close(listener);
  }
};

}  // namespace

/** svc.test with two addresses: 127.0.0.2 answers every request 503, 127.0.0.3 answers 200
    "the other host" and closes, so only the failing host's connection is pooled between requests. */
struct failing_and_healthy {
  DnsServer dns;
  ScriptedUpstream failing{"127.0.0.2", 0};
  ScriptedUpstream healthy{"127.0.0.3", failing.port()};
  failing_and_healthy() {
    Script unavailable;
    unavailable.status = 503;
    failing.on("/", unavailable);
    Script fine;
    fine.body = "the other host";
    fine.close_after = true;
    healthy.on("/", fine);
    dns.set("svc.test", {{"127.0.0.2", "127.0.0.3"}, 60});
  }
};

TEST(Dns, ANameIsResolvedByTheConfiguredServerAndAnUnknownOneFailsAsR4Says) {
  DnsServer dns;
  ScriptedUpstream up("127.0.0.2", 0);
  up.on("/", closing());
  dns.set("svc.test", {{"127.0.0.2"}, 60});
  ReboundProcess rb(resolving_with(dns, ""));
  auto const port = std::to_string(up.port());
  for (int i = 0; i < 3; ++i) {
    auto const r = ask(rb, get("svc.test:" + port));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200u) << r->body;
  }
  EXPECT_EQ(up.connections(), 3u);
  EXPECT_LE(dns.queries("svc.test"), 2u);  // one lookup (A and AAAA), kept for its TTL

  auto const r = ask(rb, get("nope.test:" + port));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 502u);
  EXPECT_NE(r->body.find("\"dns_failure\""), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("no such name"), std::string::npos) << r->body;
  EXPECT_EQ(r->header("Rebound-Attempts"), "2");  // R-4: a DNS failure is retried once
  HttpClient admin(rb.admin_port());
  auto const metrics = admin.get("/metrics").body;
  EXPECT_NE(series_line(metrics, "dns_lookups_total", {"result=\"answered\""}), "") << metrics;
  EXPECT_NE(series_line(metrics, "dns_lookups_total", {"result=\"absent\""}), "") << metrics;
}

TEST(Dns, PastItsTtlANameIsAskedAgainInTheBackgroundAndItsNewAddressServes) {
  DnsServer dns;
  ScriptedUpstream old_host("127.0.0.2", 0);
  auto at_old = closing();
  at_old.body = "old host";
  old_host.on("/", at_old);
  auto const port = old_host.port();
  ScriptedUpstream new_host("127.0.0.3", port);
  auto at_new = closing();
  at_new.body = "new host";
  new_host.on("/", at_new);
  dns.set("moved.test", {{"127.0.0.2"}, 60});
  ReboundProcess rb(resolving_with(dns, "  min_ttl: 0s\n  max_ttl: 1s\n"));  // the 60 s TTL held to 1 s
  auto const target = get("moved.test:" + std::to_string(port));
  auto const r1 = ask(rb, target);
  ASSERT_TRUE(r1);
  EXPECT_EQ(r1->body, "old host");
  dns.set("moved.test", {{"127.0.0.3"}, 60});  // the service moves
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // the held TTL runs out
  // The first request past the TTL is not held up by the lookup: it goes where the name
  // pointed, and the servers are asked meanwhile.
  auto const r2 = ask(rb, target);
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->body, "old host");
  HttpClient admin(rb.admin_port());
  bool asked = false;
  for (int i = 0; i < 200 && !asked; ++i) {
    asked = series_line(admin.get("/metrics").body, "dns_lookups_total", {"result=\"answered\""}).ends_with(" 2");
    if (!asked) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(asked) << "the background lookup never settled";
  auto const r3 = ask(rb, target);
  ASSERT_TRUE(r3);
  EXPECT_EQ(r3->body, "new host");
}

TEST(Dns, ABlackholedFirstAddressCostsTheStaggerNotTheAttempt) {
  DnsServer dns;
  ScriptedUpstream live("127.0.0.2", 0);
  live.on("/", Script{});
  blackhole dead("127.0.0.3", live.port());
  dns.set("svc.test", {{"127.0.0.3", "127.0.0.2"}, 60});  // the dead one first
  // Without Happy Eyeballs the first attempt would wait out its 2 s on 127.0.0.3 and the
  // retry would try 127.0.0.3 first again: every attempt would time out.
  ReboundProcess rb(resolving_with(dns, "", "  attempt_timeout: 2s\n  max_retries: 1\n"));
  auto const r = ask(rb, get("svc.test:" + std::to_string(live.port())));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200u) << r->body;
  EXPECT_EQ(r->header("Rebound-Attempts").value_or("1"), "1");
  EXPECT_EQ(live.request_count(), 1u);
}

TEST(Dns, IPv6IsTriedFirstAndARefusedAddressGivesWayAtOnce) {
  DnsServer dns;
  ScriptedUpstream v4("127.0.0.2", 0);
  Script answer;
  answer.body = "v4";
  v4.on("/", answer);
  std::optional<ipv6_host> v6;
  v6.emplace(v4.port(), "v6");
  if (!v6->listening()) GTEST_SKIP() << "no IPv6 loopback on this machine";
  dns.set("svc.test", {{"127.0.0.2", "::1"}, 60});
  ReboundProcess rb(resolving_with(dns, "", "  max_retries: 1\n"));
  auto const target = get("svc.test:" + std::to_string(v4.port()));
  auto const first = ask(rb, target);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 200u) << first->body;
  EXPECT_EQ(first->body, "v6");  // RFC 8305: IPv6 first, whatever order the answer had
  // The IPv6 host goes away: its address refuses, and the next address is tried at once,
  // within the one attempt.
  v6.reset();
  auto const second = ask(rb, target);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->status, 200u) << second->body;
  EXPECT_EQ(second->body, "v4");
  EXPECT_EQ(second->header("Rebound-Attempts").value_or("1"), "1");
}

TEST(Dns, ARetryAfterA503GoesToTheNamesOtherAddress) {
  failing_and_healthy hosts;
  auto& [dns, failing, healthy] = hosts;
  ReboundProcess rb(resolving_with(dns, "", "  max_retries: 2\n"));
  auto const target = get("svc.test:" + std::to_string(failing.port()));
  for (int i = 0; i < 3; ++i) {
    auto const r = ask(rb, target);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200u) << r->body;
    EXPECT_EQ(r->body, "the other host");
    // Every request starts at the first address (on the pooled connection there, after the
    // first request) and its retry leaves it for the address it has not tried, passing over
    // the pooled connection to the one it has.
    EXPECT_EQ(r->header("Rebound-Attempts"), "2");
  }
  EXPECT_EQ(failing.request_count(), 3u);
  EXPECT_EQ(healthy.request_count(), 3u);
  EXPECT_TRUE(rb.wait_for_log("\"address\":\"127.0.0.2\""));
}

TEST(Dns, AHedgeGoesToAnotherAddressThanTheCopyItHedges) {
  DnsServer dns;
  ScriptedUpstream slow("127.0.0.2", 0);
  Script late;
  late.delay = std::chrono::milliseconds(800);
  late.body = "slow host";
  slow.on("/", late);
  ScriptedUpstream fast("127.0.0.3", slow.port());
  Script quick;
  quick.body = "fast host";
  fast.on("/", quick);
  dns.set("svc.test", {{"127.0.0.2", "127.0.0.3"}, 60});
  ReboundProcess rb(resolving_with(dns, "", "  hedge: {after: 50ms, max: 1}\n"));
  auto const r = ask(rb, get("svc.test:" + std::to_string(slow.port())));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200u) << r->body;
  EXPECT_EQ(r->body, "fast host");  // the hedge did not join the first copy at the slow host
  EXPECT_EQ(slow.request_count(), 1u);
  EXPECT_EQ(fast.request_count(), 1u);
}

TEST(Dns, AnAddressThatKeepsFailingIsEjectedAndComesBack) {
  failing_and_healthy hosts;
  auto& [dns, failing, healthy] = hosts;
  ReboundProcess rb(resolving_with(
      dns, "", "  max_retries: 2\n  outlier_detection: {consecutive_failures: 3, base_ejection: 1s, max_ejection: 2s}\n"));
  auto const target = get("svc.test:" + std::to_string(failing.port()));
  auto const attempts = [](const Response& r) { return r.header("Rebound-Attempts").value_or("1"); };
  for (int i = 0; i < 3; ++i) {  // each fails once at 127.0.0.2, then succeeds at 127.0.0.3
    auto const r = ask(rb, target);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200u) << r->body;
    EXPECT_EQ(attempts(*r), "2");
  }
  EXPECT_TRUE(rb.wait_for_log(R"("address_ejected")"));
  auto const ejection_line = rb.stdout_text();
  EXPECT_NE(ejection_line.find(R"("address":"127.0.0.2","consecutive_failures":3,"ejections":1,"ejected_for_ms":1000)"),
            std::string::npos)
      << ejection_line;
  HttpClient admin(rb.admin_port());
  auto const deps = admin.get("/dependencies").body;
  EXPECT_NE(deps.find(R"("ejected_addresses":[{"address":"127.0.0.2","ejections":1,"remaining_ms":)"), std::string::npos)
      << deps;
  auto const metrics = admin.get("/metrics").body;
  auto const series = metrics.find("\nupstream_address_ejections_total{");
  ASSERT_NE(series, std::string::npos) << metrics;
  auto const line = metrics.substr(series + 1, metrics.find('\n', series + 1) - series - 1);
  EXPECT_NE(line.find(R"(dependency="svc.test:)"), std::string::npos) << line;
  EXPECT_EQ(line.substr(line.rfind(' ') + 1), "1") << line;
  // Ejected, it is passed over: the requests go straight to the other address, the pooled
  // connection to the ejected one left where it is.
  for (int i = 0; i < 3; ++i) {
    auto const r = ask(rb, target);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200u) << r->body;
    EXPECT_EQ(attempts(*r), "1");
  }
  EXPECT_EQ(failing.request_count(), 3u);
  // A second later it is back, and its next requests find it failing again.
  auto const back_by = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (admin.get("/dependencies").body.find(R"("ejected_addresses":[])") == std::string::npos &&
         std::chrono::steady_clock::now() < back_by)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto const back = ask(rb, target);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->status, 200u);
  EXPECT_EQ(attempts(*back), "2");
  EXPECT_EQ(failing.request_count(), 4u);
  for (int i = 0; i < 2; ++i) ask(rb, target);
  EXPECT_TRUE(rb.wait_for_log(R"("ejections":2,"ejected_for_ms":2000)"));  // the second lasts twice as long
}

TEST(Dns, AnAddressThatRefusesConnectionsIsEjectedTooAndTheBreakerStaysClosed) {
  DnsServer dns;
  ScriptedUpstream healthy("127.0.0.3", 0);
  healthy.on("/", closing());  // each request connects: each tries the refusing address first
  dns.set("svc.test", {{"127.0.0.4", "127.0.0.3"}, 60});  // nothing listens on 127.0.0.4
  ReboundProcess rb(resolving_with(dns, "", "  outlier_detection: {consecutive_failures: 2}\n"));
  auto const target = get("svc.test:" + std::to_string(healthy.port()));
  for (int i = 0; i < 4; ++i) {
    auto const r = ask(rb, target);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200u) << r->body;
    EXPECT_EQ(r->header("Rebound-Attempts").value_or("1"), "1");  // Happy Eyeballs moved on within the attempt
  }
  EXPECT_TRUE(rb.wait_for_log(R"("address_ejected","dependency":"svc.test:)"));
  EXPECT_NE(rb.stdout_text().find(R"("address":"127.0.0.4")"), std::string::npos);
  HttpClient admin(rb.admin_port());
  auto const deps = admin.get("/dependencies").body;
  EXPECT_NE(deps.find(R"("ejected_addresses":[{"address":"127.0.0.4")"), std::string::npos) << deps;
  EXPECT_NE(deps.find(R"("state":"closed")"), std::string::npos) << deps;  // an ejected address is not an open breaker
  EXPECT_EQ(healthy.request_count(), 4u);
}

TEST(Dns, AResolverOutageIsBridgedByTheLastAnswerForStaleForThenFails) {
  DnsServer dns;
  ScriptedUpstream up("127.0.0.2", 0);
  up.on("/", closing());
  dns.set("svc.test", {{"127.0.0.2"}, 1});
  ReboundProcess rb(resolving_with(dns, "  min_ttl: 0s\n  max_ttl: 1s\n  stale_for: 2s\n  timeout: 300ms\n"));
  auto const target = get("svc.test:" + std::to_string(up.port()));
  ASSERT_EQ(ask(rb, target)->status, 200u);
  dns.stall(true);  // the servers stop answering
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  auto const bridged = ask(rb, target);
  ASSERT_TRUE(bridged);
  EXPECT_EQ(bridged->status, 200u) << bridged->body;
  EXPECT_TRUE(rb.wait_for_log("\"dns_stale_answer\""));
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));  // past stale_for
  auto const failed = ask(rb, target);
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->status, 502u);
  EXPECT_NE(failed->body.find("\"dns_failure\""), std::string::npos) << failed->body;
  EXPECT_EQ(failed->header("Rebound-Attempts"), "2");
  auto const log = rb.stdout_text();
  std::size_t said = 0;
  for (auto at = log.find("\"dns_stale_answer\""); at != std::string::npos; at = log.find("\"dns_stale_answer\"", at + 1))
    ++said;
  EXPECT_EQ(said, 1u);  // an outage is logged once per name, not per request
}

}  // namespace itest::dns_test
