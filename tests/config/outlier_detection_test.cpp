// `outlier_detection:` in the YAML (issue 50): defaults, per dependency only, the effective
// config, and what the loader refuses.
#include "config/describe.hpp"
#include "config/load.hpp"
#include "diagnostics.hpp"

#include <gtest/gtest.h>

using namespace rebound::config;
using namespace std::chrono_literals;

namespace outlier_detection_config_test {

TEST(OutlierDetectionConfig, OnByDefaultWithEnvoysNumbersAndHalfTheAddresses) {
  auto const c = load_config_text("dependencies: {a: {hosts: [a]}}", "t.yaml");
  auto const& od = c.dependencies.at(0).effective.outlier_detection;
  EXPECT_TRUE(od.enabled);
  EXPECT_EQ(od.consecutive_failures, 5u);
  EXPECT_EQ(od.base_ejection, 30s);
  EXPECT_EQ(od.max_ejection, 300s);
  EXPECT_DOUBLE_EQ(od.max_ejected_share, 0.5);
}

TEST(OutlierDetectionConfig, ADependencyOverridesTheDefaultsAndItsRoutesFollowIt) {
  auto const c = load_config_text(R"(
defaults:
  outlier_detection: {consecutive_failures: 3, base_ejection: 10s, max_ejection: 1m, max_ejected_share: 0.34}
dependencies:
  search:
    hosts: [search.internal]
    routes:
      - match: {path_prefix: /v1}
        max_retries: 1
  legacy:
    hosts: [legacy.internal]
    outlier_detection: off
)",
                                  "t.yaml");
  auto const& search = c.dependencies.at(0);
  EXPECT_EQ(search.effective.outlier_detection.consecutive_failures, 3u);
  EXPECT_EQ(search.effective.outlier_detection.base_ejection, 10s);
  EXPECT_EQ(search.effective.outlier_detection.max_ejection, 60s);
  EXPECT_DOUBLE_EQ(search.effective.outlier_detection.max_ejected_share, 0.34);
  EXPECT_EQ(search.routes.at(0).effective.outlier_detection, search.effective.outlier_detection);
  EXPECT_FALSE(c.dependencies.at(1).effective.outlier_detection.enabled);
  auto const json = effective_config_json(c);
  EXPECT_NE(json.find(R"("outlier_detection":"off")"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("outlier_detection":{"consecutive_failures":3,"base_ejection":"10s","max_ejection":"1m")"),
            std::string::npos)
      << json;
}

TEST(OutlierDetectionConfig, RefusesBadValuesWithTheirKey) {
  struct bad {
    const char* yaml;
    const char* path;
    const char* words;
  };
  for (auto const& b : {
           bad{"defaults: {outlier_detection: {consecutive_failures: 0}}",
               "defaults.outlier_detection.consecutive_failures", "between 1 and 1000"},
           bad{"defaults: {outlier_detection: {base_ejection: 10ms}}", "defaults.outlier_detection.base_ejection",
               "at least 100ms"},
           bad{"defaults: {outlier_detection: {base_ejection: 1m, max_ejection: 30s}}",
               "defaults.outlier_detection.max_ejection", "below base_ejection"},
           bad{"defaults: {outlier_detection: {max_ejected_share: 1.5}}", "defaults.outlier_detection.max_ejected_share",
               "ratio"},
           bad{"defaults: {outlier_detection: 5}", "defaults.outlier_detection", "expected `off` or a map"},
           bad{"defaults: {outlier_detection: {consecutive_failure: 5}}", "defaults.outlier_detection", "did you mean"},
           bad{"dependencies: {a: {hosts: [a], routes: [{match: {path_prefix: /x}, outlier_detection: off}]}}",
               "routes[0].outlier_detection", "per dependency"},
       }) {
    auto const d = errors_of(b.yaml);
    ASSERT_FALSE(d.empty()) << b.yaml;
    auto const all = messages(d);
    EXPECT_NE(all.find(b.path), std::string::npos) << b.yaml << "\n" << all;
    EXPECT_NE(all.find(b.words), std::string::npos) << b.yaml << "\n" << all;
  }
}

}  // namespace outlier_detection_config_test
