// The retry engine, black box: which failures are retried, for which methods and with
// which Idempotency-Key, how many times, within which time, how Retry-After
// is honoured, and what the client gets (the last response + Rebound-Attempts, or
// rebound's JSON error with "attempts").
#include "helpers.hpp"

#include <atomic>
#include <ctime>
#include <memory>
#include <regex>
#include <thread>

namespace itest::retry_test {
namespace {

using Clock = std::chrono::steady_clock;

// A `defaults:` block with fast backoffs plus `lines` (each "  key: value\n").
ReboundOptions retry_options(const std::string& lines = {}) {
  ReboundOptions o;
  o.extra = "defaults:\n  backoff: {base: 10ms, cap: 50ms}\n" + lines;
  return o;
}

Script answer(unsigned status, Fields headers = {}, std::optional<std::string> body = std::nullopt) {
  Script s;
  s.status = status;
  s.headers = std::move(headers);
  s.body = std::move(body);
  return s;
}

Script reset_script() {
  Script s;
  s.reset = true;
  return s;
}

Script slow_script(std::chrono::milliseconds d) {
  Script s;
  s.delay = d;  // cut short when the upstream stops at the end of the test
  return s;
}

std::string pattern(std::size_t n, unsigned seed = 11) {
  std::string s(n, '\0');
  unsigned x = seed;
  for (auto& c : s) {
    x = x * 1103515245u + 12345u;
    c = static_cast<char>('a' + (x >> 16) % 26);
  }
  return s;
}

long json_attempts(const std::optional<Response>& r) {
  if (!r) return -1;
  auto json = parse_json(r->body);
  if (!json) return -1;
  auto err = json->get("error");
  if (!err) return -1;
  auto a = err->get("attempts");
  if (!a || a->type != Json::Type::number) return -1;
  return static_cast<long>(a->n);
}

std::string attempts_header(const std::optional<Response>& r) {
  return r ? r->header("Rebound-Attempts").value_or("<none>") : "<no response>";
}

std::string describe(const std::optional<Response>& r) {
  if (!r) return "no response (" + last_exchange_error() + ")";
  return "status " + std::to_string(r->status) + ", Rebound-Attempts: " + attempts_header(r) +
         ", Rebound-Error: " + r->header("Rebound-Error").value_or("<none>") + ", body: " + r->body.substr(0, 300);
}

long ms_between(Clock::time_point a, Clock::time_point b) {
  return static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count());
}

const std::regex& uuid_v4() {
  static const std::regex re("^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$");
  return re;
}

// ---- what is retried ----

TEST(Retry, R4_503IsRetriedUntilSuccess) {
  ScriptedUpstream up;
  up.on_sequence("/flaky", {answer(503), answer(503), answer(200, {}, "fine")});
  ReboundProcess rb(retry_options());
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/flaky"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u) << describe(r);
  EXPECT_EQ(r->body, "fine");
  EXPECT_EQ(attempts_header(r), "3");
  EXPECT_EQ(up.request_count("/flaky"), 3u);
}

TEST(Retry, R4_EveryRetryableStatusIsRetried) {
  ScriptedUpstream up;
  ReboundProcess rb(retry_options());
  for (unsigned code : {408u, 429u, 500u, 502u, 503u, 504u}) {
    SCOPED_TRACE("first answer " + std::to_string(code));
    std::string path = "/s" + std::to_string(code);
    up.on_sequence(path, {answer(code), answer(200, {}, "second")});
    auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), path), 20s);
    ASSERT_TRUE(r) << last_exchange_error();
    EXPECT_EQ(r->status, 200u) << describe(r);
    EXPECT_EQ(r->body, "second");
    EXPECT_EQ(attempts_header(r), "2");
    EXPECT_EQ(up.request_count(path), 2u);
  }
}

TEST(Retry, R4_404IsNotRetried) {
  ScriptedUpstream up;
  up.on_sequence("/missing", {answer(404, {}, "nope"), answer(200)});
  ReboundProcess rb(retry_options());
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/missing"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 404u) << describe(r);
  EXPECT_EQ(r->body, "nope");
  EXPECT_EQ(attempts_header(r), "1");
  EXPECT_EQ(up.request_count("/missing"), 1u);
}

