#include "proxy/retry/loop.hpp"

#include "proxy/retry/classify.hpp"
#include "proxy/retry/concurrency_lane.hpp"
#include "proxy/retry/decide.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <memory>

namespace rebound::retry {
namespace {

using clock = std::chrono::steady_clock;

/** Watches the client during a backoff: a client that hangs up cancels the wait. Bytes
    from the client are a pipelined request, which waits its turn; the watch then ends.
    Shared with the pending wait operation, which may complete after the loop moved on. */
struct client_watch {
  net::steady_timer* timer;
  bool active = true;
  bool client_gone = false;

  static void start(const std::shared_ptr<client_watch>& self, tcp_socket& client) {
    client.async_wait(tcp_socket::wait_read, [self, &client](error_code ec) {
      if (!self->active) return;  // the wait ended first; the socket may be gone
      bool gone = static_cast<bool>(ec);
      if (!gone) {
        char probe;
        error_code pec;
        auto const n = client.receive(net::buffer(&probe, 1), tcp_socket::message_peek, pec);
        if (pec == net::error::would_block || pec == net::error::try_again) return start(self, client);
        gone = pec || n == 0;
      }
      if (!gone) return;
      self->client_gone = true;
      self->timer->cancel();
    });
  }
};

enum class wait_end { elapsed, cancelled, client_gone };

wait_end end_watch(client_watch* watch, tcp_socket* client, error_code timer_ec) {
  if (!watch) return timer_ec ? wait_end::cancelled : wait_end::elapsed;
  watch->active = false;
  if (watch->client_gone) return wait_end::client_gone;
  error_code ignored;
  client->cancel(ignored);  // nothing else waits on the client during a backoff
  return timer_ec ? wait_end::cancelled : wait_end::elapsed;
}

/** The wait before a retry: until `wait` has passed, a drain cuts it short (hooks.drain), or
    the client hangs up (hooks.client). A coroutine of its own, so that its timer and watch
    are in the frame of a request only while it waits, not in every request's. */
net::awaitable<wait_end> wait_backoff(duration wait, loop_hooks& hooks) {
  net::steady_timer timer(co_await net::this_coro::executor);
  timer.expires_after(wait);
  std::shared_ptr<client_watch> watch;
  if (hooks.client) {
    watch = std::make_shared<client_watch>(client_watch{&timer});
    client_watch::start(watch, *hooks.client);
  }
  error_code ec;
  if (hooks.drain.is_connected()) {
    std::tie(ec) = co_await timer.async_wait(net::bind_cancellation_slot(hooks.drain, use_tuple));
    // Asio leaves the wait's cancellation handler in the slot, pointing at this timer: a
    // drain emitting after the timer is gone would reach freed memory.
    if (hooks.drain.is_connected()) hooks.drain.clear();
  } else {
    std::tie(ec) = co_await timer.async_wait(use_tuple);
  }
  co_return end_watch(watch.get(), hooks.client, ec);
}

/** Whether the caller gave up on the request: the coroutine running the loop was cancelled
    (an HTTP/2 client reset its stream or closed its connection, a gRPC client cancelled or
    passed its own deadline). Read without suspending: a cancelled coroutine that suspends
    again throws. What an attempt then reports is what the cancellation did, not
    what the dependency did: counting it would let any caller open the breaker for all. */
bool caller_gave_up(const net::cancellation_state& cs) { return cs.cancelled() != net::cancellation_type::none; }

/// The URL an attempt went to (OpenTelemetry's url.full): the host and port connected to, so
/// that it agrees with server.address and server.port; the path without its query (R-9).
std::string full_url(const request_facts& facts) {
  std::string url(facts.tls ? "https://" : "http://");
  bool const v6 = facts.server_address.find(':') != std::string_view::npos;
  if (v6) url += '[';
  url += facts.server_address;
  if (v6) url += ']';
  if (facts.server_port != (facts.tls ? 443 : 80)) {
    url += ':';
    url += std::to_string(facts.server_port);
  }
  url += facts.path;
  return url;
}

}  // namespace

observe::span traced_span(const request_facts& facts, const observe::trace_id& trace, const observe::span_id& id,
                          const std::optional<observe::span_id>& parent, std::chrono::system_clock::time_point start,
                          observe::span::kind k) {
  observe::span s;
  s.trace = trace;
  s.id = id;
  s.parent = parent;
  s.name = std::string(facts.method) + " " + std::string(facts.dependency);
  s.k = k;
  s.start = start;
  s.end = std::chrono::system_clock::now();
  // OpenTelemetry's HTTP (or RPC) attributes; seed 004's idempotency_key and attempt keep
  // their names; everything else of rebound's own is under rebound.
  s.attributes.push_back({"rebound.dependency", std::string(facts.dependency)});
  s.attributes.push_back({"http.request.method", std::string(facts.method)});
  s.attributes.push_back({"url.path", std::string(facts.path)});
  if (!facts.server_address.empty()) {
    s.attributes.push_back({"server.address", std::string(facts.server_address)});
    s.attributes.push_back({"server.port", std::int64_t{facts.server_port}});
    if (k == observe::span::kind::client) s.attributes.push_back({"url.full", full_url(facts)});
  }
  if (k == observe::span::kind::server) s.attributes.push_back({"url.scheme", std::string("http")});
  if (facts.grpc) {
    // A gRPC path is /package.Service/Method.
    auto const slash = facts.path.rfind('/');
    s.attributes.push_back({"rpc.system", std::string("grpc")});
    if (slash != std::string_view::npos && slash > 0) {
      s.attributes.push_back({"rpc.service", std::string(facts.path.substr(1, slash - 1))});
      s.attributes.push_back({"rpc.method", std::string(facts.path.substr(slash + 1))});
    }
  }
  if (!facts.idempotency_key.empty()) s.attributes.push_back({"idempotency_key", std::string(facts.idempotency_key)});
  if (!facts.correlation_id.empty())
    s.attributes.push_back({"rebound.correlation_id", std::string(facts.correlation_id)});
  return s;
}

observe::span traced_attempt(const request_facts& facts, const observe::trace_id& trace, const observe::span_id& id,
                             const std::optional<observe::span_id>& parent, std::chrono::system_clock::time_point start,
                             unsigned attempt, const attempt_summary& summary, std::optional<duration> waited) {
  auto s = traced_span(facts, trace, id, parent, start, observe::span::kind::client);
  s.name += " #" + std::to_string(attempt);
  s.attributes.push_back({"attempt", std::int64_t{attempt}});
  if (attempt > 1) s.attributes.push_back({"http.request.resend_count", std::int64_t{attempt - 1}});
  if (waited) s.attributes.push_back({"rebound.retry.wait_ms", static_cast<std::int64_t>(waited->count())});
  if (summary.failure) {
    s.attributes.push_back({"error.type", std::string(to_string(summary.failure->type))});
    s.error = true;
    s.message = summary.failure->message;
    return s;
  }
  if (summary.outcome.status)
    s.attributes.push_back({"http.response.status_code", std::int64_t{*summary.outcome.status}});
  if (summary.outcome.grpc_status)
    s.attributes.push_back({"rpc.grpc.status_code", std::int64_t{*summary.outcome.grpc_status}});
  if (classify(summary.outcome, retry_on::r4_default()) != verdict::success) {
    s.attributes.push_back({"error.type", outcome_name(summary.outcome)});
    s.error = true;
  }
  return s;
}

namespace {

/** A traced request's spans (observe/trace.hpp): one per attempt, child of the request's,
    and the request's own once the loop is left, however it is left. Seed 004: spans carry
    idempotency_key and attempt. */
class request_spans {
 public:
  request_spans(const step_context& ctx, const retry_step& step)
      : ctx_(ctx),
        step_(step),
        trace_(ctx.tracer ? ctx.tracer->begin(ctx.facts.traceparent, ctx.rng) : observe::request_trace{}) {}
  /// The loop's result, passed through once the request's span has it.
  attempts_result finish(attempts_result r) {
    record_request(r);
    return r;
  }
  /// A loop destroyed mid-way (its connection went with the worker) still closes its span.
  ~request_spans() { record_request(step_.result()); }

