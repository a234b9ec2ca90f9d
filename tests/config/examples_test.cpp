// The shipped example configs and the README's configuration reference: each must load
// with the same loader the proxy runs, so documentation cannot drift from the schema.
#include "config/load.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

using namespace rebound::config;

namespace {

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST(Examples, EveryExampleConfigLoads) {
  std::size_t n = 0;
  for (auto const& e : std::filesystem::directory_iterator(std::filesystem::path(REBOUND_SOURCE_DIR) / "config/examples")) {
    if (e.path().extension() != ".yaml") continue;
    ++n;
    std::vector<diagnostic> warnings;
    try {
      auto const c = load_config_file(e.path().string(), &warnings);
      EXPECT_FALSE(c.dependencies.empty()) << e.path();
    } catch (const config_error& x) {
      ADD_FAILURE() << x.what();
    }
    for (auto const& w : warnings)
      EXPECT_EQ(w.rule, "R-2") << "only the documented approval warning is expected: " << to_string(w);
  }
  EXPECT_GE(n, 3u);
}

// Every key the README's reference shows is one the loader accepts, with a valid value.
TEST(Examples, ReadmeConfigurationReferenceLoads) {
  auto const readme = read(std::filesystem::path(REBOUND_SOURCE_DIR) / "README.md");
  auto const section = readme.find("## Configuration");
  ASSERT_NE(section, std::string::npos);
  auto const start = readme.find("```yaml\n", section);
  ASSERT_NE(start, std::string::npos);
  auto const end = readme.find("```", start + 8);
  auto const yaml = readme.substr(start + 8, end - start - 8);
  std::vector<diagnostic> warnings;
  try {
    auto const c = load_config_text(yaml, "README.md", &warnings);
    EXPECT_FALSE(c.dependencies.at(0).routes.empty());
  } catch (const config_error& x) {
    FAIL() << x.what();
  }
}
