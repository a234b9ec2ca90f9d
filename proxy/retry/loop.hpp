#pragma once
/** The retry loop (SPEC 4.2): the one coroutine that runs attempts, hands each to the retry
    step (step.hpp) and waits what it says, watching the client and a drain meanwhile. */
#include "proxy/retry/policy.hpp"
#include "proxy/observe/log.hpp"
#include "proxy/retry/step.hpp"
#include "proxy/net.hpp"

#include <boost/asio/cancellation_signal.hpp>

#include <memory>
#include <random>

namespace rebound::retry {

/** What the loop watches while it waits between attempts. Null members are not used; the
    dependency's gate and observer come with the step_context (step.hpp). */
struct loop_hooks {
  const bool* draining = nullptr;  ///< a drain sends no further retry
  net::cancellation_slot drain;    ///< a drain emits here, ending a pending backoff wait
  tcp_socket* client = nullptr;    ///< watched during a backoff: a client that hangs up cancels the loop
};

/** How one protocol makes an attempt: HTTP/1.1 (http/retry_loop.hpp), CONNECT
    (http/tunnel.cpp), gRPC over HTTP/2 (grpc/) each implement it; the loop around it, and with it every rule of the
    standard, is written once. The views of a summary stay valid until `drop` or the next run. */
class attempt_runner {
 public:
  virtual ~attempt_runner() = default;
  /// One attempt, bounded by `deadline` (the attempt timeout or the loop's deadline).
  virtual net::awaitable<attempt_summary> run(std::chrono::steady_clock::time_point deadline) = 0;
  /// Lets go of the last attempt's response: it will not be returned, and a request waiting
  /// for its retry holds no connection or buffers.
  virtual void drop() = 0;
  /// The W3C traceparent the next attempt sends upstream, naming its own span (a traced
  /// request; observe/trace.hpp). A runner that cannot send one sends the caller's.
  virtual void trace_as(std::string_view traceparent) { (void)traceparent; }
};

/** A traced request's spans (observe/trace.hpp), shared by the loop and by delivery, which
    makes one attempt a claim: `traced_span` with what every span of a request carries
    (OpenTelemetry's HTTP and RPC attributes, seed 004's idempotency_key, rebound.dependency and
    rebound.correlation_id), `traced_attempt` an attempt's, tagged with its number, the wait
    before it (when known), and its status or error.type (seed 004). */
observe::span traced_span(const request_facts& facts, const observe::trace_id& trace, const observe::span_id& id,
                          const std::optional<observe::span_id>& parent, std::chrono::system_clock::time_point start,
                          observe::span::kind k);
observe::span traced_attempt(const request_facts& facts, const observe::trace_id& trace, const observe::span_id& id,
                             const std::optional<observe::span_id>& parent, std::chrono::system_clock::time_point start,
                             unsigned attempt, const attempt_summary& summary, std::optional<duration> waited);

/** Runs `attempt` until an outcome is final, retries are exhausted, or time is up (R-1..R-7,
    R-9's expiry), each attempt handed to the retry step. Without `hooks.drain`, the backoff
    wait is cancelled through the calling coroutine's own cancellation slot. */
net::awaitable<attempts_result> run_attempts(const step_context& ctx, attempt_runner& attempt, loop_hooks hooks);

}  // namespace rebound::retry
