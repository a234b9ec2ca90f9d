#pragma once
/** What rebound reads of a JSON Web Token (RFC 7519): only its `exp`, to know when a bearer
    token stops being accepted. The signature is not checked; that is the upstream's job,
    and rebound only needs to avoid sending a credential it knows has expired. */
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace rebound::auth {

using wall_clock = std::chrono::system_clock;

/// The `exp` claim of a JWT (`header.payload.signature`, base64url), or nullopt when the
/// token is not a JWT or has no numeric `exp`.
std::optional<wall_clock::time_point> jwt_expiry(std::string_view token);

/// The token of an `Authorization: Bearer <token>` value (scheme case-insensitive), or empty.
std::string_view bearer_token(std::string_view authorization);

/// base64url without padding (RFC 4648 section 5), as JWTs use it; nullopt when malformed.
std::optional<std::string> base64url_decode(std::string_view in);

/// Standard base64 with padding, for HTTP Basic credentials.
std::string base64_encode(std::string_view in);

}  // namespace rebound::auth
