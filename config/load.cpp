#include "config/load.hpp"

#include "config/typed_values.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cctype>
#include <fstream>
#include <sstream>

namespace rebound::config {

std::string to_string(const diagnostic& d) {
  std::string out = d.file;
  if (d.line > 0) out += ":" + std::to_string(d.line) + ":" + std::to_string(d.column);
  out += ": ";
  if (!d.path.empty()) out += d.path + ": ";
  out += d.message;
  if (!d.rule.empty()) out += " (" + d.rule + ")";
  return out;
}

namespace {

std::string join_messages(const std::vector<diagnostic>& ds) {
  std::string s;
  for (auto const& d : ds) s += to_string(d) + "\n";
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

/** Walks the YAML tree, collecting every problem with its position. Each `read_*`
    function owns one level of the schema, so the full schema extends it key by key. */
class reader {
 public:
  explicit reader(std::string file) : file_(std::move(file)) {}

  std::vector<diagnostic>& diagnostics() { return diags_; }

  void error(const YAML::Node& at, const std::string& path, std::string message, std::string rule = {}) {
    auto const mark = at.Mark();
    bool const known = mark.line >= 0;
    diags_.push_back({file_, known ? mark.line + 1 : 0, known ? mark.column + 1 : 0, path, std::move(message), std::move(rule)});
  }

  /// Reports keys of `map` not in `allowed`, with the closest allowed key when one is near.
  void check_keys(const YAML::Node& map, const std::string& path, std::initializer_list<std::string_view> allowed) {
    for (auto const& kv : map) {
      auto const key = kv.first.Scalar();
      if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
      std::string msg = "unknown key \"" + key + "\"";
      std::string_view best;
      std::size_t best_d = 3;  // suggest only near misses
      for (auto a : allowed) {
        auto const d = edit_distance(key, a);
        if (d < best_d) { best_d = d; best = a; }
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
    if (r.value) out = *r.value;
    else error(n, p, r.error);
  }

  static std::string join(const std::string& path, std::string_view key) {
    return path.empty() ? std::string(key) : path + "." + std::string(key);
  }

  void read_top(const YAML::Node& root, config& c) {
    if (!root || root.IsNull()) return;  // an empty file means the built-in defaults
    if (!expect_map(root, "")) return;
    check_keys(root, "", {"listen", "admin", "workers", "drain_timeout", "unknown_hosts", "limits", "defaults", "dependencies"});
    typed(root, "listen", "", c.listen, parse_endpoint);
    typed(root, "admin", "", c.admin, parse_endpoint);
    typed(root, "workers", "", c.workers, parse_workers);
    typed(root, "drain_timeout", "", c.drain_timeout, parse_duration);
    typed(root, "unknown_hosts", "", c.unknown_hosts, parse_unknown_hosts);
    if (auto n = root["limits"]) read_limits(n, "limits", c.limits);
    if (auto n = root["defaults"]) read_policy(n, "defaults", c.defaults);
    for (auto& d : c.dependencies) d.effective = c.defaults;
    if (auto n = root["dependencies"]) read_dependencies(n, "dependencies", c);
  }

  void read_limits(const YAML::Node& n, const std::string& path, request_limits& l) {
    if (!expect_map(n, path)) return;
    check_keys(n, path, {"max_request_head", "max_request_body", "idle_timeout"});
    std::uint64_t head = l.max_request_head;
    typed(n, "max_request_head", path, head, parse_size);
    if (head < 1024 || head > (1u << 20)) error(n["max_request_head"], join(path, "max_request_head"), "must be between 1KiB and 1MiB");
    else l.max_request_head = static_cast<std::size_t>(head);
    typed(n, "max_request_body", path, l.max_request_body, parse_size);
    typed(n, "idle_timeout", path, l.idle_timeout, parse_duration);
    if (l.idle_timeout.count() == 0) error(n["idle_timeout"], join(path, "idle_timeout"), "must be greater than 0");
  }

  void read_policy(const YAML::Node& n, const std::string& path, policy& p) {
    if (!expect_map(n, path)) return;
    check_keys(n, path, {"attempt_timeout"});
    typed(n, "attempt_timeout", path, p.attempt_timeout, parse_duration);
    if (n["attempt_timeout"] && p.attempt_timeout.count() == 0)
      error(n["attempt_timeout"], join(path, "attempt_timeout"), "must be greater than 0");
  }

  void read_dependencies(const YAML::Node& n, const std::string& path, config& c) {
    if (!expect_map(n, path)) return;
    for (auto const& kv : n) {
      dependency d;
      d.name = kv.first.Scalar();
      d.effective = c.defaults;
      auto const dpath = join(path, d.name);
      auto const& body = kv.second;
      if (!expect_map(body, dpath)) continue;
      check_keys(body, dpath, {"hosts", "attempt_timeout"});
      if (body["attempt_timeout"]) typed(body, "attempt_timeout", dpath, d.effective.attempt_timeout, parse_duration);
      auto const hosts = body["hosts"];
      if (!hosts || !hosts.IsSequence() || hosts.size() == 0) {
        error(hosts ? hosts : kv.first, join(dpath, "hosts"), "expected a non-empty list of host or host:port values");
        continue;
      }
      for (std::size_t i = 0; i < hosts.size(); ++i) {
        auto const hpath = join(dpath, "hosts") + "[" + std::to_string(i) + "]";
        auto const h = scalar(hosts[i], hpath);
        if (!h) continue;
        if (h->empty() || h->find_first_of(" /?#@") != std::string::npos) {
          error(hosts[i], hpath, "invalid host \"" + *h + "\" (expected host or host:port)");
          continue;
        }
        auto const key = lower(*h);
        if (c.host_index.count(key)) {
          error(hosts[i], hpath, "host \"" + *h + "\" already belongs to dependency \"" +
                                     c.dependencies[c.host_index[key]].name + "\"");
          continue;
        }
        c.host_index.emplace(key, c.dependencies.size());
        d.hosts.push_back(*h);
      }
      c.dependencies.push_back(std::move(d));
    }
  }

  static parsed<unsigned> parse_workers(std::string_view s) {
    unsigned v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size() || v > 256)
      return parsed<unsigned>::fail("invalid workers \"" + std::string(s) + "\" (expected 0 for one per core, or 1 to 256)");
    return parsed<unsigned>::ok(v);
  }

  static parsed<unknown_hosts_policy> parse_unknown_hosts(std::string_view s) {
    if (s == "allow") return parsed<unknown_hosts_policy>::ok(unknown_hosts_policy::allow);
    if (s == "deny") return parsed<unknown_hosts_policy>::ok(unknown_hosts_policy::deny);
    return parsed<unknown_hosts_policy>::fail("invalid value \"" + std::string(s) + "\" (expected allow or deny)");
  }

 private:
  std::string file_;
  std::vector<diagnostic> diags_;
};

config load(const YAML::Node& root, reader& r) {
  config c = default_config();
  r.read_top(root, c);
  if (!r.diagnostics().empty()) throw config_error(std::move(r.diagnostics()));
  return c;
}

YAML::Node parse_yaml(std::string_view text, const std::string& name) {
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    diagnostic d{name, e.mark.line >= 0 ? e.mark.line + 1 : 0, e.mark.column >= 0 ? e.mark.column + 1 : 0, "",
                 "malformed YAML: " + e.msg, ""};
    throw config_error({d}, true);
  }
}

}  // namespace

config_error::config_error(std::vector<diagnostic> diagnostics, bool malformed)
    : std::runtime_error(join_messages(diagnostics)), diagnostics_(std::move(diagnostics)), malformed_(malformed) {}

config load_config_text(std::string_view yaml, const std::string& name) {
  auto const root = parse_yaml(yaml, name);
  reader r(name);
  return load(root, r);
}

config load_config_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw config_error({diagnostic{path, 0, 0, "", "cannot read the file", ""}}, true);
  std::ostringstream text;
  text << in.rdbuf();
  return load_config_text(text.str(), path);
}

config default_config() { return config{}; }

const dependency* config::find_dependency(std::string_view host, std::uint16_t port) const {
  if (host_index.empty()) return nullptr;
  std::string key = lower(host);
  auto const bare = key.size();
  key += ":" + std::to_string(port);
  if (auto it = host_index.find(key); it != host_index.end()) return &dependencies[it->second];
  key.resize(bare);
  if (auto it = host_index.find(key); it != host_index.end()) return &dependencies[it->second];
  return nullptr;
}

}  // namespace rebound::config
