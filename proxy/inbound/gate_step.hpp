#pragma once
/** The inbound gate's decisions (R-6's server side, seeds 002 and 004) as pure functions over
    values, beside the I/O shell that asks them (idempotency_gate.cpp), as `retry::decide`
    sits beside the retry step. A held key moves through the store's states:

        absent --claim--> pending --the app's answer pinned--> complete --its TTL--> absent
                             |  \--the app failed before taking it, or said "try again"--> absent
                             \--the app may have taken it, no answer--> pending until the lease ends

    and each function below is one step of that walk: whether a request is the gate's at all
    (`gate_for`), what it asks the gate to hold (`key_to_hold`), what the store's claim found
    (`after_claim`), what the app's answer does to the key (`settle_with`, `after_settle`,
    `after_app_failure`). Each says which move the key made (`key_move`, the `idempotency` log
    line's from_state and to_state) and, where the gate answers on its own, the refusal in
    SPEC 6's shape. No sockets, clocks or store here: the tests give values and read values. */
#include "config/config.hpp"
#include "proxy/wire/bounded_parser.hpp"
#include "proxy/wire/head_fields.hpp"
#include "proxy/store/task_store.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace rebound::inbound {

/** What the gate does with a request. `gate`: its route keeps keys for its method and it
    carries one (or must), or it carries the route's event id: answer_through_gate. `unkeyed`:
    a keyed route where a key is not required, and the request has none: forwarded as it is,
    streamed like any proxied request (its body is not held, whatever its size), and counted.
    `none`: not the gate's. */
enum class gate_use { none, unkeyed, gate };
gate_use gate_for(const config::inbound_route& route, const http::request_parser& parser);

/// What a request holds in the key store: its scope (the store's key), the key or event id
/// the client sent, and the payload's fingerprint (keys only). No scope: nothing is held.
struct held_key {
  std::string scope;
  std::string key;
  std::string hash;
  bool event = false;  ///< an event id (dedupe), not an Idempotency-Key
  bool holds() const { return !scope.empty(); }
};

/// An answer the gate gives on its own: no attempt went to the app.
struct gate_refusal {
  gate_refusal(unsigned status, std::string_view type, std::string_view outcome, std::string message,
               std::optional<unsigned> retry_after_s = std::nullopt, std::string_view trace_status = "refused")
      : status(status),
        type(type),
        outcome(outcome),
        message(std::move(message)),
        retry_after_s(retry_after_s),
        trace_status(trace_status) {}
  unsigned status;
  std::string_view type;     ///< SPEC 6's error type
  std::string_view outcome;  ///< retry_idempotent_total's outcome
  std::string message;
  std::optional<unsigned> retry_after_s;
  std::string_view trace_status;  ///< the span's rebound.idempotency_status
};

/// One move of a held key, as the `idempotency` log line names it.
struct key_move {
  std::string_view from;
  std::string_view to;
};

/// Marks a key whose request completed with an answer too large to keep (inbound.max_body):
/// what is pinned is only its status, and a duplicate is refused rather than run again.
inline constexpr std::string_view not_kept_field = "Rebound-Answer-Not-Kept";

/** What the request's head asks the gate to hold: its Idempotency-Key (R-6's one reading of
    the field, scoped by the caller and the route), its event id (`dedupe`), or nothing (a
    keyed route, no key, none required); or why the gate refuses it (400). */
std::variant<held_key, gate_refusal> key_to_hold(const http::head_fields& head, std::string_view method,
                                                 const config::inbound_route& route,
                                                 const std::string& principal_header);

/// A keyed route on a process that opened no store at start-up (a reload added it): refused
/// until a restart opens one, never let through unprotected.
gate_refusal no_store();
/// A body past inbound.max_body: the gate must read it whole to fingerprint and pin.
gate_refusal body_too_large();
/// The store could not claim the key: full (507, Retry-After) or unavailable (503).
gate_refusal claim_failed(const store::store_error& e);

/// The app is asked; the request now holds its key.
struct to_app {};
/// The client gets what is pinned for the key, and the app never sees the request.
struct replay {
  store::pinned_response answer;
};
struct claim_step {
  key_move move;
  std::variant<to_app, replay, gate_refusal> next;
};
/** What the store's claim found: the key was free (ask the app), is held by a request still
    under way (409, Retry-After: 1), was used with another payload (the route's
    mismatch_status), or completed (its answer replayed; an event acknowledged; an answer too
    large to have been kept refused 409, since running the request again is what R-6 forbids). */
claim_step after_claim(const held_key& k, const store::key_claim& claim, unsigned mismatch_status);

/// What the app's answer does to the key: pinned (`pin`, for `ttl`), or the key freed.
struct key_settlement {
  std::optional<store::pinned_response> pin;
  config::duration ttl{0};
};
/** 5xx and 429 say "try again": pinning them would answer every retry with the failure, so
    the key is freed; an event is kept only once the app took it (2xx). Any other answer
    completes the key: whole when `whole` (it fits inbound.max_body), else only its status
    under `not_kept_field`. */
key_settlement settle_with(const held_key& k, const config::inbound_route& route, const store::pinned_response& answer,
                           bool whole);

struct settled {
  key_move move;
  std::string_view outcome;  ///< retry_idempotent_total's outcome
  std::string_view word;     ///< the answer's Idempotency-Status
};
/// Where the key ended: `completed` when the store pinned the answer, else it was freed.
settled after_settle(bool completed, bool whole);

/// No answer from the app: the key is freed only if the app cannot have taken the request;
/// else a duplicate must not run it again before the lease ends.
struct app_failure_step {
  bool release = false;
  key_move move;
};
app_failure_step after_app_failure(bool may_have_reached);

}  // namespace rebound::inbound
