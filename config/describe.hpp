#pragma once
/** The effective configuration as JSON, for the admin API's `GET /config` (SPEC 7).

    Written field by field from an allow-list, never by walking the YAML: a key added to the
    config shows up here only when someone writes it here, so a secret added later (a client
    secret, a token) cannot leak by default. The config holds file paths to secrets, never
    the secrets themselves (R-9: `rebound check` refuses an inline one), so nothing needs
    redacting here.
    The output is itself a valid config (JSON is YAML) with every policy resolved: each
    dependency carries its effective policy, so loading it gives back the same behaviour.
    Durations and sizes use the YAML's own spelling. */
#include "config/config.hpp"

#include <string>

namespace rebound::config {

std::string effective_config_json(const config& cfg);

/// One resolved policy as JSON, its keys as in the YAML, without the per-dependency budget
/// and breaker (a registered policy's answer on the admin API).
std::string policy_json(const policy& p);

}  // namespace rebound::config