TEST(Retry, R4_FinalStatusesAreNotRetried) {
  ScriptedUpstream up;
  ReboundProcess rb(retry_options());
  for (unsigned code : {200u, 201u, 204u, 301u, 302u, 304u, 400u, 401u, 403u, 404u, 409u, 422u, 501u}) {
    SCOPED_TRACE("answer " + std::to_string(code));
    std::string path = "/f" + std::to_string(code);
    Fields h;
    if (code / 100 == 3) h.emplace_back("Location", "/elsewhere");
    up.on_sequence(path, {answer(code, h), answer(599)});
    auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), path), 20s);
    ASSERT_TRUE(r) << last_exchange_error();
    EXPECT_EQ(r->status, code) << describe(r);
    EXPECT_EQ(attempts_header(r), "1");
    EXPECT_EQ(up.request_count(path), 1u);
  }
}

TEST(Retry, R4_ConnectRefusedIsRetriedThen502WithAttempts) {
  ReboundProcess rb(retry_options("  max_retries: 2\n"));
  RefusingPort const dead;
  std::string authority = dead.authority();
  auto r = raw_exchange(rb.port(), absolute_request("GET", authority, "/x"), 20s);
  EXPECT_TRUE(IsReboundError(r, 502, {"connect_refused"}));
  EXPECT_EQ(json_attempts(r), 3) << describe(r);
}

TEST(Retry, R4_ConnectResetBeforeResponseHeadIsRetried) {
  ScriptedUpstream up;
  up.on_sequence("/rst", {reset_script(), answer(200, {}, "after reset")});
  ReboundProcess rb(retry_options());
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/rst"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u) << describe(r);
  EXPECT_EQ(r->body, "after reset");
  EXPECT_EQ(attempts_header(r), "2");
  EXPECT_EQ(up.request_count("/rst"), 2u);
}

TEST(Retry, R4_DnsFailureIsRetriedExactlyOnceWhateverMaxRetriesSays) {
  ReboundProcess rb(retry_options("  max_retries: 5\n"));
  auto r = raw_exchange(rb.port(), absolute_request("GET", "nonexistent-retry.invalid", "/x"), 30s);
  EXPECT_TRUE(IsReboundError(r, 502, {"dns_failure"}));
  // One retry, whatever max_retries says: a single attempt would mean DNS is never retried.
  EXPECT_EQ(json_attempts(r), 2) << describe(r);
  EXPECT_EQ(attempts_header(r), "2");
}

TEST(Retry, RetryOnNarrowsTheSet) {
  ScriptedUpstream up;
  up.on_sequence("/e500", {answer(500, {}, "broken"), answer(200)});
  up.on_sequence("/e503", {answer(503), answer(200, {}, "recovered")});
  ReboundProcess rb(retry_options("  retry_on: [503]\n"));
  auto r500 = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/e500"), 20s);
  ASSERT_TRUE(r500) << last_exchange_error();
  EXPECT_EQ(r500->status, 500u) << describe(r500);
  EXPECT_EQ(r500->body, "broken");
  EXPECT_EQ(attempts_header(r500), "1");
  EXPECT_EQ(up.request_count("/e500"), 1u);
  auto r503 = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/e503"), 20s);
  ASSERT_TRUE(r503) << last_exchange_error();
  EXPECT_EQ(r503->status, 200u) << describe(r503);
  EXPECT_EQ(attempts_header(r503), "2");
  EXPECT_EQ(up.request_count("/e503"), 2u);
}

// ---- how many attempts ----

TEST(Retry, R2_MaxRetriesBoundsAttempts) {
  ScriptedUpstream up;
  up.on("/down", answer(503, {}, "still down"));
  ReboundProcess rb(retry_options("  max_retries: 2\n"));
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/down"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 503u) << describe(r);
  EXPECT_EQ(r->body, "still down");
  EXPECT_EQ(attempts_header(r), "3");
  EXPECT_EQ(up.request_count("/down"), 3u);
}

TEST(Retry, R2_SyncDefaultIsThreeRetries) {
  ScriptedUpstream up;
  up.on("/down", answer(503));
  ReboundProcess rb(retry_options());
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/down"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 503u) << describe(r);
  EXPECT_EQ(attempts_header(r), "4");
  EXPECT_EQ(up.request_count("/down"), 4u);
}

