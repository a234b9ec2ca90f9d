#pragma once
/** Internal to config/: the YAML reader the loader's parts share. Not a public header. */
#include "config/load.hpp"
#include "config/typed_values.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rebound::config {

/** The YAML walk's shared tools: every problem is collected with its position (not thrown
    at the first), keys are checked against what a level allows ("did you mean"), scalars
    are parsed by the typed-value parsers. The schema's levels are read by subclasses and
    helpers in config/load*.cpp. */
class yaml_reader {
 public:
  explicit yaml_reader(std::string file) : file_(std::move(file)) {}

  std::vector<diagnostic>& diagnostics() { return diags_; }

  void error(const YAML::Node& at, const std::string& path, std::string message, std::string rule = {}) {
    auto const mark = at.Mark();
    bool const known = mark.line >= 0;
    diags_.push_back(
        {file_, known ? mark.line + 1 : 0, known ? mark.column + 1 : 0, path, std::move(message), std::move(rule)});
  }

  /// A warning is reported once per place, however many dependencies and routes inherit it.
  void warn(const YAML::Node& at, const std::string& path, std::string message, std::string rule) {
    auto const mark = at.Mark();
    bool const known = mark.line >= 0;
    diagnostic d{
        file_, known ? mark.line + 1 : 0, known ? mark.column + 1 : 0, path, std::move(message), std::move(rule), true};
    for (auto const& w : warnings_)
      if (w.line == d.line && w.column == d.column && w.path == d.path && w.message == d.message) return;
    warnings_.push_back(std::move(d));
  }
  std::vector<diagnostic>& warnings() { return warnings_; }

  /// Reports keys of `map` not in `allowed`, with the closest allowed key when one is near.
  void check_keys(const YAML::Node& map, const std::string& path, std::initializer_list<std::string_view> allowed) {
    check_keys_list(map, path, std::vector<std::string_view>(allowed));
  }

  void check_keys_list(const YAML::Node& map, const std::string& path, const std::vector<std::string_view>& allowed) {
    std::vector<std::pair<std::string, int>>
        seen;  // key, line: YAML forbids duplicates, yaml-cpp keeps the first silently
    for (auto const& kv : map) {
      auto const key = kv.first.Scalar();
      auto const line = kv.first.Mark().line + 1;
      if (auto it = std::find_if(seen.begin(), seen.end(), [&](auto const& k) { return k.first == key; });
          it != seen.end()) {
        error(kv.first, join(path, key),
              "duplicate key \"" + key + "\" (first at line " + std::to_string(it->second) + ")");
        continue;
      }
      seen.emplace_back(key, line);
      if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
      std::string msg = "unknown key \"" + key + "\"";
      std::string_view best;
      std::size_t best_d = 3;  // suggest only near misses
      for (auto a : allowed) {
        auto const d = edit_distance(key, a);
        if (d < best_d) {
          best_d = d;
          best = a;
        }
      }
      if (!best.empty()) msg += "; did you mean \"" + std::string(best) + "\"?";
      error(kv.first, join(path, key), msg);
    }
  }

  bool expect_map(const YAML::Node& n, const std::string& path) {
    if (n.IsMap()) return true;
    error(n, path, "expected a mapping (key: value pairs)");
    return false;
  }

  std::optional<std::string> scalar(const YAML::Node& n, const std::string& path) {
    if (n.IsScalar()) return n.Scalar();
    error(n, path, "expected a single value, not a list or mapping");
    return std::nullopt;
  }

  template <class T, class Parse>
  void typed(const YAML::Node& parent, std::string_view key, const std::string& path, T& out, Parse parse) {
    auto const n = parent[std::string(key)];
    if (!n) return;
    auto const p = join(path, key);
    auto const s = scalar(n, p);
    if (!s) return;
    auto r = parse(*s);
    if (r.value)
      out = *r.value;
    else
      error(n, p, r.error);
  }

  /// A file path value; one that cannot be read here is a warning (see load_security.cpp).
  std::optional<std::string> readable_file(const YAML::Node& parent, std::string_view key, const std::string& path);

  static std::string join(const std::string& path, std::string_view key) {
    return path.empty() ? std::string(key) : path + "." + std::string(key);
  }

 protected:
  std::string file_;
  std::vector<diagnostic> diags_;
  std::vector<diagnostic> warnings_;
};

/** What is wrong with a libpq connection string (empty message: nothing): it does not
    parse, or it holds a password, which belongs in store.password_file. */
struct dsn_problem {
  std::string message;
  std::string rule;
};
dsn_problem postgres_dsn_problem(const std::string& dsn);

/// `tls:` of a dependency (SPEC 5): files must be readable; `verify: false` is refused.
std::optional<tls_settings> read_tls(yaml_reader& r, const YAML::Node& n, const std::string& path);

/// `auth:` of a dependency (SPEC 5, R-9): oauth2_client_credentials or bearer_file.
std::optional<auth_settings> read_auth(yaml_reader& r, const YAML::Node& n, const std::string& path);

}  // namespace rebound::config
