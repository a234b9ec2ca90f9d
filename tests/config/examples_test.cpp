// The shipped example configs and the README's configuration reference: each must load
// with the same loader the proxy runs, so documentation cannot drift from the schema.
#include "config/describe.hpp"
#include "config/load.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
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
  for (auto const& e :
       std::filesystem::directory_iterator(std::filesystem::path(REBOUND_SOURCE_DIR) / "config/examples")) {
    if (e.path().extension() != ".yaml") continue;
    ++n;
    std::vector<diagnostic> warnings;
    try {
      auto const c = load_config_file(e.path().string(), &warnings);
      EXPECT_FALSE(c.dependencies.empty()) << e.path();
    } catch (const config_error& x) {
      ADD_FAILURE() << x.what();
    }
    for (auto const& w : warnings) {
      // The secrets and CA bundles an example names are not on a build machine.
      bool const mounted_file = w.rule.empty() && w.message.find("cannot read") != std::string::npos;
      EXPECT_TRUE(w.rule == "R-2" || mounted_file) << "only documented warnings are expected: " << to_string(w);
    }
  }
  EXPECT_GE(n, 4u);
}

namespace {

/// The YAML block of the README's Configuration section.
std::string readme_reference() {
  auto const readme = read(std::filesystem::path(REBOUND_SOURCE_DIR) / "README.md");
  auto const section = readme.find("## Configuration");
  auto const start = readme.find("```yaml\n", section);
  if (section == std::string::npos || start == std::string::npos) return {};
  auto const end = readme.find("```", start + 8);
  return readme.substr(start + 8, end - start - 8);
}

}  // namespace

// Every key the README's reference shows is one the loader accepts, with a valid value.
TEST(Examples, ReadmeConfigurationReferenceLoads) {
  auto const yaml = readme_reference();
  ASSERT_FALSE(yaml.empty());
  std::vector<diagnostic> warnings;
  try {
    auto const c = load_config_text(yaml, "README.md", &warnings);
    EXPECT_FALSE(c.dependencies.at(0).routes.empty());
  } catch (const config_error& x) {
    FAIL() << x.what();
  }
}

// And the reverse: every key of the loaded config (GET /config writes each one the loader
// fills) is shown in the README's reference.
TEST(Examples, ReadmeConfigurationReferenceShowsEveryKey) {
  auto const yaml = readme_reference();
  auto const json = effective_config_json(load_config_text(yaml, "README.md"));
  std::regex const key("\"([a-z_]+)\":");
  std::size_t checked = 0;
  for (auto it = std::sregex_iterator(json.begin(), json.end(), key); it != std::sregex_iterator(); ++it) {
    auto const name = (*it)[1].str();
    if (name == "payments") continue;  // the example dependency's name, not a key
    ++checked;
    EXPECT_TRUE(std::regex_search(yaml, std::regex("(^|[\\n {,])" + name + ":"))) << name << " is not in the README";
  }
  EXPECT_GT(checked, 40u);
}
