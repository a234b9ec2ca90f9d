#pragma once
/** What makes two requests "the same" for an idempotency key (R-6; seed 004): a SHA-256 over
    method, target and body. A JSON body is hashed in a canonical form (object keys sorted, no
    insignificant whitespace), so a client that re-serializes its payload on a retry, with
    its keys in another order, is still sending the same request. */
#include <string>
#include <string_view>

namespace rebound::inbound {

/// Lower-case hex SHA-256 of `data`.
std::string sha256_hex(std::string_view data);

/// `body` re-serialized canonically when it parses as JSON; nullopt-like empty result means
/// it is not JSON (the caller hashes the bytes as they are).
std::string canonical_json(std::string_view body, bool& ok);

/** The payload fingerprint: method, target (path and query) and the body, canonical when
    `content_type` names JSON (application/json, or any +json type). */
std::string payload_fingerprint(std::string_view method, std::string_view target, std::string_view content_type,
                                std::string_view body);

}  // namespace rebound::inbound