TEST(Retry, R2_DependencySettingOverridesDefaults) {
  ScriptedUpstream up;
  up.on("/down", answer(503));
  auto o = retry_options("  max_retries: 3\n");
  o.extra += "dependencies:\n  svc:\n    hosts: [\"" + up.authority() + "\"]\n    max_retries: 1\n";
  ReboundProcess rb(o);
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/down"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 503u) << describe(r);
  EXPECT_EQ(attempts_header(r), "2");
  EXPECT_EQ(up.request_count("/down"), 2u);
}

// ---- timeouts ----

TEST(Retry, R3_AttemptTimeoutIsRetried) {
  ScriptedUpstream up;
  up.on_sequence("/slow-once", {slow_script(10s), answer(200, {}, "quick now")});
  ReboundProcess rb(retry_options("  attempt_timeout: 300ms\n  total_timeout: 10s\n"));
  auto start = Clock::now();
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/slow-once"), 20s);
  auto elapsed = ms_between(start, Clock::now());
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u) << describe(r);
  EXPECT_EQ(r->body, "quick now");
  EXPECT_EQ(attempts_header(r), "2");
  EXPECT_EQ(up.request_count("/slow-once"), 2u);
  EXPECT_GE(elapsed, 250) << "the first attempt should have waited for its attempt_timeout";
  EXPECT_LT(elapsed, 5000);
}

TEST(Retry, R3_TotalTimeoutEndsTheLoop) {
  ScriptedUpstream up;
  up.on("/always-slow", slow_script(30s));
  ReboundProcess rb(retry_options("  max_retries: 5\n  attempt_timeout: 300ms\n  total_timeout: 1s\n"));
  auto start = Clock::now();
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/always-slow"), 20s);
  auto elapsed = ms_between(start, Clock::now());
  EXPECT_TRUE(IsReboundError(r, 504, {"attempt_timeout", "deadline_exceeded"}));
  EXPECT_LT(elapsed, 3000) << "the loop should end at about total_timeout (1s)";
  EXPECT_GE(up.request_count("/always-slow"), 2u) << "several attempts expected within 1s";
  EXPECT_LE(up.request_count("/always-slow"), 5u);
  EXPECT_GE(json_attempts(r), 2) << describe(r);
  EXPECT_EQ(json_attempts(r), static_cast<long>(up.request_count("/always-slow"))) << describe(r);
}

// ---- Retry-After ----

TEST(Retry, R5_RetryAfterBeyondDeadlineFailsAtOnce) {
  ScriptedUpstream up;
  up.on_sequence("/busy", {answer(503, {{"Retry-After", "120"}}, "come back later"), answer(200)});
  ReboundProcess rb(retry_options("  total_timeout: 2s\n"));
  auto start = Clock::now();
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/busy"), 20s);
  auto elapsed = ms_between(start, Clock::now());
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 503u) << describe(r);
  EXPECT_EQ(r->body, "come back later");
  EXPECT_EQ(r->header("Retry-After").value_or("<none>"), "120");
  EXPECT_EQ(attempts_header(r), "1");
  EXPECT_EQ(up.request_count("/busy"), 1u);
  EXPECT_LT(elapsed, 1500) << "should stop at once, not wait out the total_timeout";
}

TEST(Retry, R5_RetryAfterDeltaSecondsIsHonoured) {
  ScriptedUpstream up;
  up.on_sequence("/ra", {answer(503, {{"Retry-After", "1"}}), answer(200, {}, "ready")});
  ReboundProcess rb(retry_options("  total_timeout: 10s\n"));
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/ra"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u) << describe(r);
  EXPECT_EQ(attempts_header(r), "2");
  auto reqs = up.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_GE(ms_between(reqs[0].at, reqs[1].at), 900) << "Retry-After: 1 must delay the retry by about 1 s";
}

TEST(Retry, R5_RetryAfterHttpDateIsHonoured) {
  ScriptedUpstream up;
  // An IMF-fixdate 3 s ahead (whole seconds: the wait is between 2 and 3 s).
  std::time_t when = std::time(nullptr) + 3;
  std::tm gmt{};
  ::gmtime_r(&when, &gmt);
  char date[64];
  std::strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &gmt);
  up.on_sequence("/ra-date", {answer(503, {{"Retry-After", date}}), answer(200, {}, "ready")});
  ReboundProcess rb(retry_options("  total_timeout: 10s\n"));
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/ra-date"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u) << describe(r);
  EXPECT_EQ(attempts_header(r), "2");
  auto reqs = up.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_GE(ms_between(reqs[0].at, reqs[1].at), 1500) << "Retry-After: " << date << " was not honoured";
}

