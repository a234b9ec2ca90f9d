// The shipped example configs and the configuration reference (docs/configuration.md): each must load
// with the same loader the proxy runs, so documentation cannot drift from the schema.
#include "config/describe.hpp"
#include "config/load.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

using namespace rebound::config;

namespace examples_test {
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

/// The reference: the first YAML block of docs/configuration.md.
std::string configuration_reference() {
  auto const doc = read(std::filesystem::path(REBOUND_SOURCE_DIR) / "docs" / "configuration.md");
  auto const section = doc.find("# Configuration");
  auto const start = doc.find("```yaml\n", section);
  if (section == std::string::npos || start == std::string::npos) return {};
  auto const end = doc.find("```", start + 8);
  return doc.substr(start + 8, end - start - 8);
}

}  // namespace

// Every key the reference shows is one the loader accepts, with a valid value.
TEST(Examples, ConfigurationReferenceLoads) {
  auto const yaml = configuration_reference();
  ASSERT_FALSE(yaml.empty());
  std::vector<diagnostic> warnings;
  try {
    auto const c = load_config_text(yaml, "docs/configuration.md", &warnings);
    EXPECT_FALSE(c.dependencies.at(0).routes.empty());
  } catch (const config_error& x) {
    FAIL() << x.what();
  }
}

// And the reverse: every key of the loaded config (GET /config writes each one the loader
// fills) is shown in the reference.
TEST(Examples, ConfigurationReferenceShowsEveryKey) {
  auto const yaml = configuration_reference();
  auto const json = effective_config_json(load_config_text(yaml, "docs/configuration.md"));
  std::regex const key("\"([a-z_]+)\":");
  std::size_t checked = 0;
  for (auto it = std::sregex_iterator(json.begin(), json.end(), key); it != std::sregex_iterator(); ++it) {
    auto const name = (*it)[1].str();
    if (name == "payments") continue;  // the example dependency's name, not a key
    ++checked;
    EXPECT_TRUE(std::regex_search(yaml, std::regex("(^|[\\n {,])" + name + ":")))
        << name << " is not in docs/configuration.md";
  }
  EXPECT_GT(checked, 40u);
}

}  // namespace examples_test
