#pragma once
/** A credential rebound owns for a dependency (`auth:`, R-9; made in auth/): asked before every attempt
    for an Authorization value that is valid now, refreshing it first when it has expired or
    will within `refresh_skew`. A source that cannot give one says why; the attempt then
    fails with `auth_refresh_failed` and nothing is sent with a weaker credential or none. */
#include "proxy/net.hpp"

#include <chrono>
#include <optional>
#include <string>

namespace rebound::upstream {

using steady_clock = std::chrono::steady_clock;

struct credential {
  std::optional<std::string> authorization;  ///< `Bearer ...`; unset on failure
  std::string error;                         ///< why, never containing a secret
};

class credential_source {
 public:
  virtual ~credential_source() = default;
  /// Waits at most until `deadline` (a refresh under way elsewhere is waited for, not repeated).
  virtual net::awaitable<credential> authorization(steady_clock::time_point deadline) = 0;
};

/** SPEC 5: rebound's credential for a dependency (`configured`, null when it has none) goes on
    a request only when the request carries no Authorization of its own: an app that
    authenticates itself is never overridden. Every way in asks here. */
constexpr credential_source* credential_to_apply(credential_source* configured, bool request_has_authorization) {
  return request_has_authorization ? nullptr : configured;
}

}  // namespace rebound::upstream