TEST(Retry, R5_RetryAfterZeroStillRetries) {
  ScriptedUpstream up;
  // The wait is max(backoff, Retry-After): Retry-After: 0 retries after the (small) backoff.
  up.on_sequence("/ra0", {answer(503, {{"Retry-After", "0"}}), answer(200)});
  ReboundProcess rb(retry_options("  total_timeout: 10s\n"));
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/ra0"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u) << describe(r);
  EXPECT_EQ(attempts_header(r), "2");
}

// ---- methods and Idempotency-Key ----

TEST(Retry, R6_IdempotentMethodsAreRetried) {
  ScriptedUpstream up;
  ReboundProcess rb(retry_options());
  for (std::string method : {"GET", "HEAD", "OPTIONS", "PUT", "DELETE"}) {
    SCOPED_TRACE(method);
    std::string path = "/m-" + method;
    up.on_sequence(path, {answer(503), answer(200)});
    RawConnection c(rb.port());
    ASSERT_TRUE(c.send(absolute_request(method, up.authority(), path, {}, method == "PUT" ? "data" : "")));
    auto r = c.read_response(20s, method == "HEAD");
    ASSERT_TRUE(r) << c.last_error();
    EXPECT_EQ(r->status, 200u) << describe(r);
    EXPECT_EQ(attempts_header(r), "2");
    EXPECT_EQ(up.request_count(path), 2u);
  }
}

TEST(Retry, R6_PostWithoutKeyGetsOneInjectedKeyReusedOnEveryAttempt) {
  ScriptedUpstream up;
  up.on_sequence("/order", {answer(503), answer(503), answer(201, {}, "created")});
  ReboundProcess rb(retry_options());
  std::string body = "{\"item\":42}";
  auto r = raw_exchange(
      rb.port(), absolute_request("POST", up.authority(), "/order", "Content-Type: application/json\r\n", body), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 201u) << describe(r);
  EXPECT_EQ(attempts_header(r), "3");
  auto reqs = up.requests();
  ASSERT_EQ(reqs.size(), 3u);
  auto first = reqs[0].header("Idempotency-Key").value_or("");
  EXPECT_TRUE(std::regex_match(first, uuid_v4())) << "injected key: '" << first << "'";
  for (auto const& q : reqs) {
    EXPECT_EQ(q.header_count("Idempotency-Key"), 1u);
    EXPECT_EQ(q.header("Idempotency-Key").value_or(""), first);
    EXPECT_EQ(q.method, "POST");
    EXPECT_EQ(q.body, body);
  }
}

TEST(Retry, R6_InjectedKeysDifferBetweenRequests) {
  ScriptedUpstream up;
  up.on("/order", answer(201));
  ReboundProcess rb(retry_options());
  for (int i = 0; i < 2; ++i) {
    auto r = raw_exchange(rb.port(), absolute_request("POST", up.authority(), "/order", {}, "x"), 20s);
    ASSERT_TRUE(r) << last_exchange_error();
    EXPECT_EQ(r->status, 201u) << describe(r);
  }
  auto reqs = up.requests();
  ASSERT_EQ(reqs.size(), 2u);
  auto a = reqs[0].header("Idempotency-Key").value_or("");
  auto b = reqs[1].header("Idempotency-Key").value_or("");
  EXPECT_TRUE(std::regex_match(a, uuid_v4())) << a;
  EXPECT_TRUE(std::regex_match(b, uuid_v4())) << b;
  EXPECT_NE(a, b);
}

TEST(Retry, R6_AppKeyIsPreserved) {
  ScriptedUpstream up;
  up.on_sequence("/pay", {answer(502), answer(503), answer(200, {}, "paid")});
  ReboundProcess rb(retry_options());
  std::string key = "app-Key_0123:ABC";
  auto r = raw_exchange(
      rb.port(), absolute_request("POST", up.authority(), "/pay", "Idempotency-Key: " + key + "\r\n", "amount=10"),
      20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u) << describe(r);
  EXPECT_EQ(attempts_header(r), "3");
  auto reqs = up.requests();
  ASSERT_EQ(reqs.size(), 3u);
  for (auto const& q : reqs) {
    EXPECT_EQ(q.header_count("Idempotency-Key"), 1u);
    EXPECT_EQ(q.header("Idempotency-Key").value_or("<none>"), key);
    EXPECT_EQ(q.body, "amount=10");
  }
}

