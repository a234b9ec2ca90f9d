// Issue 46, defect 1: the admin API refuses what a DNS-rebinding page or a page of another
// origin sends, and lets through what the operator's own tools send.
#include "proxy/admin/host_guard.hpp"

#include "config/config.hpp"

#include <gtest/gtest.h>

namespace rebound::admin {
namespace {

namespace bhttp = boost::beast::http;

bhttp::request_header<rebound::http::head_fields> head(bhttp::verb method, std::vector<std::pair<std::string, std::string>> fields) {
  bhttp::request_header<rebound::http::head_fields> h;
  h.method(method);
  h.target("/retry-tasks");
  h.version(11);
  for (auto const& [name, value] : fields) h.insert(name, value);
  return h;
}

TEST(AdminHostGuard, ARebindingPagesNameIsRefusedForReadsAndWrites) {
  config::config const cfg;
  EXPECT_FALSE(admin_host_allowed("evil.example:9901", cfg));
  EXPECT_TRUE(foreign_request(head(bhttp::verb::get, {{"Host", "evil.example:9901"}}), cfg));
  // The page's own origin matches its own Host: that is what the old same-origin check let through.
  EXPECT_TRUE(foreign_request(
      head(bhttp::verb::post, {{"Host", "evil.example:9901"}, {"Origin", "http://evil.example:9901"}}), cfg));
}

TEST(AdminHostGuard, LoopbackIpLiteralsAndTheAdminHostPassOnAnyPort) {
  config::config cfg;
  cfg.admin.host = "10.0.0.7";
  for (auto const* host : {"127.0.0.1:9901", "127.0.0.1", "[::1]:9901", "localhost:8080", "LOCALHOST.:9901",
                           "ui.localhost:9901", "10.0.0.7:9901", "10.1.2.3:9901", "[fe80::1]:1"})
    EXPECT_TRUE(admin_host_allowed(host, cfg)) << host;
  cfg.admin.host = "rebound.internal";  // a name the operator wrote is theirs
  EXPECT_TRUE(admin_host_allowed("Rebound.Internal:9901", cfg));
}

TEST(AdminHostGuard, AllowedHostsAreExactOrADomainWithALeadingDot) {
  config::config cfg;
  cfg.admin_allowed_hosts = {"admin.example.com", ".svc.cluster.local"};
  EXPECT_TRUE(admin_host_allowed("admin.example.com:9901", cfg));
  EXPECT_FALSE(admin_host_allowed("x.admin.example.com:9901", cfg));
  EXPECT_TRUE(admin_host_allowed("rebound.ns.svc.cluster.local:9901", cfg));
  EXPECT_TRUE(admin_host_allowed("svc.cluster.local", cfg));
  EXPECT_FALSE(admin_host_allowed("evilsvc.cluster.local", cfg));
}

TEST(AdminHostGuard, MalformedHostValuesAreRefused) {
  config::config const cfg;
  for (auto const* host : {"", ":9901", "127.0.0.1:99a", "127.0.0.1:1:2", "[::1", "[::1]x", "[localhost]:1",
                           "::1", "127.0.0.1:123456"})
    EXPECT_FALSE(admin_host_allowed(host, cfg)) << host;
  EXPECT_TRUE(foreign_request(head(bhttp::verb::get, {{"Host", "127.0.0.1"}, {"Host", "evil.example"}}), cfg))
      << "two Host fields";
}

TEST(AdminHostGuard, AWriteMustComeFromTheAdminPagesOwnOrigin) {
  config::config const cfg;
  EXPECT_FALSE(foreign_request(
      head(bhttp::verb::post, {{"Host", "127.0.0.1:9901"}, {"Origin", "http://127.0.0.1:9901"}}), cfg));
  EXPECT_FALSE(foreign_request(head(bhttp::verb::post, {{"Host", "127.0.0.1:9901"}}), cfg)) << "curl sends no Origin";
  EXPECT_TRUE(foreign_request(
      head(bhttp::verb::post, {{"Host", "127.0.0.1:9901"}, {"Origin", "http://localhost:8000"}}), cfg))
      << "another local service's page";
  EXPECT_TRUE(foreign_request(head(bhttp::verb::delete_, {{"Host", "127.0.0.1:9901"}, {"Origin", "null"}}), cfg));
  EXPECT_FALSE(
      foreign_request(head(bhttp::verb::get, {{"Host", "127.0.0.1:9901"}, {"Origin", "http://x.example"}}), cfg))
      << "a read from another origin cannot be read by that page";
}

}  // namespace
}  // namespace rebound::admin
