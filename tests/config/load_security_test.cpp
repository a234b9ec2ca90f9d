// The `tls` and `auth` keys of a dependency (SPEC 5, R-9), as the loader reads and refuses them.
#include "config/describe.hpp"
#include "config/load.hpp"
#include "diagnostics.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <unistd.h>

using namespace rebound::config;
using namespace std::chrono_literals;

namespace load_security_test {
namespace {

/// A readable file for the keys that name one; removed with the test.
struct temp_file {
  std::string path;
  explicit temp_file(const std::string& content) {
    char tmpl[] = "/tmp/rebound-cfg-XXXXXX";
    int fd = mkstemp(tmpl);
    path = tmpl;
    ::close(fd);
    std::ofstream(path) << content;
  }
  ~temp_file() { std::remove(path.c_str()); }
};

std::string dependency(const std::string& body) { return "dependencies:\n  pay:\n    hosts: [pay.internal]\n" + body; }

bool has_finding(const std::vector<diagnostic>& ds, const std::string& path, const std::string& text,
                 const std::string& rule = {}) {
  for (auto const& d : ds)
    if (d.path == path && d.message.find(text) != std::string::npos && d.rule == rule) return true;
  return false;
}

TEST(LoadSecurity, R9_VerifyFalseIsRefused) {
  auto const ds = errors_of(dependency("    origin: https://pay.example.com\n    tls:\n      verify: false\n"));
  ASSERT_TRUE(has_finding(ds, "dependencies.pay.tls.verify", "cannot be turned off", "R-9")) << to_string(ds.at(0));
  EXPECT_EQ(ds.at(0).line, 6);
}

TEST(LoadSecurity, R9_VerifyFalseIsRefusedEvenWhereTlsDoesNotApply) {
  auto const ds = errors_of(dependency("    tls:\n      verify: false\n"));
  EXPECT_TRUE(has_finding(ds, "dependencies.pay.tls.verify", "cannot be turned off", "R-9"));
  EXPECT_TRUE(has_finding(ds, "dependencies.pay.tls", "applies to an https:// origin"));
}

TEST(LoadSecurity, HttpsOriginVerifiesWithTheSystemStoreByDefault) {
  auto const c = load_config_text(dependency("    origin: https://pay.example.com\n"), "t.yaml");
  auto const& d = c.dependencies.at(0);
  ASSERT_TRUE(d.origin);
  EXPECT_EQ(d.origin->scheme, "https");
  EXPECT_EQ(d.origin->port, 443);
  ASSERT_TRUE(d.tls);
  EXPECT_TRUE(d.tls->ca_file.empty());
  EXPECT_TRUE(d.tls->server_name.empty());
}

TEST(LoadSecurity, TlsFilesMustBeReadableAndCertGoesWithKey) {
  temp_file ca("x");
  auto const ds =
      errors_of(dependency("    origin: https://pay.example.com\n    tls:\n      ca_file: /nonexistent/ca.pem\n"
                           "      client_cert: " +
                           ca.path + "\n      server_name: a b\n      verfy: true\n"));
  EXPECT_TRUE(has_finding(ds, "dependencies.pay.tls", "client_cert and client_key go together"));
  EXPECT_TRUE(has_finding(ds, "dependencies.pay.tls.server_name", "expected a host name"));
  EXPECT_TRUE(has_finding(ds, "dependencies.pay.tls.verfy", "did you mean \"verify\""));
}

TEST(LoadSecurity, UnreadableFilesAreWarningsForCheckInCi) {
  std::vector<diagnostic> warnings;
  auto const c =
      load_config_text(dependency("    origin: https://pay.example.com\n    tls:\n      ca_file: /nonexistent/ca.pem\n"
                                  "    auth:\n      type: bearer_file\n      path: /nonexistent/token\n"),
                       "t.yaml", &warnings);
  EXPECT_EQ(c.dependencies.at(0).tls->ca_file, "/nonexistent/ca.pem");
  EXPECT_TRUE(has_finding(warnings, "dependencies.pay.tls.ca_file", "cannot read \"/nonexistent/ca.pem\""));
  EXPECT_TRUE(has_finding(warnings, "dependencies.pay.auth.path", "refuses to start without it"));
}

TEST(LoadSecurity, TlsSettingsAreRead) {
  temp_file ca("ca"), crt("crt"), key("key");
  auto const c = load_config_text(dependency("    origin: https://10.0.0.5:8443\n    tls:\n      ca_file: " + ca.path +
                                             "\n      server_name: pay.example.com\n      client_cert: " + crt.path +
                                             "\n      client_key: " + key.path + "\n      verify: true\n"),
                                  "t.yaml");
  auto const& t = *c.dependencies.at(0).tls;
  EXPECT_EQ(t.ca_file, ca.path);
  EXPECT_EQ(t.server_name, "pay.example.com");
  EXPECT_EQ(t.client_cert, crt.path);
  EXPECT_EQ(t.client_key, key.path);
}

TEST(LoadSecurity, OAuth2ClientCredentialsAreRead) {
  temp_file secret("s3cr3t-value");
  auto const c = load_config_text(
      dependency(
          "    auth:\n      type: oauth2_client_credentials\n      token_url: https://auth.example.com/oauth/token\n"
          "      client_id: checkout\n      client_secret_file: " +
          secret.path + "\n      scope: payments:write\n      refresh_skew: 10s\n"),
      "t.yaml");
  auto const& a = *c.dependencies.at(0).auth;
  EXPECT_EQ(a.type, auth_settings::kind::oauth2_client_credentials);
  EXPECT_EQ(a.token_url.origin.host, "auth.example.com");
  EXPECT_EQ(a.token_url.target, "/oauth/token");
  EXPECT_EQ(a.client_id, "checkout");
  EXPECT_EQ(a.client_secret_file, secret.path);
  EXPECT_EQ(a.scope, "payments:write");
  EXPECT_EQ(a.refresh_skew, 10s);
  auto const json = effective_config_json(c);
  EXPECT_NE(json.find("\"client_secret_file\":\"" + secret.path + "\""), std::string::npos) << json;
  EXPECT_EQ(json.find("s3cr3t-value"), std::string::npos) << "the config never holds the secret itself (R-9)";
  EXPECT_NO_THROW(load_config_text(json, "round-trip.json")) << json;
}

TEST(LoadSecurity, OAuth2NeedsItsKeys) {
  auto const ds = errors_of(dependency("    auth:\n      type: oauth2_client_credentials\n      scope: x\n"));
  EXPECT_TRUE(has_finding(ds, "dependencies.pay.auth.token_url", "missing"));
  EXPECT_TRUE(has_finding(ds, "dependencies.pay.auth.client_id", "missing"));
  EXPECT_TRUE(has_finding(ds, "dependencies.pay.auth.client_secret_file", "missing"));
}

TEST(LoadSecurity, R9_SecretsInTheFileAreRefused) {
  auto const ds =
      errors_of(dependency("    auth:\n      type: oauth2_client_credentials\n      client_secret: hunter2\n"
                           "      token_url: https://a/t\n      client_id: c\n"));
  EXPECT_TRUE(has_finding(ds, "dependencies.pay.auth.client_secret", "client_secret_file", "R-9"));
  for (auto const& d : ds)
    EXPECT_EQ(to_string(d).find("hunter2"), std::string::npos) << "the secret is not echoed back";
  auto const bearer =
      errors_of(dependency("    auth:\n      type: bearer_file\n      token: eyJabc\n      path: /x\n"));
  EXPECT_TRUE(has_finding(bearer, "dependencies.pay.auth.token", "bearer_file", "R-9"));
}

TEST(LoadSecurity, BearerFileAndUnknownTypes) {
  temp_file token("abc");
  auto const c =
      load_config_text(dependency("    auth:\n      type: bearer_file\n      path: " + token.path + "\n"), "t.yaml");
  EXPECT_EQ(c.dependencies.at(0).auth->type, auth_settings::kind::bearer_file);
  EXPECT_EQ(c.dependencies.at(0).auth->path, token.path);
  EXPECT_EQ(c.dependencies.at(0).auth->refresh_skew, 30s);
  EXPECT_TRUE(has_finding(errors_of(dependency("    auth:\n      type: basic\n")), "dependencies.pay.auth.type",
                          "expected oauth2_client_credentials or bearer_file"));
  EXPECT_TRUE(has_finding(
      errors_of(dependency("    auth:\n      type: bearer_file\n      path: " + token.path + "\n      client_id: x\n")),
      "dependencies.pay.auth.client_id", "unknown key"));
}

}  // namespace

}  // namespace load_security_test
