#include "proxy/inbound/gate_step.hpp"

#include "proxy/idempotency/key.hpp"
#include "proxy/wire/upgrade.hpp"
#include "proxy/inbound/fingerprint.hpp"

#include <boost/beast/core/string.hpp>

#include <algorithm>

namespace rebound::inbound {
namespace {

gate_refusal invalid_key(std::string message) {
  return {400, "idempotency.key_invalid", "missing", std::move(message)};
}

/** The key as sent, by R-6's one rule (idempotency/key.hpp): a Structured Field string or a
    bare value, never two fields. Empty when absent; nullopt when malformed. */
std::optional<std::string> key_of(const http::head_fields& head) {
  auto const sent = idempotency::sent_key_in(head, idempotency::standard_key_field);
  if (!sent.value) return std::string();
  auto const key = idempotency::key_in_field(*sent.value);
  if (sent.repeated || idempotency::key_problem(key)) return std::nullopt;
  return std::string(key);
}

/** Who is asking: a hash of the field that names the caller (inbound.principal_header,
    Authorization by default), never its value (keys are the caller's own). nullopt when the
    field comes more than once: repeated fields are one list (RFC 9110 5.3), and behind a
    gateway that appends the identity instead of replacing it the first may be the caller's
    forgery. */
std::optional<std::string> principal_of(const http::head_fields& head, const std::string& field) {
  if (head.count(field) > 1) return std::nullopt;
  auto const who = head[field];
  return who.empty() ? std::string("anonymous") : sha256_hex(who).substr(0, 32);
}

std::variant<held_key, gate_refusal> idempotency_key_to_hold(const http::head_fields& head, std::string_view method,
                                                             const config::inbound_route& route,
                                                             const std::string& principal_header) {
  held_key k;
  auto key = key_of(head);
  if (!key) return invalid_key("Idempotency-Key must be one value of 1 to 64 printable characters, no commas");
  if (key->empty() && route.idempotency.require)
    return gate_refusal{400, "idempotency.key_missing", "missing",
                        "this route requires an Idempotency-Key on " + std::string(method) + " (R-6)"};
  k.key = std::move(*key);
  auto const principal = route.idempotency.scope_principal ? principal_of(head, principal_header) : std::string("*");
  if (!principal)
    return gate_refusal{400, "bad_request", "missing",
                        principal_header +
                            " (inbound.principal_header) names the caller and must come once: which one is meant "
                            "is unknown"};
  if (!k.key.empty()) k.scope = "key\n" + *principal + "\n" + route.match.path_prefix + "\n" + k.key;
  return k;
}

}  // namespace

gate_use gate_for(const config::inbound_route& r, const http::request_parser& parser) {
  auto const& req = parser.get();
  // A WebSocket handshake's answer is a 101 and a tunnel: nothing that can be pinned and
  // replayed. It goes to the app as a handshake, unpinned (forward() relays or refuses it).
  if (http::read_upgrade(req).what != http::upgrade_ask::kind::none) return gate_use::none;
  std::string_view const method(req.method_string().data(), req.method_string().size());
  bool const event = !r.dedupe.header.empty() && req.count(r.dedupe.header) > 0;
  if (event) return gate_use::gate;
  if (!r.idempotency.enabled || !r.keeps_keys_for(method)) return gate_use::none;
  // A key that is there (well-formed or not: a malformed one is the gate's 400) or required.
  if (r.idempotency.require || req.count(idempotency::standard_key_field) > 0) return gate_use::gate;
  return gate_use::unkeyed;
}

std::variant<held_key, gate_refusal> key_to_hold(const http::head_fields& head, std::string_view method,
                                                 const config::inbound_route& route,
                                                 const std::string& principal_header) {
  if (route.idempotency.enabled && route.keeps_keys_for(method)) {
    auto held = idempotency_key_to_hold(head, method, route, principal_header);
    if (std::holds_alternative<gate_refusal>(held) || std::get<held_key>(held).holds()) return held;
  }
  // No key held: the event id, when the route dedupes and the request carries one.
  if (route.dedupe.header.empty() || head.count(route.dedupe.header) == 0) return held_key{};
  held_key k;
  k.event = true;
  k.key = std::string(head[route.dedupe.header]);
  if (k.key.empty() || k.key.size() > 256) return invalid_key(route.dedupe.header + " must be 1 to 256 characters");
  k.scope = "event\n" + route.match.path_prefix + "\n" + k.key;
  return k;
}

gate_refusal no_store() {
  return {503, "store_unavailable", "missing",
          "this route keeps idempotency keys or event ids, but rebound started without a store: restart it to open "
          "one"};
}

gate_refusal body_too_large() { return {413, "bad_request", "missing", "body larger than inbound.max_body"}; }

gate_refusal claim_failed(const store::store_error& e) {
  // No room to remember the key: the request is not let through unprotected.
  if (e.full) return {507, "store_full", "not_stored", e.message, store::full_retry_after_s};
  return {503, "store_unavailable", "conflict", "the key store is unavailable: " + e.message};
}

claim_step after_claim(const held_key& k, const store::key_claim& claim, unsigned mismatch_status) {
  switch (claim.state) {
    case store::key_state::claimed:
      return {{"absent", "pending"}, to_app{}};
    case store::key_state::in_flight:
      return {{"pending", "pending"},
              gate_refusal{409, "idempotency.in_flight", "conflict",
                           "a request with this key is still being processed; retry later", 1, "in_flight"}};
    case store::key_state::mismatch:
      return {{"held", "mismatch"},
              gate_refusal{mismatch_status, "idempotency.payload_mismatch", "mismatch",
                           "this key was used with another payload; a new request needs a new key", std::nullopt,
                           "mismatch"}};
    case store::key_state::replay:
      break;
  }
  auto const& headers = claim.response.headers;
  bool const not_kept = std::any_of(headers.begin(), headers.end(),
                                    [](const auto& f) { return boost::beast::iequals(f.first, not_kept_field); });
  if (!k.event && not_kept)
    return {{"complete", "mismatch"},
            gate_refusal{409, "idempotency.answer_not_kept", "conflict",
                         "a request with this key completed with status " + std::to_string(claim.response.status) +
                             ", but its answer was larger than inbound.max_body and was not kept; a new request "
                             "needs a new key"}};
  // A repeated event is acknowledged, not answered again: the app already took it.
  if (k.event)
    return {{"complete", "replayed"}, replay{{200, {{"Content-Type", "application/json"}}, "{\"duplicate\":true}\n"}}};
  return {{"complete", "replayed"}, replay{claim.response}};
}

key_settlement settle_with(const held_key& k, const config::inbound_route& route, const store::pinned_response& answer,
                           bool whole) {
  bool const pin = k.event ? answer.status / 100 == 2 : answer.status < 500 && answer.status != 429;
  if (!pin) return {};
  auto const ttl = k.event ? route.dedupe.ttl : route.idempotency.ttl;
  if (whole) return {answer, ttl};
  return {store::pinned_response{answer.status, {{std::string(not_kept_field), "1"}}, {}}, ttl};
}

settled after_settle(bool completed, bool whole) {
  if (!completed) return {{"pending", "absent"}, "not_stored", "not-stored"};
  return {{"pending", "complete"}, whole ? "stored" : "not_kept", whole ? "stored" : "not-stored"};
}

app_failure_step after_app_failure(bool may_have_reached) {
  if (may_have_reached) return {false, {"pending", "pending"}};
  return {true, {"pending", "absent"}};
}

}  // namespace rebound::inbound