// R-6's one rule for a valid key (idempotency/key.hpp): the inbound gate always refused a
// key holding a comma (two keys folded into one field) or two key fields; the outbound path
// forwarded both, so an upstream could read either key. Refused before anything is sent.
TEST(Retry, R6_AFoldedOrRepeatedKeyIsRefusedBeforeAnythingIsSent) {
  ScriptedUpstream up;
  up.on("/pay", answer(200));
  ReboundProcess rb(retry_options());
  for (std::string const fields :
       {"Idempotency-Key: k-1, k-2\r\n", "Idempotency-Key: k-1\r\nIdempotency-Key: k-2\r\n"}) {
    SCOPED_TRACE(fields);
    auto r = raw_exchange(rb.port(), absolute_request("POST", up.authority(), "/pay", fields, "amount=10"), 20s);
    ASSERT_TRUE(IsReboundError(r, 400, {"bad_request"}));
  }
  EXPECT_EQ(up.request_count("/pay"), 0u);
}

TEST(Retry, R6_PatchWithAppKeyIsRetried) {
  ScriptedUpstream up;
  up.on_sequence("/doc", {answer(503), answer(200)});
  ReboundProcess rb(retry_options());
  auto r = raw_exchange(
      rb.port(), absolute_request("PATCH", up.authority(), "/doc", "Idempotency-Key: patch-1\r\n", "{\"a\":1}"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u) << describe(r);
  EXPECT_EQ(attempts_header(r), "2");
  auto reqs = up.requests();
  ASSERT_EQ(reqs.size(), 2u);
  for (auto const& q : reqs) EXPECT_EQ(q.header("Idempotency-Key").value_or("<none>"), "patch-1");
}

TEST(Retry, R6_PostWithoutKeyAndInjectOffGoesOutOnce) {
  ScriptedUpstream up;
  up.on("/order", answer(503, {}, "unavailable"));
  ReboundProcess rb(retry_options("  idempotency: {inject: false}\n"));
  auto r = raw_exchange(rb.port(), absolute_request("POST", up.authority(), "/order", {}, "payload"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 503u) << describe(r);
  EXPECT_EQ(r->body, "unavailable");
  EXPECT_EQ(attempts_header(r), "1");
  auto reqs = up.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].header_count("Idempotency-Key"), 0u) << "inject: false must not add a key";
  EXPECT_EQ(reqs[0].body, "payload");
}

TEST(Retry, R6_PostWithAppKeyAndInjectOffIsRetried) {
  ScriptedUpstream up;
  up.on_sequence("/order", {answer(503), answer(200)});
  ReboundProcess rb(retry_options("  idempotency: {inject: false}\n"));
  auto r =
      raw_exchange(rb.port(), absolute_request("POST", up.authority(), "/order", "Idempotency-Key: k-1\r\n", "p"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u) << describe(r);
  EXPECT_EQ(attempts_header(r), "2");
  EXPECT_EQ(up.request_count("/order"), 2u);
}

TEST(Retry, R6_KeyOver64CharactersIsRefusedBeforeSending) {
  ScriptedUpstream up;
  ReboundProcess rb(retry_options());
  std::string key(65, 'k');
  auto r = raw_exchange(
      rb.port(), absolute_request("POST", up.authority(), "/order", "Idempotency-Key: " + key + "\r\n", "payload"),
      20s);
  EXPECT_TRUE(IsReboundError(r, 400, {"bad_request"}));
  EXPECT_EQ(up.request_count(), 0u);
  EXPECT_EQ(up.connections(), 0u);
}

TEST(Retry, R6_KeyOf64CharactersIsAccepted) {
  ScriptedUpstream up;
  ReboundProcess rb(retry_options());
  std::string key(64, 'k');
  auto r = raw_exchange(
      rb.port(), absolute_request("POST", up.authority(), "/order", "Idempotency-Key: " + key + "\r\n", "payload"),
      20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u) << describe(r);
  auto reqs = up.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].header("Idempotency-Key").value_or("<none>"), key);
}

// ---- bodies ----

