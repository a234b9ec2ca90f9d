// Credentials rebound owns (SPEC 5, R-9) through the real binary: an OAuth2 token endpoint
// and a bearer token file, each made sure of before every attempt; the application's own
// Authorization kept, and its expired JWT never retried.
#include "helpers.hpp"

#include <openssl/evp.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <thread>

namespace itest::auth_test {
namespace {

using namespace std::chrono_literals;

/// A scripted OAuth2 token endpoint: numbered tokens ("tok-1", "tok-2", ...) that live
/// `lifetime_s`, or a refusal; every request it gets is kept.
class TokenIssuer {
 public:
  int lifetime_s = 1;
  unsigned status = 200;
  std::string refusal = R"({"error":"invalid_client"})";
  std::chrono::milliseconds delay{0};

  TokenIssuer() : server_([this](Conn& c, TcpServer& s) { serve(c, s); }) {}
  std::uint16_t port() const { return server_.port(); }
  std::size_t issued() const { return issued_.load(); }
  std::vector<std::string> requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  void serve(Conn& c, TcpServer& s) {
    std::string in;
    std::size_t head_end = std::string::npos;
    while ((head_end = in.find("\r\n\r\n")) == std::string::npos) {
      auto more = c.read_some();
      if (more.empty()) return;
      in += more;
    }
    std::size_t length = 0;
    if (auto at = in.find("Content-Length: "); at != std::string::npos) length = std::stoul(in.substr(at + 16));
    while (in.size() < head_end + 4 + length) {
      auto more = c.read_some();
      if (more.empty()) return;
      in += more;
    }
    {
      std::lock_guard lock(mutex_);
      requests_.push_back(in);
    }
    if (delay.count()) s.sleep_for(delay);
    std::string body = status == 200 ? R"({"access_token":"tok-)" + std::to_string(++issued_) +
                                           R"(","token_type":"Bearer","expires_in":)" + std::to_string(lifetime_s) + "}"
                                     : refusal;
    c.write_all("HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: application/json\r\nContent-Length: " +
                std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
  }

  mutable std::mutex mutex_;
  std::vector<std::string> requests_;
  std::atomic<std::size_t> issued_{0};
  TcpServer server_;
};

struct TempFile {
  std::string path;
  explicit TempFile(const std::string& content) {
    char tmpl[] = "/tmp/rebound-auth-XXXXXX";
    int fd = mkstemp(tmpl);
    ::close(fd);
    path = tmpl;
    write(content);
  }
  void write(const std::string& content) const {
    // Renamed into place, as a secret or token rotation does it.
    auto const next = path + ".next";
    std::ofstream(next) << content;
    std::rename(next.c_str(), path.c_str());
  }
  ~TempFile() { std::remove(path.c_str()); }
};

