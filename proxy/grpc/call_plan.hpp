#pragma once
/** What unary and streaming gRPC calls share before and around their attempts: the checks
    of a call's head (loop guard, dependency, R-6 key, the caller's deadline), the head each
    attempt sends, and how an answer's head and trailers read as an attempt summary. */
#include "proxy/h2/client_connection.hpp"
#include "proxy/h2/message.hpp"
#include "proxy/runtime/session_context.hpp"
#include "proxy/plan/dependency_route.hpp"
#include "proxy/plan/request_plan.hpp"
#include "proxy/plan/request_target.hpp"
#include "proxy/retry/loop.hpp"

#include <chrono>
#include <optional>
#include <string>

namespace rebound::grpc {

using clock = std::chrono::steady_clock;

/// What a call's head says, checked once before its first attempt.
struct call_plan {
  std::optional<h2::message> refusal;  ///< set: answer this, nothing is sent
  plan::request_target target;
  plan::dependency_route route;
  std::string method, path;
  plan::request_plan request;  ///< the one request plan: facts, correlation, deadline, R-6 key
  std::string pool_key;        ///< the upstream connections' key (destination_of)
};

/** Checks a call's head and adds to it what travels on (x-request-id, the idempotency key,
    Via). `request.facts.may_retry` says what R-6 allows; the caller adds what its body allows. */
void plan_call(call_plan& plan, const runtime::session_context& ctx, h2::fields& head);

/** The answer for a call that goes nowhere (its head refused, or the dependency's breaker
    open), else nullopt. */
std::optional<h2::message> refused_before_attempts(call_plan& plan);

/// Where the call's attempts go (referring to `plan`, which must outlive it).
upstream::destination destination_of(call_plan& plan, const h2::fields& head);

/** The answer when the attempts ended without one to return: a trailers-only status for
    rebound's error type, logged as the HTTP/1.1 path logs its upstream errors. */
h2::message failed_answer(const runtime::session_context& ctx, call_plan& plan, const retry::attempts_result& result);

/// The head an attempt sends: the scheme of its connection, the time left as its
/// grpc-timeout (none for a `deadline` of time_point::max()), and the attempts before it, as
/// gRPC's own retries say (gRPC A6).
h2::fields attempt_head(const h2::fields& head, bool tls, clock::time_point deadline, unsigned attempt);

/** An answer as the decision reads it: :status, grpc-status and grpc-retry-pushback-ms from
    the trailers, or from the head of a trailers-only answer (`trailers` empty), Retry-After,
    and what a rebound further along said of its retries (retry/layers.hpp). The summary's
    views point into `head` and `trailers`. */
void summarize(const h2::fields& head, const h2::fields& trailers, retry::attempt_summary& s);

/** The connection an attempt goes on, and its head given rebound's credential when
    `to.auth` is set: fetched, or refreshed, before every attempt. */
net::awaitable<boost::system::result<std::shared_ptr<h2::client_connection>, retry::attempt_failure>> connect_attempt(
    h2::client_pool& pool, const upstream::destination& to, h2::fields& head, clock::time_point deadline);

/** What an answer says of this layer, as HTTP/1.1 answers say it (SPEC 4, issue 22):
    `rebound-attempts`, replacing what a rebound further along said; `rebound-retried:
    exhausted` when the attempts retried and gave up; `rebound-overloaded: 1` when rebound
    refused the call to protect the dependency (`failure` an open breaker or spent budget). */
void say_what_this_layer_did(h2::fields& head, const retry::attempts_result& result,
                             std::optional<retry::error_type> failure = std::nullopt);

/** A `grpc-retry-pushback-ms` the upstream sent malformed goes on to the client as `-1`.
    gRFC A6 reads a malformed pushback as "do not retry", and so did rebound (R-5,
    pushback_refused): the client gets that decision in the form A6 gives it, not bytes its
    own library may parse another way. A well-formed one goes on unchanged. */
void keep_pushback_well_formed(h2::fields& fields);

/// An HTTP/2 failure as R-4 classifies it.
retry::attempt_failure failure_of(const h2::failure& f);

/// rebound's own answer for a failure of type `t`: trailers-only, with rebound-error.
h2::message refuse(retry::error_type t, const std::string& message);

void set_field(h2::fields& fs, std::string_view name, std::string value);
std::optional<unsigned> status_number(const std::string* v);

}  // namespace rebound::grpc
