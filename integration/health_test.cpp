// `rebound health` (docs/configuration.md: Command line): the container HEALTHCHECK and exec probes. Exit 0
// only for a 200 from the admin API within 2 s; 1 for anything else; 2 for a usage error.
#include "helpers.hpp"

namespace itest::health_test {
namespace {

ProcessResult health(std::vector<std::string> args) {
  args.insert(args.begin(), {rebound_binary(), "health"});
  return run_process(args, {}, std::chrono::seconds(10));
}

std::string admin_of(std::uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

TEST(Health, ExitsZeroWhileReboundServes) {
  ReboundProcess rb;
  auto r = health({"--admin", admin_of(rb.admin_port())});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("healthy: /healthz"), std::string::npos) << r.out;
  auto ready = health({"--admin", admin_of(rb.admin_port()), "--ready"});
  EXPECT_EQ(ready.exit_code, 0) << ready.out << ready.err;
  EXPECT_NE(ready.out.find("/readyz"), std::string::npos) << ready.out;
}

TEST(Health, AWildcardAdminAddressIsAskedOnLoopback) {
  ReboundProcess rb;
  auto r = health({"--admin", "0.0.0.0:" + std::to_string(rb.admin_port())});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

TEST(Health, ReadsTheAdminAddressFromTheConfigFile) {
  ReboundProcess rb;
  auto r = health({"--config", rb.config_path()});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

TEST(Health, ExitsOneWhenNothingListens) {
  RefusingPort const dead;
  auto r = health({"--admin", admin_of(dead.port())});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("unhealthy"), std::string::npos) << r.err;
}

TEST(Health, ExitsOneOnAnAnswerOtherThan200) {
  ScriptedUpstream up;
  Script draining;
  draining.status = 503;
  up.on("/healthz", draining);
  auto r = health({"--admin", up.authority()});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("503"), std::string::npos) << r.err;
}

TEST(Health, ExitsOneWithinItsTimeoutWhenTheAnswerNeverComes) {
  TcpServer silent([](Conn& conn, TcpServer&) {
    while (!conn.read_some().empty()) {
    }
  });
  auto const start = std::chrono::steady_clock::now();
  auto r = health({"--admin", silent.authority()});
  auto const took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("timed out"), std::string::npos) << r.err;
  EXPECT_LT(took, std::chrono::seconds(6));
}

TEST(Health, ABadAddressOrArgumentIsAUsageError) {
  EXPECT_EQ(health({"--admin", "localhost:9901"}).exit_code, 2);
  EXPECT_EQ(health({"--admin"}).exit_code, 2);
  EXPECT_EQ(health({"--bogus"}).exit_code, 2);
}

}  // namespace
}  // namespace itest::health_test
