#pragma once
/** The enforcement table of the retry standard over one resolved policy: the findings
    `rebound check` reports and the loader refuses (errors) or logs (warnings), SPEC 2.1.
    YAML-free: the loader attaches each finding to the line that set the key. */
#include "config/config.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace rebound::config {

struct policy_finding {
  std::string_view key;  ///< relative to the policy: max_retries, total_timeout, budget.window, ...
  std::string message;
  std::string rule;  ///< R-1 .. R-7; empty for a plain schema finding
  bool warning = false;
};

/// R-1 (backoff), R-2 (max_retries per context, approvals), R-3 (total_timeout per
/// context), R-6 (inject: false), R-7 (budget window), R-8 (dead_letter: off where calls are
/// handed over), and timeouts above zero.
std::vector<policy_finding> check_policy(const policy& p);

}  // namespace rebound::config
