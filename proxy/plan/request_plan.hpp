#pragma once
/** The one request plan: what every door (HTTP/1.1, gRPC, a hand-over, a delivery) decides
    about a request before its first attempt, in one order, from one reading of its head.

    The phases, in order (docs/architecture.md draws them per door):
      1. facts      the dependency, method, loggable path and where attempts go;
      2. correlate  R-10's correlation id: the caller's, else the task's, else one made;
                    the caller's traceparent;
      3. deadline   the caller's own deadline (X-Request-Timeout on HTTP/1.1, grpc-timeout on
                    gRPC), refused when unreadable or already spent;
      4. credential the `exp` of the request's own bearer JWT;
      5. key        R-6: the request's key, kept, made or refused, and whether it may go again.
    The breaker's admission follows as `admit`, once the door has done its own checks.

    The plan never edits the head: it says what the door sets on it (`edits_of`), in the head's
    own form (an HTTP/1.1 field, HTTP/2 metadata, a stored field). A refusal is rebound's one
    error shape (wire/error_reply.hpp), which each door writes in its protocol. */
#include "proxy/wire/error_reply.hpp"
#include "proxy/plan/dependency_route.hpp"
#include "proxy/plan/head_view.hpp"
#include "proxy/plan/request_target.hpp"
#include "proxy/retry/step.hpp"

#include <boost/beast/http/verb.hpp>

#include <array>
#include <chrono>
#include <optional>
#include <random>
#include <string>
#include <string_view>

namespace rebound::plan {

/// The ways a request comes in, as far as the plan reads their heads differently.
enum class door {
  http1,      ///< an HTTP/1.1 request on the proxy port, forwarded now
  grpc,       ///< a gRPC call on the proxy port's HTTP/2
  hand_over,  ///< an HTTP/1.1 call handed over for later delivery (answered 202)
  delivery,   ///< an attempt of a stored task
  inbound,    ///< a request the inbound listener passes to the app (R-6's server side)
};

/// The name under which rebound sends the correlation id it made.
inline constexpr std::string_view request_id_field = "X-Request-ID";

/// What the plan decided. `facts` views this plan, the route, the target and the head, which
/// must all outlive it; it is made in place and never copied.
struct request_plan {
  retry::request_facts facts;
  std::string key;                ///< R-6's key, the request's own or one made; facts.idempotency_key views it
  bool key_made = false;          ///< the door sets `key` on the head, under the policy's key field
  bool correlation_made = false;  ///< the door sends facts.correlation_id as request_id_field
  /// The caller's traceparent, copied: a traced attempt replaces that field, and the facts must
  /// not view what it frees.
  std::string caller_traceparent;

  /// Where facts.correlation_id lives: a copy (an HTTP/2 head moves its strings as it grows),
  /// held in place, not a malloc (issue 47).
  std::array<char, 128> correlation_bytes{};

  request_plan() = default;
  request_plan(const request_plan&) = delete;
  request_plan& operator=(const request_plan&) = delete;
};

/// What a request is, as the plan reads it.
struct request_in {
  door through;
  const dependency_route& route;
  const request_target& target;
  boost::beast::http::verb verb;  ///< gRPC: post, as on the wire
  std::string_view method;        ///< its name, as logged
  std::mt19937_64& rng;
  std::chrono::steady_clock::time_point now;
  /// A delivery's: the task's id (its correlation id when the stored call carried none) and
  /// the key it was stored with.
  std::string_view task_id = {};
  std::string_view task_key = {};
};

/** Runs the phases over `head` in their order. nullopt: the request may go on (the door sets
    the plan's edits on its head); else the refusal to answer, and nothing is sent. A hand-over
    and a delivery carry a key whatever their method (they are retried after any failure); a
    hand-over without one that rebound could make is refused 503. */
std::optional<http::error_reply> plan_request(request_plan& plan, const head_view& head, const request_in& in);

/// The fields the door sets on its head, by `set(name, value)`, after plan_request.
template <class Set>
void edits_of(const request_plan& plan, std::string_view key_field, Set&& set) {
  if (plan.correlation_made) set(request_id_field, plan.facts.correlation_id);
  if (plan.key_made) set(key_field, std::string_view(plan.key));
}

/** A request's facts as every door starts them: its dependency, method, loggable path
    and the upstream its attempts go to (TLS or not, host, port), which traces name. Views into
    `route`, `method` and `t`. */
retry::request_facts facts_of(const dependency_route& route, std::string_view method, const request_target& t);

/** R-10's correlation id of a head (observe/correlation.hpp's rule over X-Request-ID,
    X-Correlation-ID and traceparent), or empty: a view into `head`. */
std::string_view correlation_id_of(const head_view& head);

/// The caller's traceparent, or empty when there is none or more than one: W3C Trace Context
/// (test_traceparent_duplicated) has two such fields start a new trace, as an invalid one does.
std::string_view traceparent_of(const head_view& head);

/** The breaker's admission, for every door that refuses rather than waits: nullopt
    when the request may go, else the 503 circuit_open answer with a Retry-After of the time
    until a probe may go. A delivery asks the guard itself and postpones instead. */
std::optional<http::error_reply> admit(retry::dependency_guard& guard);

}  // namespace rebound::plan
