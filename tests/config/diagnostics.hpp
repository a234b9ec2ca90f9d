#pragma once
// Shared by the config tests: the findings a config text is refused with.
#include "config/load.hpp"

#include <string>
#include <vector>

/// Every finding of a refused config (errors and warnings), or nothing when it loads.
inline std::vector<rebound::config::diagnostic> errors_of(const std::string& yaml) {
  try {
    rebound::config::load_config_text(yaml, "t.yaml");
  } catch (const rebound::config::config_error& e) {
    return e.diagnostics();
  }
  return {};
}
