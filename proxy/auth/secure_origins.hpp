#pragma once
/** The live objects behind a config's `tls` and `auth` keys: a TLS client per https://
    origin and a credential source per `auth`, built when a config is loaded or reloaded (so
    a bad CA bundle or key refuses the config, as a bad key would) and shared by every
    worker afterwards. A reload keeps a dependency's credential source, and the token it
    holds, when its `auth` settings did not change. */
#include "config/config.hpp"
#include "proxy/upstream/credential_source.hpp"
#include "proxy/observe/log.hpp"
#include "proxy/upstream/tls_client.hpp"

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

namespace rebound::auth {

class secure_origins {
 public:
  /** Builds what `cfg` asks for, reusing `previous`'s credential sources where the auth
      settings are the same. Throws std::runtime_error naming the dependency when a file
      cannot be used. */
  secure_origins(const config::config& cfg, const observe::logger* log, const secure_origins* previous = nullptr);

  /// The TLS client of a dependency with an https:// origin; nullptr otherwise.
  upstream::tls_client* tls_for(std::string_view dependency) const;

  /// The credential source of a dependency with `auth`; nullptr otherwise.
  upstream::credential_source* auth_for(std::string_view dependency) const;

 private:
  struct credentials {
    config::auth_settings settings;
    std::shared_ptr<upstream::credential_source> source;
  };
  std::unordered_map<std::string, std::shared_ptr<upstream::tls_client>> tls_;
  std::unordered_map<std::string, credentials> auth_;
};

}  // namespace rebound::auth
