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

/// Every finding as `rebound check` prints it, a line each: what a test searches for words in.
inline std::string messages(const std::vector<rebound::config::diagnostic>& ds) {
  std::string s;
  for (auto const& d : ds) s += to_string(d) + "\n";
  return s;
}