 private:
  void record_request(const attempts_result& r) {
    if (!trace_.sampled || recorded_) return;
    recorded_ = true;
    auto s = traced_span(ctx_.facts, trace_.trace, trace_.request, trace_.parent, start_, observe::span::kind::server);
    s.attributes.push_back({"rebound.attempts", std::int64_t{r.attempts}});
    if (r.client_gone) {
      s.attributes.push_back({"error.type", std::string("client_gone")});
    } else if (r.failure) {
      s.attributes.push_back({"error.type", std::string(to_string(r.failure->type))});
      s.error = true;
      s.message = r.failure->message;
    } else if (last_status_) {
      s.attributes.push_back({"http.response.status_code", std::int64_t{*last_status_}});
      s.error = *last_status_ >= 500;
    }
    ctx_.tracer->record(std::move(s));
  }

 public:
  request_spans(const request_spans&) = delete;
  request_spans& operator=(const request_spans&) = delete;

  /// Before an attempt: its span id, sent upstream by the runner. Nothing when not traced.
  void attempt_starts(attempt_runner& runner) {
    if (!trace_.sampled) return;
    attempt_ = observe::tracer::new_span_id(ctx_.rng);
    attempt_start_ = std::chrono::system_clock::now();
    runner.trace_as(observe::format_traceparent(trace_.trace, attempt_, true));
  }
  /// After it: what it came to, and the wait that went before it.
  void attempt_ended(const attempt_summary& summary) {
    last_status_ = summary.failure ? std::nullopt : summary.outcome.status;
    if (!trace_.sampled) return;
    ctx_.tracer->record(traced_attempt(ctx_.facts, trace_.trace, attempt_, trace_.request, attempt_start_,
                                       step_.result().attempts, summary, waited_));
  }
  void waits(duration d) { waited_ = d; }

