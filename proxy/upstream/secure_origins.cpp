#include "proxy/upstream/secure_origins.hpp"

#include <stdexcept>

namespace rebound::upstream {

secure_origins::secure_origins(const config::config& cfg) {
  for (auto const& d : cfg.dependencies) {
    if (!d.tls || !d.origin) continue;
    try {
      tls_.emplace(d.name, std::make_shared<tls_client>(*d.tls, d.origin->host));
    } catch (const std::exception& e) {
      throw std::runtime_error("dependencies." + d.name + ": " + e.what());
    }
  }
}

tls_client* secure_origins::tls_for(std::string_view dependency) const {
  auto it = tls_.find(std::string(dependency));
  return it == tls_.end() ? nullptr : it->second.get();
}

}  // namespace rebound::upstream