TEST(Retry, BodyWithinMaxRetryBodyIsResentIdentically) {
  ScriptedUpstream up;
  up.on_sequence("/put", {answer(503), answer(500), answer(200, {}, "stored")});
  ReboundProcess rb(retry_options());
  std::string body = pattern(200 * 1024);
  auto r = raw_exchange(rb.port(), absolute_request("PUT", up.authority(), "/put", {}, body), 30s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u) << describe(r);
  EXPECT_EQ(attempts_header(r), "3");
  auto reqs = up.requests();
  ASSERT_EQ(reqs.size(), 3u);
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_TRUE(reqs[i].complete) << "attempt " << i + 1;
    EXPECT_EQ(reqs[i].body.size(), body.size()) << "attempt " << i + 1;
    EXPECT_TRUE(reqs[i].body == body) << "attempt " << i + 1 << " got a different body";
  }
}

TEST(Retry, LargeBodyIsForwardedOnceNotRetried) {
  ScriptedUpstream up;
  up.on("/big", answer(503, {}, "busy"));
  auto o = retry_options("  max_retry_body: 1MiB\n");
  o.max_request_body = "0";
  ReboundProcess rb(o);
  std::string body = pattern(10 * 1024 * 1024, 3);
  auto r = raw_exchange(rb.port(), absolute_request("PUT", up.authority(), "/big", {}, body), 60s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 503u) << describe(r);
  EXPECT_EQ(r->body, "busy");
  EXPECT_EQ(attempts_header(r), "1");
  auto reqs = up.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].body.size(), body.size());
  EXPECT_TRUE(reqs[0].body == body);
}

TEST(Retry, R6_ChunkedBodyWithinMaxRetryBodyIsKeptAndResent) {
  ScriptedUpstream up;
  up.on_sequence("/chunked", {answer(503), answer(200, {}, "stored")});
  ReboundProcess rb(retry_options());
  std::string body = pattern(100 * 1024, 5);
  auto r = raw_exchange(rb.port(),
                        chunked_request("POST", up.authority(), "/chunked", body, "Idempotency-Key: k-77\r\n"), 30s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u) << describe(r);
  EXPECT_EQ(attempts_header(r), "2");
  auto reqs = up.requests();
  ASSERT_EQ(reqs.size(), 2u);
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    SCOPED_TRACE("attempt " + std::to_string(i + 1));
    EXPECT_TRUE(reqs[i].body == body) << "got " << reqs[i].body.size() << " bytes";
    // Kept whole, the body goes out with its length: no chunked framing to re-send.
    EXPECT_EQ(reqs[i].header("Content-Length").value_or("<none>"), std::to_string(body.size()));
    EXPECT_FALSE(reqs[i].header("Transfer-Encoding"));
    EXPECT_EQ(reqs[i].header("Idempotency-Key").value_or("<none>"), "k-77");
  }
}

TEST(Retry, ChunkedBodyOverMaxRetryBodyStreamsThroughOnce) {
  ScriptedUpstream up;
  up.on("/chunked-big", answer(503, {}, "busy"));
  ReboundProcess rb(retry_options("  max_retry_body: 64KiB\n"));
  std::string body = pattern(1024 * 1024, 9);
  auto r = raw_exchange(rb.port(), chunked_request("PUT", up.authority(), "/chunked-big", body), 30s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 503u) << describe(r);
  EXPECT_EQ(r->body, "busy");
  EXPECT_EQ(attempts_header(r), "1");
  auto reqs = up.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_TRUE(reqs[0].complete);
  EXPECT_TRUE(reqs[0].body == body) << "got " << reqs[0].body.size() << " of " << body.size() << " bytes";
  EXPECT_TRUE(rb.wait_for_log("chunked body larger than max_retry_body"));
}

// ---- cancellation ----

TEST(Retry, ClientHangingUpDuringBackoffCancelsTheRetry) {
  ScriptedUpstream up;
  up.on("/down", answer(503));
  // Decorrelated jitter waits at least `base` before the first retry: 5 s, far longer than
  // the client stays.
  ReboundOptions o;
  o.extra = "defaults:\n  backoff: {base: 5s, cap: 10s, jitter: decorrelated}\n";
  ReboundProcess rb(o);
  {
    RawConnection c(rb.port());
    ASSERT_TRUE(c.send(absolute_request("GET", up.authority(), "/down")));
    ASSERT_TRUE(up.wait_for_requests(1));
    ASSERT_TRUE(rb.wait_for_log("\"retry_attempt\"")) << "the loop should be waiting to retry";
  }  // the client hangs up
  ASSERT_TRUE(rb.wait_for_log("\"retry_cancelled\"")) << rb.stdout_text();
  EXPECT_EQ(up.request_count("/down"), 1u);
  // The worker is free again: the next request is served at once.
  up.on("/up", answer(200, {}, "fine"));
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/up"), 10s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u);
}

