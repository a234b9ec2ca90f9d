// `rebound check FILE [--format text|json]` (SPEC 1, 2.1): the CI gate. Exit 0 clean or
// warnings only, 1 with errors, 2 unreadable or malformed; the JSON form carries every finding.
#include "helpers.hpp"

namespace itest::check_test {
namespace {

struct Checked {
  ProcessResult run;
  std::optional<Json> json;
};

Checked check(const std::string& yaml, bool json) {
  auto const dir = make_temp_dir();
  auto const path = dir + "/c.yaml";
  write_file(path, yaml);
  std::vector<std::string> argv{rebound_binary(), "check", path};
  if (json) argv.insert(argv.end(), {"--format", "json"});
  Checked c{run_process(argv, {}, std::chrono::seconds(10)), std::nullopt};
  if (json) c.json = parse_json(c.run.out);
  remove_tree(dir);
  return c;
}

constexpr auto approved =
    "dependencies:\n  reports:\n    hosts: [r]\n    max_retries: 7\n    approval: IAB-2026-114\n"
    "    idempotency: {inject: false}\n";

TEST(Check, R9_VerifyFalseExits1) {
  auto c = check("dependencies:\n  pay:\n    hosts: [p]\n    origin: https://p.example.com\n    tls: {verify: false}\n",
                 true);
  EXPECT_EQ(c.run.exit_code, 1) << c.run.out;
  ASSERT_TRUE(c.json) << c.run.out;
  EXPECT_NE(c.run.out.find(R"("rule":"R-9")"), std::string::npos) << c.run.out;
}

TEST(Check, AnUnusableCaBundleIsAnErrorAndAMissingOneAWarning) {
  auto const dir = make_temp_dir();
  write_file(dir + "/not-a-ca.pem", "hello\n");
  auto const yaml = [&](const std::string& ca) {
    return "dependencies:\n  pay:\n    hosts: [p]\n    origin: https://p.example.com\n    tls:\n      ca_file: " + ca +
           "\n";
  };
  auto bad = check(yaml(dir + "/not-a-ca.pem"), false);
  EXPECT_EQ(bad.run.exit_code, 1) << bad.run.out;
  EXPECT_NE(bad.run.err.find("dependencies.pay.tls: tls.ca_file"), std::string::npos) << bad.run.err;
  auto missing = check(yaml(dir + "/absent.pem"), false);
  EXPECT_EQ(missing.run.exit_code, 0) << missing.run.err;
  EXPECT_NE(missing.run.out.find("warning: dependencies.pay.tls.ca_file: cannot read"), std::string::npos)
      << missing.run.out;
  remove_tree(dir);
}

TEST(Check, CleanFileExits0) {
  auto c = check("defaults:\n  max_retries: 2\n", false);
  EXPECT_EQ(c.run.exit_code, 0) << c.run.err;
  EXPECT_NE(c.run.out.find(": ok"), std::string::npos) << c.run.out;
}

TEST(Check, R2_R6_WarningsAloneExit0AndAreListed) {
  auto c = check(approved, false);
  EXPECT_EQ(c.run.exit_code, 0) << c.run.err;
  EXPECT_NE(c.run.out.find(":4:18: warning: dependencies.reports.max_retries: max_retries 7 is above 1..5"),
            std::string::npos)
      << c.run.out;
  EXPECT_NE(c.run.out.find("approval \"IAB-2026-114\" (R-2)"), std::string::npos) << c.run.out;
  EXPECT_NE(c.run.out.find("forwarded once"), std::string::npos) << c.run.out;
  EXPECT_NE(c.run.out.find("(R-6)"), std::string::npos) << c.run.out;
  EXPECT_NE(c.run.out.find("ok (2 warnings)"), std::string::npos) << c.run.out;
}

TEST(Check, JsonListsEveryFindingWithLevelRuleAndPosition) {
  auto c = check(std::string(approved) + "    backoff: {jitter: equal}\n    retry_on: [404]\n", true);
  EXPECT_EQ(c.run.exit_code, 1) << c.run.err;
  ASSERT_TRUE(c.json) << c.run.out;
  ASSERT_TRUE(c.json->get("valid"));
  EXPECT_FALSE(c.json->get("valid")->b);
  auto const* findings = c.json->get("findings");
  ASSERT_TRUE(findings);
  std::vector<std::string> seen;
  for (auto const& f : findings->a) {
    ASSERT_TRUE(f.get("level") && f.get("rule") && f.get("line") && f.get("column") && f.get("path") &&
                f.get("message"));
    seen.push_back(f.get("level")->s + " " + f.get("rule")->s + " " + f.get("path")->s);
  }
  auto has = [&](const std::string& s) { return std::find(seen.begin(), seen.end(), s) != seen.end(); };
  EXPECT_TRUE(has("error R-1 dependencies.reports.backoff.jitter")) << testing::PrintToString(seen);
  EXPECT_TRUE(has("error R-4 dependencies.reports.retry_on[0]")) << testing::PrintToString(seen);
  EXPECT_TRUE(has("warning R-2 dependencies.reports.max_retries")) << testing::PrintToString(seen);
  EXPECT_TRUE(has("warning R-6 dependencies.reports.idempotency.inject")) << testing::PrintToString(seen);
}

TEST(Check, JsonOfAValidFileSaysValid) {
  auto c = check(approved, true);
  EXPECT_EQ(c.run.exit_code, 0);
  ASSERT_TRUE(c.json) << c.run.out;
  EXPECT_TRUE(c.json->get("valid")->b);
  EXPECT_EQ(c.json->get("findings")->a.size(), 2u);
}

TEST(Check, MalformedYamlExits2) {
  auto c = check("defaults: [\n", false);
  EXPECT_EQ(c.run.exit_code, 2);
  EXPECT_NE(c.run.err.find("malformed YAML"), std::string::npos) << c.run.err;
}

TEST(Check, ProxyLogsWarningsAtStartUp) {
  ReboundOptions o;
  o.extra = approved;
  ReboundProcess rb(o);
  ASSERT_TRUE(rb.wait_for_log("\"config_warning\""));
  EXPECT_NE(rb.stdout_text().find("\"rule\":\"R-2\""), std::string::npos) << rb.stdout_text();
}

}  // namespace
}  // namespace itest::check_test
