// The methods of the config types: what a loaded config answers about itself.
#include "config/config.hpp"

#include "config/typed_values.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <string>

namespace rebound::config {

bool route::matches(std::string_view method, std::string_view path) const {
  if (!path.starts_with(path_prefix)) return false;
  return methods.empty() || std::find(methods.begin(), methods.end(), method) != methods.end();
}

const policy& dependency::policy_for(std::string_view method, std::string_view path) const {
  for (auto const& r : routes)
    if (r.matches(method, path)) return r.effective;
  return effective;
}

const dependency* config::find_dependency(std::string_view host, std::uint16_t port) const {
  if (host_index.empty()) return nullptr;
  // "host:port", lower-cased, on the stack: this runs for every request, and a cluster-local
  // name with its port is past std::string's inline 15 characters (a malloc each time).
  std::array<char, 300> stack;
  std::string spilled;  // a longer host, which no DNS name is
  char* key = stack.data();
  if (host.size() + 6 > stack.size()) {
    spilled.resize(host.size() + 6);
    key = spilled.data();
  }
  std::transform(host.begin(), host.end(), key, [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; });
  auto const bare = host.size();
  key[bare] = ':';
  auto const [end, ec] = std::to_chars(key + bare + 1, key + bare + 6, port);
  for (auto const size : {static_cast<std::size_t>(end - key), bare})
    if (auto it = host_index.find(std::string_view(key, size)); it != host_index.end()) return &dependencies[it->second];
  return nullptr;
}

bool inbound_route::keeps_keys_for(std::string_view method) const {
  if (!match.methods.empty())
    return std::find(match.methods.begin(), match.methods.end(), method) != match.methods.end();
  return method == "POST" || method == "PATCH";
}

const inbound_route* inbound_settings::route_for(std::string_view method, std::string_view path) const {
  for (auto const& r : routes)
    if (r.match.matches(method, path)) return &r;
  return nullptr;
}

bool inbound_settings::needs_store() const {
  for (auto const& r : routes)
    if (r.idempotency.enabled || !r.dedupe.header.empty()) return true;
  return false;
}

retry::dependency_policies config::guarded() const {
  retry::dependency_policies p;
  for (auto const& d : dependencies) p.named.emplace_back(d.name, d.effective);
  p.defaults = defaults;
  p.max_unknown_hosts = limits.max_unknown_hosts;
  return p;
}

bool config::hands_over() const {
  if (store.configured || hands_over_calls(defaults.context)) return true;
  for (auto const& d : dependencies) {
    if (hands_over_calls(d.effective.context)) return true;
    for (auto const& r : d.routes)
      if (hands_over_calls(r.effective.context)) return true;
  }
  return false;
}

}  // namespace rebound::config