std::string b64url(const std::string& s) {
  std::string out(4 * ((s.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
  out.resize(static_cast<std::size_t>(n));
  while (!out.empty() && out.back() == '=') out.pop_back();
  for (auto& ch : out) ch = ch == '+' ? '-' : ch == '/' ? '_' : ch;
  return out;
}

/// An unsigned JWT whose exp is `from_now` away.
std::string jwt_expiring_in(std::chrono::seconds from_now) {
  auto const exp =
      std::chrono::duration_cast<std::chrono::seconds>((std::chrono::system_clock::now() + from_now).time_since_epoch())
          .count();
  return b64url(R"({"alg":"none"})") + "." + b64url(R"({"sub":"app","exp":)" + std::to_string(exp) + "}") + ".sig";
}

std::string oauth_dependency(const TokenIssuer& issuer, const ScriptedUpstream& up, const TempFile& secret,
                             const std::string& policy = {}) {
  return "log_level: trace\ndependencies:\n  pay:\n    hosts: [pay.internal]\n    origin: http://" + up.authority() +
         "\n    auth:\n      type: oauth2_client_credentials\n      token_url: http://127.0.0.1:" +
         std::to_string(issuer.port()) +
         "/oauth/token\n      client_id: checkout\n      client_secret_file: " + secret.path +
         "\n      scope: payments:write\n" + policy;
}

Script retry_later(int seconds) {
  Script s = respond(503);
  s.headers = {{"Retry-After", std::to_string(seconds)}};
  return s;
}

TEST(Auth, R9_RetryCarriesAFreshToken) {
  TokenIssuer issuer;  // 1-second tokens
  ScriptedUpstream up;
  up.on_sequence("/pay", {retry_later(1), respond(200)});
  TempFile secret("s3cret-value\n");
  ReboundOptions o;
  o.extra = oauth_dependency(issuer, up, secret, "    max_retries: 2\n    backoff: {base: 1ms, cap: 2ms}\n");
  ReboundProcess rb(o);

  auto r = raw_exchange(rb.port(), absolute_request("GET", "pay.internal", "/pay"));
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 200u);
  auto const seen = up.requests();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].header("Authorization").value_or(""), "Bearer tok-1");
  EXPECT_EQ(seen[1].header("Authorization").value_or(""), "Bearer tok-2") << "the retry waited past the token's life";
  auto const calls = issuer.requests();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_NE(calls[0].find("POST /oauth/token HTTP/1.1"), std::string::npos) << calls[0];
  // RFC 6749 2.3.1: HTTP Basic with the client id and secret.
  EXPECT_NE(calls[0].find("Authorization: Basic Y2hlY2tvdXQ6czNjcmV0LXZhbHVl\r\n"), std::string::npos) << calls[0];
  EXPECT_NE(calls[0].find("grant_type=client_credentials&scope=payments%3Awrite"), std::string::npos) << calls[0];
  // R-9: neither the secret nor a token reaches the log, even at trace level.
  auto const log = rb.stdout_text() + rb.stderr_text();
  EXPECT_EQ(log.find("s3cret-value"), std::string::npos);
  EXPECT_EQ(log.find("tok-1"), std::string::npos);
  EXPECT_EQ(log.find("Y2hlY2tvdXQ6"), std::string::npos);
  EXPECT_NE(log.find("\"event\":\"auth_refreshed\""), std::string::npos);
  HttpClient admin(rb.admin_port());
  auto const cfg = admin.get("/config").body;
  EXPECT_EQ(cfg.find("s3cret-value"), std::string::npos);
  EXPECT_NE(cfg.find("\"client_secret_file\":\"" + secret.path + "\""), std::string::npos) << cfg;
}

TEST(Auth, TokenIsReusedWhileFresh) {
  TokenIssuer issuer;
  issuer.lifetime_s = 3600;
  ScriptedUpstream up;
  up.on("/pay", respond(200));
  TempFile secret("s");
  ReboundOptions o;
  o.extra = oauth_dependency(issuer, up, secret);
  ReboundProcess rb(o);
  for (int i = 0; i < 3; ++i) {
    auto r = raw_exchange(rb.port(), absolute_request("GET", "pay.internal", "/pay"));
    ASSERT_TRUE(r) << last_exchange_error();
    EXPECT_EQ(r->status, 200u);
  }
  EXPECT_EQ(issuer.issued(), 1u);
}

TEST(Auth, R9_FailingIssuerGivesAuthRefreshFailedAndSendsNothing) {
  TokenIssuer issuer;
  issuer.status = 401;
  ScriptedUpstream up;
  up.on("/pay", respond(200));
  TempFile secret("s3cret-value");
  ReboundOptions o;
  o.extra = oauth_dependency(issuer, up, secret, "    max_retries: 3\n");
  ReboundProcess rb(o);
  auto r = raw_exchange(rb.port(), absolute_request("GET", "pay.internal", "/pay"));
  ASSERT_TRUE(IsReboundError(r, 502, {"auth_refresh_failed"}));
  EXPECT_NE(r->body.find("invalid_client"), std::string::npos) << r->body;
  EXPECT_EQ(up.request_count(), 0u) << "never sent without a credential";
  EXPECT_EQ(issuer.requests().size(), 1u) << "auth_refresh_failed is final (R-4)";
  ASSERT_TRUE(rb.wait_for_log("\"event\":\"auth_refresh_failed\""));
  EXPECT_NE(rb.stdout_text().find(R"("level":"error","event":"auth_refresh_failed")"), std::string::npos);
  EXPECT_EQ(rb.stdout_text().find("s3cret-value"), std::string::npos);
}

TEST(Auth, ConcurrentRequestsShareOneRefresh) {
  TokenIssuer issuer;
  issuer.lifetime_s = 3600;
  issuer.delay = 300ms;
  ScriptedUpstream up;
  up.on("/pay", respond(200));
  TempFile secret("s");
  ReboundOptions o;
  o.extra = oauth_dependency(issuer, up, secret);
  ReboundProcess rb(o);
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int i = 0; i < 6; ++i)
    clients.emplace_back([&] {
      auto r = raw_exchange(rb.port(), absolute_request("GET", "pay.internal", "/pay"));
      if (r && r->status == 200) ++ok;
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok.load(), 6);
  EXPECT_EQ(issuer.requests().size(), 1u) << "one refresh at a time per dependency; the others waited for it";
  for (auto const& req : up.requests()) EXPECT_EQ(req.header("Authorization").value_or(""), "Bearer tok-1");
}

