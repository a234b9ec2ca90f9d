#pragma once
/** Internal to config/: every key of a policy layer (the defaults, a dependency, a route;
    SPEC 2.1), one entry each, in one table: how the key is read from a layer into what the
    layer writes, and how the resolved value is described (GET /config). The value's type and
    default are retry's (retry/policy.hpp); how layers resolve is generic
    (load_policy.cpp: `resolve`). So a new policy key is its field on retry::policy, one entry
    here, and the rule that reads it. Not a public header. */
#include "config/object_writer.hpp"
#include "config/schema_reader.hpp"

#include <span>
#include <string_view>

namespace rebound::config {

struct policy_key {
  std::string_view name;  ///< the YAML key of a layer
  /// Reads the key from the layer's node `layer` (at `path`) into what the layer writes.
  void (*read)(reader& r, const YAML::Node& layer, const std::string& path, reader::policy_layer& l);
  /// Writes the resolved value as the YAML would hold it (nothing where it stays quiet).
  void (*describe)(object_writer& w, const policy& p);
  /// Tracked per dependency (R-7's budget and breaker, the concurrency limit, outlier
  /// ejection): a route may not set it, and a route's description leaves it out.
  bool per_dependency = false;
};

/// The table, in the order a policy is described.
std::span<const policy_key> policy_key_table();

/// Into `w`, the policy's keys as they would stand in the YAML; `per_dependency` keys only
/// for a dependency or the defaults (a route has none of its own).
void describe_policy(object_writer& w, const policy& p, bool with_per_dependency = true);

}  // namespace rebound::config