TEST(Retry, PipelinedRequestDoesNotCancelTheBackoff) {
  ScriptedUpstream up;
  up.on_sequence("/once-503", {answer(503), answer(200, {}, "first")});
  up.on("/second", answer(200, {}, "second"));
  ReboundProcess rb(retry_options());
  RawConnection c(rb.port());
  ASSERT_TRUE(c.send(absolute_request("GET", up.authority(), "/once-503") +
                     absolute_request("GET", up.authority(), "/second")));
  auto r1 = c.read_response(10s);
  ASSERT_TRUE(r1) << c.last_error();
  EXPECT_EQ(r1->body, "first");
  EXPECT_EQ(attempts_header(r1), "2");
  auto r2 = c.read_response(10s);
  ASSERT_TRUE(r2) << c.last_error();
  EXPECT_EQ(r2->body, "second");
}

// ---- a response cut mid-body ----

TEST(Retry, ResetMidResponseIsNotRetried) {
  auto hits = std::make_shared<std::atomic<int>>(0);
  TcpServer up([hits](Conn& conn, TcpServer& server) {
    std::string got;
    while (got.find("\r\n\r\n") == std::string::npos) {
      std::string more = conn.read_some();
      if (more.empty()) return;
      got += more;
    }
    ++*hits;
    conn.write_all("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + std::string(100, 'p'));
    server.sleep_for(300ms);  // let rebound pass the head on before the reset
    conn.reset();
  });
  ReboundProcess rb(retry_options());
  RawConnection c(rb.port());
  ASSERT_TRUE(c.send(absolute_request("GET", up.authority(), "/cut")));
  bool complete = false;
  std::string got = c.read_until_eof(10s, &complete);
  EXPECT_TRUE(complete) << "the client connection should be closed after the cut response; got: " << got.substr(0, 200);
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << "the head should have reached the client; got: " << got.substr(0, 200);
  EXPECT_LT(got.size(), std::string("HTTP/1.1 200 OK\r\n").size() + 1000 + 200) << "no second response expected";
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(hits->load(), 1) << "a response cut mid-body must not be retried";
  EXPECT_EQ(up.connections(), 1u);
}

// ---- config refusals and approval ----

BadConfigRun run_defaults(const std::string& lines) {
  std::string yaml = "listen: 127.0.0.1:" + std::to_string(free_port()) +
                     "\nadmin: 127.0.0.1:" + std::to_string(free_port()) + "\ndefaults:\n" + lines;
  return run_with_config(yaml);
}

TEST(Retry, R1_EqualOrNoJitterIsRefused) {
  for (std::string j : {"equal", "none"}) {
    auto run = run_defaults("  backoff: {base: 10ms, cap: 50ms, jitter: " + j + "}\n");
    EXPECT_EQ(run.exit_code, 2) << "jitter: " << j << "\n" << run.err;
  }
  auto ok = run_defaults("  backoff: {base: 10ms, cap: 50ms, jitter: decorrelated}\n  max_retries: 0\n");
  EXPECT_EQ(ok.exit_code, 2) << "max_retries 0 is outside the sync range 1..5\n" << ok.err;
}

TEST(Retry, R4_FinalStatusInRetryOnIsRefused) {
  auto run = run_defaults("  retry_on: [503, 404]\n");
  EXPECT_EQ(run.exit_code, 2) << run.err;
}

TEST(Retry, R2_MaxRetriesAboveSyncRangeNeedsApproval) {
  auto refused = run_defaults("  max_retries: 6\n");
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  ScriptedUpstream up;
  up.on("/down", answer(503));
  ReboundProcess rb(retry_options("  max_retries: 6\n  approval: IAB-1\n"));
  auto r = raw_exchange(rb.port(), absolute_request("GET", up.authority(), "/down"), 20s);
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 503u) << describe(r);
  EXPECT_EQ(attempts_header(r), "7");
  EXPECT_EQ(up.request_count("/down"), 7u);
}

TEST(Retry, R3_SyncTotalTimeoutAbove30sIsRefused) {
  auto run = run_defaults("  total_timeout: 31s\n");
  EXPECT_EQ(run.exit_code, 2) << run.err;
}

}  // namespace
}  // namespace itest::retry_test
