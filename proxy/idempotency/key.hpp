#pragma once
/** which methods may be retried as they are, which need an Idempotency-Key, and the
    keys rebound makes itself. */
#include <ostream>  // boost/core/detail/string_view.hpp (1.81) uses std::ostream without including it

#include <boost/beast/http/verb.hpp>

#include <optional>
#include <string>
#include <string_view>

namespace rebound::idempotency {

/// GET, HEAD, OPTIONS, PUT and DELETE may be retried without further measures
/// (retry::idempotent_method's list, read for a Beast verb).
bool retry_safe_method(boost::beast::http::verb v);

/// POST and PATCH may be retried only with an idempotency key.
bool needs_key(boost::beast::http::verb v);

/// keys are at most 64 characters.
inline constexpr std::size_t max_key_length = 64;

/** Why a key is refused, or nullopt when it is acceptable: R-6's one rule for a valid key,
    for every way in (HTTP/1.1, gRPC metadata, hand-over, the task API, the inbound gate).
    1..64 characters of printable ASCII, without '"', '\\' or ',': a comma is two keys
    folded into one field, and quotes or backslashes would read differently as a Structured
    Field string. Checked before anything is sent. */
std::optional<std::string> key_problem(std::string_view key);

/** A key field's value as the key: a Structured Field string (`"..."`, as the IETF draft
    has it) is unquoted, a bare value (as Stripe's clients send it) taken as it is. */
std::string_view key_in_field(std::string_view value);

/// Whether a request needs a key to go more than once: by its method, or always (a
/// handed-over call or a task, which delivery retries after any failure).
enum class key_need { by_method, always };

/// What a request sends of its key field.
struct sent_key {
  std::optional<std::string_view> value;  ///< the field's value; nullopt: absent
  bool repeated = false;                  ///< more than one such field: two keys, refused
};

/// The IETF draft's name of the field (and Stripe's): the inbound gate's, and a policy's default.
inline constexpr std::string_view standard_key_field = "Idempotency-Key";

/// What an HTTP/1.1 head sends of the key field `name`: the one place a Beast head's key is read.
template <class Fields>
sent_key sent_key_in(const Fields& head, std::string_view name) {
  auto const it = head.find(name);
  if (it == head.end()) return {};
  return {std::string_view(it->value().data(), it->value().size()), head.count(name) > 1};
}

/// R-6 for one request, decided before anything is sent; the caller sets `key` on the
/// request when `made`.
struct key_plan {
  std::string key;                     ///< the key the request goes with; empty: none
  bool made = false;                   ///< rebound made `key` (idempotency.inject, or `always`)
  bool may_retry = false;              ///< R-6 lets the request go more than once
  std::string_view why_not;            ///< why not, when !may_retry
  std::optional<std::string> refusal;  ///< the request's own key is not valid: 400, nothing sent
};

/** The one R-6 decision: the request's own key when valid, else (for a method that needs
    one, or `always`) one made when `inject` allows it. A made key that the CSPRNG could not
    give leaves `key` empty. */
key_plan plan_key(const sent_key& sent, boost::beast::http::verb method, bool inject,
                  key_need need = key_need::by_method);

/// A random UUIDv4 (RFC 9562) from OpenSSL's CSPRNG; nullopt if the CSPRNG fails.
std::optional<std::string> new_key();

}  // namespace rebound::idempotency
