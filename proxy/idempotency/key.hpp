#pragma once
/** which methods may be retried as they are, which need an Idempotency-Key, and the
    keys rebound makes itself. */
#include <ostream>  // boost/core/detail/string_view.hpp (1.81) uses std::ostream without including it

#include <boost/beast/http/verb.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace rebound::idempotency {

/// GET, HEAD, OPTIONS, PUT and DELETE may be retried without further measures.
bool retry_safe_method(boost::beast::http::verb v);

/// POST and PATCH may be retried only with an idempotency key.
bool needs_key(boost::beast::http::verb v);

/// keys are at most 64 characters.
inline constexpr std::size_t max_key_length = 64;

/** Why a key the application sent is refused (too long, or not printable ASCII), or
    nullopt when it is acceptable. Checked before anything is sent. */
std::optional<std::string> key_problem(std::string_view key);

/// A random UUIDv4 (RFC 9562) from OpenSSL's CSPRNG; nullopt if the CSPRNG fails.
std::optional<std::string> new_key();

}  // namespace rebound::idempotency
