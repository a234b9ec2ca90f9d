#pragma once
/** A request's dependency, looked up once when its head is vetted and handed to every step
    that needs it: the retry loop, the single-attempt path and CONNECT never look it up again.
    SPEC section 2: a configured dependency, or the defaults under the name `host:port`. */
#include "config/config.hpp"
#include "proxy/retry/dependency_guard.hpp"

#include <memory>
#include <string>

namespace rebound::upstream {
class tls_client;
}
namespace rebound::auth {
class credential_source;
}

namespace rebound::http {

struct dependency_route {
  std::string name;                                ///< the key of budgets, breakers, metrics and logs
  const config::policy* policy = nullptr;          ///< for the request's method and path (SPEC 3)
  const config::dependency* dependency = nullptr;  ///< null for an unknown host
  /// Budget and breaker, held for the whole request: a reload may replace them meanwhile.
  std::shared_ptr<retry::dependency_guard> guard;
  upstream::tls_client* tls = nullptr;      ///< the origin's TLS client when it is https://, else null
  auth::credential_source* auth = nullptr;  ///< rebound's credential for the dependency (R-9), if configured
};

}  // namespace rebound::http
