// A bad config never starts the proxy: `FILE:LINE:COL: key: message` on stderr, exit 2.
#include "helpers.hpp"

#include <regex>

namespace itest::config_test {
namespace {

std::string ports_yaml(std::uint16_t listen) {
  return "listen: 127.0.0.1:" + std::to_string(listen) + "\nadmin: 127.0.0.1:" + std::to_string(free_port()) + "\n";
}

bool stderr_matches(const BadConfigRun& run, const std::string& pattern) {
  auto escape = [](const std::string& s) {
    return std::regex_replace(s, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)");
  };
  return std::regex_search(run.err, std::regex("(^|\n)" + escape(run.path) + pattern));
}

TEST(Config, UnknownKeyExits2WithPositionAndDoesNotListen) {
  auto listen = free_port();
  auto run = run_with_config(ports_yaml(listen) + "bogus_key: 1\n");
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_TRUE(stderr_matches(run, R"(:3:1: bogus_key: \S)")) << run.err;
  EXPECT_FALSE(RawConnection::try_connect(listen).has_value());
}

TEST(Config, InvalidDurationExits2WithPosition) {
  auto run = run_with_config(ports_yaml(free_port()) + "drain_timeout: soon\n");
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_TRUE(stderr_matches(run, R"(:3:\d+: drain_timeout: \S)")) << run.err;
}

TEST(Config, NestedKeyErrorNamesItsPath) {
  auto run = run_with_config(ports_yaml(free_port()) + "limits:\n  max_request_body: lots\n");
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_TRUE(stderr_matches(run, R"(:4:\d+: limits\.max_request_body: \S)")) << run.err;
}

TEST(Config, UnknownNestedKeyExits2WithPosition) {
  auto run = run_with_config(ports_yaml(free_port()) + "defaults:\n  atempt_timeout: 2s\n");
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_TRUE(stderr_matches(run, R"(:4:3: defaults\.atempt_timeout: \S)")) << run.err;
}

TEST(Config, InvalidUnknownHostsValueExits2WithPosition) {
  auto run = run_with_config(ports_yaml(free_port()) + "workers: 1\nunknown_hosts: maybe\n");
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_TRUE(stderr_matches(run, R"(:4:\d+: unknown_hosts: \S)")) << run.err;
}

TEST(Config, MalformedYamlExits2WithPosition) {
  auto run = run_with_config("listen: [unclosed\nadmin: 127.0.0.1:1\n");
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_TRUE(stderr_matches(run, R"(:\d+:\d+: )")) << run.err;
}

TEST(Config, MissingFileExits2) {
  auto r = run_process({rebound_binary(), "--config", "/nonexistent/rebound-it.yaml"}, {}, 10s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/rebound-it.yaml"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace itest::config_test
