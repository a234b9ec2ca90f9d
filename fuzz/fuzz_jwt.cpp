// what rebound reads of a bearer credential before sending it: the scheme, the JWT's
// base64url segments and its JSON payload's `exp`. Tokens come from files and token
// endpoints rebound does not control.
#include "proxy/auth/jwt.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view const in(reinterpret_cast<const char*>(data), size);
  (void)rebound::auth::jwt_expiry(in);
  (void)rebound::auth::jwt_expiry(rebound::auth::bearer_token(in));
  if (auto decoded = rebound::auth::base64url_decode(in)) (void)rebound::auth::base64_encode(*decoded);
  return 0;
}
