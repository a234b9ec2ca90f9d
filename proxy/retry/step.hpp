#pragma once
/** The retry step: everything that happens between one attempt and the next, for every way
    in (HTTP/1.1 requests, CONNECT's connect, gRPC unary and streaming calls, hedged copies,
    async delivery). Envoy's `RetryState::shouldRetry` beside the pure `decide`: the step
    records the attempt (metrics and the breaker), asks `decide` (R-1..R-6, R-9's expiry),
    asks the budget for a retry that would really go, and logs what it did. It owns
    these effects and nothing else does.

    It never waits and never reads a clock or a socket: the caller passes the time in, the
    loop (loop.hpp) waits what it returns, delivery stores it as the task's next attempt. A
    caller's own cancellation never reaches it: the loop sees it first and ends, since it is
    nobody's failure (a caller could otherwise open a breaker for everyone). */
#include "proxy/retry/policy.hpp"
#include "proxy/observe/log.hpp"
#include "proxy/observe/trace.hpp"
#include "proxy/retry/decide.hpp"
#include "proxy/retry/layers.hpp"
#include "proxy/retry/loop_hooks.hpp"
#include "proxy/retry/attempt_failure.hpp"
#include "proxy/retry/concurrency_limit.hpp"

#include <boost/asio/ip/address.hpp>

#include <chrono>
#include <optional>
#include <random>
#include <string>
#include <string_view>

namespace rebound::retry {

class concurrency_lane;

/** What the step needs to know about the request, beyond its policy. It lives in the frame
    of every request's coroutine: its flags and the port share one word, to keep those frames
    small (bench/README.md, issue 47). */
struct request_facts {
  bool may_retry = false;  ///< R-6 allows it and the body is buffered
  bool grpc = false;       ///< a gRPC call: its logs name grpc_method and grpc_status
  /// Where the attempts go, for traces' url.full, server.address and server.port: set by
  /// plan::facts_of (an `origin:`'s host and port), empty where no span reads it.
  bool tls = false;  ///< rebound speaks TLS to the upstream
  std::uint16_t server_port = 0;
  std::string_view server_address;  ///< IPv6 without brackets
  std::string_view why_not;         ///< for the log, when !may_retry
  std::string_view dependency;
  std::string_view method;
  std::string_view path;  ///< without the query (R-9); a gRPC call's is its method
  std::string_view correlation_id;
  std::string_view idempotency_key;
  /// The `exp` of the request's own bearer JWT: no retry is sent once it has passed.
  std::optional<std::chrono::system_clock::time_point> credential_expires;
  /// A deadline the caller gave (gRPC's grpc-timeout), when it comes before total_timeout's.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  /// The caller's W3C traceparent, empty without one: a traced request continues its trace.
  std::string_view traceparent;
  /// What names the request in every line about it.
  observe::request_summary summary() const { return {correlation_id, dependency, method, path}; }
};

/// One attempt as the step reads it: what came back, and the waits the upstream asked for.
struct attempt_summary {
  std::optional<retry::attempt_failure> failure;  ///< set when no response came back
  attempt_outcome outcome;                        ///< the response's status (and grpc-status)
  std::optional<std::string_view> retry_after;    ///< R-5: Retry-After
  std::optional<std::string_view> grpc_pushback;  ///< R-5 for gRPC: grpc-retry-pushback-ms
  /// Whether the request can still be sent again: false once a streamed request body has
  /// outgrown what is kept of it (max_retry_body).
  bool repeatable = true;
  layer_signal below;  ///< what the answering layer said of itself
  /// Hedges sent during this run (hedge.hpp): each is an attempt of its own, counted in
  /// Rebound-Attempts and against max_retries.
  unsigned hedges = 0;
  /// Which copy of this run the summary is from: 0 the first, n the n-th hedge.
  unsigned answered_by = 0;
  /// When that copy started; unset: when the run started.
  std::optional<std::chrono::steady_clock::time_point> started;
  /// The upstream address the attempt went to; unspecified when it made no connection or
  /// the door does not say (the attempt's log line names it).
  boost::asio::ip::address address;
};

/** What an answer's head says to the step, read in one place for every door: R-5's
    Retry-After and, `with_layers`, what the layer that sent it said of its own retries
    (layers.hpp). `each(visit)` calls `visit(name, value)` for every field of the head, from
    whichever store holds it (an HTTP/1.1 field list; HTTP/2 trailers, then the head); one
    pass reads them all. The summary views the values. */
template <class Each>
void read_answer_head(Each&& each, attempt_summary& s, bool with_layers = true) {
  answer_fields found;
  each([&found](std::string_view name, std::string_view value) { found.take(name, value); });
  s.retry_after = found.retry_after;
  if (with_layers) s.below = read_layer_signal(found.layers);
}

/// concurrency_limit.hpp's measures_load, for an attempt's summary.
inline bool measures_load(const attempt_summary& s) {
  return measures_load(s.failure ? std::optional<error_type>(s.failure->type) : std::nullopt);
}

struct attempts_result {
  unsigned attempts = 0;
  std::optional<retry::attempt_failure> failure;  ///< set when no response is left to return
  bool client_gone = false;                       ///< the client hung up during a backoff
  bool gave_up = false;  ///< retried and gave up: the answer says `Rebound-Retried: exhausted` (layers.hpp)
};

/** Records one finished attempt: the observer's count, and the breaker's, which counts what
    R-4 calls a transient failure whatever the route's retry_on narrows. The one place an
    attempt reaches a breaker; copies a hedge cancelled have no outcome and do not reach it. */
void record_attempt(dependency_gate& gate, attempt_observer& observer, const attempt_report& r);

/// Whom the step reports to, for as long as the request runs.
struct step_context {
  const retry::policy& policy;
  const request_facts& facts;
  const observe::logger& log;
  std::mt19937_64& rng;
  dependency_gate& gate;
  attempt_observer& observer;
  /** Whether the step asks the budget before it schedules a retry. Delivery does not:
      its retry is sent when the task is claimed, maybe hours later, and the budget is asked
      then (a refusal postpones the task instead of ending it). */
  bool asks_budget = true;
  /// Where the request's spans go (observe/trace.hpp); null: not traced.
  observe::tracer* tracer = nullptr;
  /** This worker's share of the dependency's concurrency limit (concurrency_lane.hpp); null:
      none. The loop takes a slot for each attempt and the step asks it for room before it
      schedules a retry, so retries and hedges never exceed the limit. */
  concurrency_lane* slots = nullptr;
};

/// The clocks, read by the caller: the step takes time as a value, so tests choose it.
struct step_time {
  std::chrono::steady_clock::time_point now;
  std::chrono::system_clock::time_point wall_now;
};

/// What follows an attempt.
struct next_step {
  bool retry = false;
  duration wait{0};
  /// Why there is no retry, when decide said so (unset: the budget refused, or a drain).
  std::optional<stop_reason> stopped;
  std::string last_outcome;  ///< for the message when a drain cuts the wait
};

class retry_step {
 public:
  /** `deadline`: R-3's, when the whole request is out of time (total_timeout from its start,
      or the caller's own deadline when that is sooner). `attempts_before`: attempts an
      earlier process already made in this window (delivery); 0 for a request. */
  retry_step(step_context ctx, std::chrono::steady_clock::time_point deadline, unsigned attempts_before = 0);

