#include "proxy/plan/request_plan.hpp"

#include "proxy/auth/jwt.hpp"
#include "proxy/idempotency/key.hpp"
#include "proxy/observe/correlation.hpp"
#include "proxy/retry/dependency_guard.hpp"
#include "proxy/retry/field_value.hpp"
#include "proxy/retry/grpc_timeout.hpp"
#include "proxy/retry/request_timeout.hpp"

#include <algorithm>

namespace rebound::plan {
namespace {

using http::error_reply;
using retry::error_type;

/// Which field carries the caller's own deadline through a door.
enum class deadline_field { none, request_timeout, grpc_timeout };

/// How a door's request comes by its R-6 key.
enum class key_rule {
  by_method,  ///< R-6 by its method (a gRPC call is a POST); made when the policy injects keys
  always,     ///< a hand-over: every delivery may go again, so a key is made when none came
  stored,     ///< a delivery: the key fixed when the task was stored
  gate,       ///< the inbound gate: a key the app's caller sent is the gate's (inbound/gate_step.cpp)
};

/// What each door reads of its head: the plan's phase chart (docs/architecture.md).
struct door_reads {
  bool makes_correlation_id;  ///< a request without one gets one, sent on as X-Request-ID
  deadline_field deadline;
  bool credential;  ///< its own bearer JWT bounds its retries (R-9)
  key_rule key;
};

constexpr door_reads reads_of(door d) {
  switch (d) {
    case door::http1:
      return {true, deadline_field::request_timeout, true, key_rule::by_method};
    case door::grpc:
      return {true, deadline_field::grpc_timeout, true, key_rule::by_method};
    case door::hand_over:
      // Named by its task id until delivered; its deadline is the policy's, from the accept.
      return {false, deadline_field::none, false, key_rule::always};
    case door::delivery:
      return {false, deadline_field::none, false, key_rule::stored};
    case door::inbound:
      // The caller's id names its lines; nothing is added to what reaches the app.
      return {false, deadline_field::none, false, key_rule::gate};
  }
  return {false, deadline_field::none, false, key_rule::by_method};
}

error_reply refusal(unsigned status, error_type type, std::string message, const request_in& in) {
  return error_reply{status, type, std::move(message), in.route.name, 0};
}

/// R-10's rule over a head whose traceparent (traceparent_of) is already read.
std::string_view correlation_id_of(const head_view& head, std::string_view traceparent) {
  return observe::correlation_id_of({head.value(request_id_field), head.value("X-Correlation-ID"), traceparent});
}

/// the caller's id, else a task's, else one made (the door sends it on).
void correlate(request_plan& plan, const head_view& head, const request_in& in, const door_reads& reads) {
  auto const traceparent = traceparent_of(head);
  if (!traceparent.empty()) {
    plan.caller_traceparent = traceparent;
    plan.facts.traceparent = plan.caller_traceparent;
  }
  auto id = correlation_id_of(head, traceparent);
  if (id.empty()) id = in.task_id;
  if (id.empty() && reads.makes_correlation_id) {
    auto const made = observe::new_correlation_id(in.rng);
    std::copy_n(made.digits.data(), made.digits.size(), plan.correlation_bytes.data());
    plan.facts.correlation_id = std::string_view(plan.correlation_bytes.data(), made.digits.size());
    plan.correlation_made = true;
    return;
  }
  // At most max_correlation_id (usable_correlation_id), a task id far less.
  // copy_n, not memcpy: an empty id may have no data at all.
  auto const n = std::min(id.size(), plan.correlation_bytes.size());
  std::copy_n(id.data(), n, plan.correlation_bytes.data());
  plan.facts.correlation_id = std::string_view(plan.correlation_bytes.data(), n);
}

/** The caller's X-Request-Timeout (retry/request_timeout.hpp): 400 when a value cannot be
    read (a caller that set a deadline must not silently get none), 504 when no time is left.
    Several fields are all read and the earliest wins; the attempts send one field of their own. */
std::optional<error_reply> take_request_timeout(request_plan& plan, const head_view& head, const request_in& in) {
  std::optional<std::chrono::milliseconds> least;
  std::optional<error_reply> bad;
  auto take = [&](std::string_view value) {
    if (bad) return;
    auto const v = retry::parse_request_timeout(value);
    if (auto const* m = std::get_if<retry::malformed_timeout>(&v)) {
      bad = refusal(400, error_type::bad_request, m->why, in);
      return;
    }
    auto const ms = std::get<std::chrono::milliseconds>(v);
    if (!least || ms < *least) least = ms;
  };
  head.each(retry::request_timeout_header, [&](std::string_view rest) {
    // `1, 2` in one field is the same list as two fields (RFC 9110 section 5.3); an element
    // left empty by a stray comma says nothing. A field that is empty as a whole is malformed.
    if (rest.find(',') == std::string_view::npos) return take(rest);
    while (!rest.empty()) {
      auto const comma = rest.find(',');
      auto const element = retry::trim_ows(rest.substr(0, comma));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      if (!element.empty()) take(element);
    }
  });
  if (bad) return bad;
  if (!least) return std::nullopt;
  if (least->count() == 0)
    return refusal(504, error_type::deadline_exceeded,
                   std::string(retry::request_timeout_header) + " left no time: nothing was sent", in);
  plan.facts.deadline = in.now + *least;
  return std::nullopt;
}

/// gRPC's grpc-timeout (retry/grpc_timeout.hpp): a malformed one is ignored, as gRPC servers do.
std::optional<error_reply> take_grpc_timeout(request_plan& plan, const head_view& head, const request_in& in) {
  auto const value = head.find("grpc-timeout").first;
  if (!value) return std::nullopt;
  auto const left = retry::parse_grpc_timeout(*value);
  if (!left) return std::nullopt;
  if (left->count() == 0) return refusal(504, error_type::deadline_exceeded, "grpc-timeout had run out on arrival", in);
  plan.facts.deadline = in.now + *left;
  return std::nullopt;
}

/// R-6 (idempotency/key.hpp): whether the request may be sent more than once, with which key.
std::optional<error_reply> take_key(request_plan& plan, const head_view& head, const request_in& in, key_rule rule) {
  auto& facts = plan.facts;
  if (rule == key_rule::gate) return std::nullopt;  // sent once, to the app
  if (rule == key_rule::stored) {
    plan.key = in.task_key;
    facts.idempotency_key = plan.key;
    facts.may_retry = true;
    return std::nullopt;
  }
  auto const& policy = *in.route.policy;
  auto const sent = head.find(policy.idempotency.header);
  bool const always = rule == key_rule::always;
  auto key = idempotency::plan_key({sent.first, sent.count > 1}, in.verb, always || policy.idempotency.inject,
                                   always ? idempotency::key_need::always : idempotency::key_need::by_method);
  if (key.refusal) return refusal(400, error_type::bad_request, std::move(*key.refusal), in);
  if (always && key.key.empty())
    return refusal(503, error_type::store_unavailable, "no idempotency key could be generated", in);
  plan.key = std::move(key.key);
  plan.key_made = key.made;
  facts.idempotency_key = plan.key;
  facts.may_retry = key.may_retry;
  facts.why_not = key.why_not;
  return std::nullopt;
}

}  // namespace

retry::request_facts facts_of(const dependency_route& route, std::string_view method, const request_target& t) {
  retry::request_facts facts;
  facts.dependency = route.name;
  facts.method = method;
  facts.path = path_of(t.origin_form);
  facts.tls = route.tls != nullptr;
  facts.server_address = t.connect_host;
  facts.server_port = t.port;
  return facts;
}

std::string_view correlation_id_of(const head_view& head) { return correlation_id_of(head, traceparent_of(head)); }

std::string_view traceparent_of(const head_view& head) {
  auto const l = head.find("traceparent");
  return l.count == 1 ? *l.first : std::string_view();
}

std::optional<http::error_reply> plan_request(request_plan& plan, const head_view& head, const request_in& in) {
  auto const reads = reads_of(in.through);
  plan.facts = facts_of(in.route, in.method, in.target);
  plan.facts.grpc = in.through == door::grpc;
  correlate(plan, head, in, reads);
  std::optional<error_reply> refused;
  if (reads.deadline == deadline_field::request_timeout)
    refused = take_request_timeout(plan, head, in);
  else if (reads.deadline == deadline_field::grpc_timeout)
    refused = take_grpc_timeout(plan, head, in);
  if (refused) return refused;
  if (reads.credential)
    if (auto const authorization = head.find("Authorization").first)
      plan.facts.credential_expires = auth::jwt_expiry(auth::bearer_token(*authorization));
  return take_key(plan, head, in, reads.key);
}

std::optional<http::error_reply> admit(retry::dependency_guard& guard) {
  auto const a = guard.admit();
  if (a.allowed) return std::nullopt;
  auto const secs = static_cast<unsigned>((a.retry_after.count() + 999) / 1000);
  return error_reply{503,
                     error_type::circuit_open,
                     "the circuit breaker of " + guard.name() + " is open; it lets a trial request through in " +
                         std::to_string(a.retry_after.count()) + " ms",
                     guard.name(),
                     0,
                     std::max(1u, secs)};
}

}  // namespace rebound::plan
