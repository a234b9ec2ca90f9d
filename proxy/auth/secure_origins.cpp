#include "proxy/auth/secure_origins.hpp"

#include "proxy/auth/bearer_file.hpp"
#include "proxy/auth/oauth2_client.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace rebound::auth {
namespace {

/// The loader only warns about files it cannot read (`rebound check` runs where secrets are
/// not mounted); the proxy does not start without them.
void require_readable(const std::string& key, const std::string& path) {
  if (::access(path.c_str(), R_OK) != 0)
    throw std::runtime_error(key + " \"" + path + "\" cannot be read: " + std::strerror(errno));
}

std::shared_ptr<upstream::credential_source> make_source(const config::dependency& d, const observe::logger* log) {
  auto const& a = *d.auth;
  if (a.type == config::auth_settings::kind::bearer_file) {
    require_readable("auth.path", a.path);
    return std::make_shared<bearer_file>(a.path);
  }
  require_readable("auth.client_secret_file", a.client_secret_file);
  std::shared_ptr<upstream::tls_client> tls;
  if (a.token_url.origin.scheme == "https") {
    config::tls_settings t;
    t.ca_file = a.token_ca_file;
    try {
      tls = std::make_shared<upstream::tls_client>(t, a.token_url.origin.host);
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string("auth.") + e.what());
    }
  }
  return std::make_shared<oauth2_client>(a, d.name, std::move(tls), log);
}

}  // namespace

secure_origins::secure_origins(const config::config& cfg, const observe::logger* log, const secure_origins* previous) {
  for (auto const& d : cfg.dependencies) {
    try {
      if (d.tls && d.origin) tls_.emplace(d.name, std::make_shared<upstream::tls_client>(*d.tls, d.origin->host));
      if (!d.auth) continue;
      if (previous) {
        if (auto it = previous->auth_.find(d.name); it != previous->auth_.end() && it->second.settings == *d.auth) {
          auth_.emplace(d.name, it->second);
          continue;
        }
      }
      auth_.emplace(d.name, credentials{*d.auth, make_source(d, log)});
    } catch (const std::exception& e) {
      throw std::runtime_error("dependencies." + d.name + ": " + e.what());
    }
  }
}

upstream::tls_client* secure_origins::tls_for(std::string_view dependency) const {
  if (tls_.empty()) return nullptr;  // asked on every request: no key to build for most configs
  auto it = tls_.find(std::string(dependency));
  return it == tls_.end() ? nullptr : it->second.get();
}

upstream::credential_source* secure_origins::auth_for(std::string_view dependency) const {
  if (auth_.empty()) return nullptr;
  auto it = auth_.find(std::string(dependency));
  return it == auth_.end() ? nullptr : it->second.source.get();
}

}  // namespace rebound::auth
