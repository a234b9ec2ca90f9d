#pragma once
/** The live objects behind a config's `tls` and `auth` keys: a TLS client per https://
    origin, built when a config is loaded or reloaded (so a bad CA bundle or key refuses the
    config, as a bad key would) and shared read-only by every worker afterwards. */
#include "config/config.hpp"
#include "proxy/upstream/tls_client.hpp"

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

namespace rebound::upstream {

class secure_origins {
 public:
  /** Builds what `cfg` asks for. Throws std::runtime_error naming the dependency when a
      file cannot be used. */
  explicit secure_origins(const config::config& cfg);

  /// The TLS client of a dependency with an https:// origin; nullptr otherwise.
  tls_client* tls_for(std::string_view dependency) const;

 private:
  std::unordered_map<std::string, std::shared_ptr<tls_client>> tls_;
};

}  // namespace rebound::upstream