  /// Counts an attempt (and the hedges its run sent) before its summary is judged.
  void attempt_made(unsigned hedges = 0) { result_.attempts += 1 + hedges; }

  /** After an attempt that started at `attempt_start`: R-3's deadline over the attempt's own
      timeout, the record, `decide`, the budget for a retry that would go, and the logs.
      `draining`: a draining process sends no further retry and logs no stop. */
  next_step after(attempt_summary& summary, std::chrono::steady_clock::time_point attempt_start, step_time at,
                  bool draining);

  /// The caller left (hung up, cancelled): nobody to answer, nothing counted against anyone.
  void caller_left(std::string_view reason);

  /// A drain cut the wait for a retry: the client learns what the last attempt was.
  void drain_cut(const std::string& last_outcome);

  /// The concurrency limit had no slot for the next attempt: it is not sent, and the client
  /// gets 503 concurrency_limited (an overload signal: no layer retries it).
  void limited();

  std::chrono::steady_clock::time_point deadline() const { return deadline_; }
  unsigned max_attempts() const { return max_attempts_; }
  const attempts_result& result() const { return result_; }
  attempts_result take_result() { return std::move(result_); }

 private:
  step_context ctx_;
  std::chrono::steady_clock::time_point deadline_;
  unsigned max_attempts_;
  duration previous_wait_{0};
  attempts_result result_;
  bool ended_ = false;

  next_step judge(attempt_summary& summary, std::chrono::steady_clock::time_point attempt_start, step_time at,
                  bool draining);
  /// What decide() reads of this attempt (and the run so far).
  attempt_facts decision_input(const attempt_summary& summary, const attempt_outcome& outcome, step_time at);
  /// decide() said stop: the log line its reason calls for, and what the client is told.
  next_step stopped(const stop& s, const attempt_summary& summary, const attempt_outcome& outcome, bool draining);
  /// decide() said retry: R-7's permit, then the wait and its `retry_attempt` line.
  next_step retrying(const retry_in& go, const attempt_summary& summary, const attempt_outcome& outcome,
                     std::chrono::microseconds took);
  /// Room in the concurrency limit, then R-7's budget and breaker, for a retry about to be scheduled.
  retry_permit permit_retry();
  void end(call_end how);
};

}  // namespace rebound::retry