 private:
  const step_context& ctx_;
  const retry_step& step_;
  observe::request_trace trace_;
  /// Read only for a recorded trace: an untraced request pays no clock read.
  std::chrono::system_clock::time_point start_ =
      trace_.sampled ? std::chrono::system_clock::now() : std::chrono::system_clock::time_point{};
  observe::span_id attempt_{};
  std::chrono::system_clock::time_point attempt_start_{};
  duration waited_{0};
  std::optional<unsigned> last_status_;
  bool recorded_ = false;
};

}  // namespace

dependency_gate& open_gate() {
  static dependency_gate g;  // stateless: its methods only return their defaults
  return g;
}

attempt_observer& silent_observer() {
  static attempt_observer o;  // stateless
  return o;
}

net::awaitable<attempts_result> run_attempts(const step_context& ctx, attempt_runner& attempt, loop_hooks hooks) {
  // Only this coroutine's locals and the step live in its frame: everything between two
  // attempts runs in the step's plain functions, so their temporaries (log fields, strings)
  // stay on the stack and not in every waiting request's frame (issue 4 measures it).
  auto const& policy = ctx.policy;
  retry_step step(ctx, clock::now() + policy.total_timeout);
  request_spans spans(ctx, step);
  for (;;) {
    auto const attempt_start = clock::now();
    auto const attempt_deadline = std::min(attempt_start + policy.attempt_timeout, step.deadline());
    // Every attempt needs room in the concurrency limit, a retry as much as the first: none
    // waits for it (a queue in front of a saturated dependency is what the limit prevents).
    concurrency_lane::slot slot;
    if (ctx.slots && !(slot = ctx.slots->take()).held()) {
      step.limited();
      co_return spans.finish(step.take_result());
    }
    spans.attempt_starts(attempt);
    auto summary = co_await attempt.run(attempt_deadline);
    slot.release(measures_load(summary));
    step.attempt_made(summary.hedges);
    // A client's own cancellation is nobody's failure: no breaker record, no budget, no
    // retry for a caller who left (HTTP/1.1 hang-ups end the same way).
    if (caller_gave_up(co_await net::this_coro::cancellation_state)) {
      step.caller_left("the client cancelled the request");
      co_return spans.finish(step.take_result());
    }
    auto const next = step.after(summary, attempt_start, {clock::now(), std::chrono::system_clock::now()},
                                 hooks.draining && *hooks.draining);
    spans.attempt_ended(summary);
    spans.waits(next.wait);
    if (!next.retry) co_return spans.finish(step.take_result());

    // The failed attempt's response is dropped with its connection and its buffers: reading
    // its body only to throw it away would spend the time the loop has left, and a request
    // waiting for its retry holds no I/O memory.
    attempt.drop();
    auto const ended = co_await wait_backoff(next.wait, hooks);
    if (ended == wait_end::client_gone) {
      step.caller_left("the client closed its connection");
      co_return spans.finish(step.take_result());
    }
    if (ended == wait_end::cancelled && caller_gave_up(co_await net::this_coro::cancellation_state)) {
      step.caller_left("the client cancelled the request");
      co_return spans.finish(step.take_result());
    }
    if (ended == wait_end::cancelled) {
      step.drain_cut(next.last_outcome);  // a drain cut the wait short
      co_return spans.finish(step.take_result());
    }
  }
}

}  // namespace rebound::retry