TEST(Auth, ApplicationsOwnAuthorizationIsKept) {
  TokenIssuer issuer;
  ScriptedUpstream up;
  up.on("/pay", respond(200));
  TempFile secret("s");
  ReboundOptions o;
  o.extra = oauth_dependency(issuer, up, secret);
  ReboundProcess rb(o);
  auto r =
      raw_exchange(rb.port(), absolute_request("GET", "pay.internal", "/pay", "Authorization: Bearer app-own\r\n"));
  ASSERT_TRUE(r) << last_exchange_error();
  ASSERT_EQ(up.request_count(), 1u);
  EXPECT_EQ(up.requests()[0].header("Authorization").value_or(""), "Bearer app-own");
  EXPECT_EQ(issuer.requests().size(), 0u);
}

TEST(Auth, R9_ExpiredApplicationJwtIsNotRetried) {
  ScriptedUpstream up;
  up.on("/soon", retry_later(2));
  up.on_sequence("/later", {retry_later(2), respond(200)});
  ReboundOptions o;
  o.extra = "dependencies:\n  pay:\n    hosts: [pay.internal]\n    origin: http://" + up.authority() +
            "\n    max_retries: 2\n    backoff: {base: 1ms, cap: 2ms}\n";
  ReboundProcess rb(o);
  // Expires before the Retry-After is over: the 503 comes back, no retry is sent.
  auto r = raw_exchange(rb.port(), absolute_request("GET", "pay.internal", "/soon",
                                                    "Authorization: Bearer " + jwt_expiring_in(1s) + "\r\n"));
  ASSERT_TRUE(r) << last_exchange_error();
  EXPECT_EQ(r->status, 503u);
  EXPECT_EQ(up.request_count("/soon"), 1u);
  EXPECT_TRUE(rb.wait_for_log("\"reason\":\"credential_expired\""));
  // A token valid for longer is retried as usual.
  auto later = raw_exchange(rb.port(), absolute_request("GET", "pay.internal", "/later",
                                                        "Authorization: Bearer " + jwt_expiring_in(1h) + "\r\n"));
  ASSERT_TRUE(later) << last_exchange_error();
  EXPECT_EQ(later->status, 200u);
  EXPECT_EQ(up.request_count("/later"), 2u);
}

TEST(Auth, BearerFileIsReadAgainWhenItChanges) {
  ScriptedUpstream up;
  up.on("/pay", respond(200));
  TempFile token("first-token\n");
  ReboundOptions o;
  o.extra = "dependencies:\n  pay:\n    hosts: [pay.internal]\n    origin: http://" + up.authority() +
            "\n    auth:\n      type: bearer_file\n      path: " + token.path + "\n";
  ReboundProcess rb(o);
  auto r = raw_exchange(rb.port(), absolute_request("GET", "pay.internal", "/pay"));
  ASSERT_TRUE(r) << last_exchange_error();
  token.write("second-token\n");
  r = raw_exchange(rb.port(), absolute_request("GET", "pay.internal", "/pay"));
  ASSERT_TRUE(r) << last_exchange_error();
  ASSERT_EQ(up.request_count(), 2u);
  EXPECT_EQ(up.requests()[0].header("Authorization").value_or(""), "Bearer first-token");
  EXPECT_EQ(up.requests()[1].header("Authorization").value_or(""), "Bearer second-token");

  token.write(jwt_expiring_in(-10s));
  r = raw_exchange(rb.port(), absolute_request("GET", "pay.internal", "/pay"));
  EXPECT_TRUE(IsReboundError(r, 502, {"auth_refresh_failed"}));
  EXPECT_EQ(up.request_count(), 2u) << "an expired token is not sent";
}

TEST(Auth, AMissingSecretFileRefusesToStart) {
  TokenIssuer issuer;
  ScriptedUpstream up;
  TempFile secret("s");
  ReboundOptions o;
  o.extra = oauth_dependency(issuer, up, secret);
  auto const at = o.extra.find(secret.path);
  o.extra.replace(at, secret.path.size(), "/nonexistent/secret");
  try {
    ReboundProcess rb(o);
    ADD_FAILURE() << "rebound started without its client secret";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("auth.client_secret_file \"/nonexistent/secret\" cannot be read"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace itest::auth_test
