#include "proxy/retry/loop.hpp"

#include "proxy/retry/classify.hpp"
#include "proxy/retry/decide.hpp"
#include "proxy/retry/hedge.hpp"
#include "proxy/retry/layers.hpp"
#include "proxy/retry/request_timeout.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <memory>

namespace rebound::retry {
namespace {

using clock = std::chrono::steady_clock;

/** What the loop carries from attempt to attempt. The coroutine keeps only this and a few
    locals in its frame; everything between two attempts runs in plain functions, so their
    temporaries (log fields, strings) live on the stack and not in every waiting request's
    frame: 10,000 requests in backoff cost 10,000 frames (issue 4 measures it). */
struct loop_state {
  const config::policy& policy;
  const request_facts& facts;
  const observe::logger& log;
  std::mt19937_64& rng;
  dependency_gate& gate;
  attempt_observer& observer;
  clock::time_point total_deadline;
  unsigned max_attempts;
  duration previous_wait;
  attempts_result result;
};

/// Whether another attempt follows, and after how long.
struct next_step {
  bool retry = false;
  duration wait{0};
  std::string last_outcome;  ///< for the message when a drain cuts the wait
};

/** Everything between an attempt and the next one, but the wait: `decide` (R-1 to R-6,
    R-9's expiry), then the effects it leaves to the loop: the breaker's record, a drain,
    R-7's budget (asked last, so only a retry that would really go spends it), the logs. */
next_step between_attempts(loop_state& st, attempt_summary& summary, clock::time_point attempt_start, bool draining) {
  auto& failure = summary.failure;
  auto& result = st.result;
  auto const& facts = st.facts;
  auto const& policy = st.policy;
  // when the loop's deadline, not the attempt's, cut the attempt short, the whole
  // request is out of time.
  if (failure && failure->type == error_type::attempt_timeout &&
      std::min(attempt_start + policy.attempt_timeout, st.total_deadline) == st.total_deadline)
    failure = upstream::attempt_failure{
        error_type::deadline_exceeded, facts.deadline && *facts.deadline == st.total_deadline
                                           ? "the caller's deadline passed (grpc-timeout or X-Request-Timeout)"
                                           : "total_timeout reached"};
  attempt_outcome const outcome = failure ? attempt_outcome{std::nullopt, failure->type} : summary.outcome;
  result.failure = failure;
  auto const took =
      std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - summary.started.value_or(attempt_start));
  // A hedged run (hedge.hpp) sent result.attempts - hedges + 1 .. result.attempts; the
  // others' reports were made by the hedging.
  st.observer.attempt_done({result.attempts - summary.hedges + summary.answered_by, outcome, took});
  // The breaker counts what R-4 calls a transient failure, whatever retry_on narrows.
  st.gate.record(classify(outcome, retry_on::r4_default()) == verdict::retryable);

  attempt_facts af;
  af.outcome = outcome;
  if (!failure) {
    af.retry_after = summary.retry_after;
    af.grpc_pushback = summary.grpc_pushback;
    af.below = summary.below;
  }
  af.attempts = result.attempts;
  af.may_repeat = facts.may_retry && summary.repeatable;
  af.previous_wait = st.previous_wait;
  af.now = clock::now();
  af.deadline = st.total_deadline;
  af.wall_now = std::chrono::system_clock::now();
  af.credential_expires = facts.credential_expires;
  af.u = std::uniform_real_distribution<double>(0.0, 1.0)(st.rng);
  auto const d = decide(policy, af);

  if (auto const* s = std::get_if<stop>(&d)) {
    result.gave_up = gave_up_after_retrying(s->reason, result.attempts);
    switch (s->reason) {
      case stop_reason::final:
        return {};
      case stop_reason::not_repeatable:
        if (policy.max_retries > 0 && result.attempts == 1)
          st.log.info("retry_skipped", {{"correlation_id", facts.correlation_id},
                                        {"dependency", facts.dependency},
                                        {"method", facts.method},
                                        {"path", facts.path},
                                        {"error_type", outcome_name(outcome)},
                                        {"reason", summary.repeatable ? facts.why_not
                                                                      : std::string_view("the streamed request outgrew "
                                                                                         "max_retry_body: sent once")}});
        return {};
      case stop_reason::exhausted:
        st.log.warn("retry_exhausted", {{"correlation_id", facts.correlation_id},
                                        {"dependency", facts.dependency},
                                        {"attempts", result.attempts},
                                        {"max_attempts", st.max_attempts},
                                        {"error_type", outcome_name(outcome)},
                                        {"idempotency_key", facts.idempotency_key}});
        st.observer.exhausted();
        return {};
      case stop_reason::layered:
      case stop_reason::overloaded:
        st.observer.declined(to_string(s->reason));
        break;  // logged as retry_stopped with its reason, below
      default:
        break;
    }
    if (draining) return {};
    st.log.warn("retry_stopped",
                {{"correlation_id", facts.correlation_id},
                 {"dependency", facts.dependency},
                 {"attempts", result.attempts},
                 {"error_type", outcome_name(outcome)},
                 {"reason", to_string(s->reason)},
                 {"retry_after_ms", static_cast<long long>(s->retry_after ? s->retry_after->count() : -1)}});
    // a Retry-After past the deadline returns that response at once. Without a
    // response to return, the client learns why from the error type.
    if (failure && s->error) result.failure = upstream::attempt_failure{*s->error, "no time left for another attempt"};
    return {};
  }
  if (draining) return {};
  auto const& go = std::get<retry_in>(d);
  if (auto const permit = st.gate.allow_retry(); !permit.granted) {
    st.log.warn("retry_suppressed", {{"correlation_id", facts.correlation_id},
                                     {"dependency", facts.dependency},
                                     {"attempts", result.attempts},
                                     {"error_type", outcome_name(outcome)},
                                     {"reason", permit.why}});
    result.gave_up = result.attempts > 1;
    if (failure)
      result.failure =
          upstream::attempt_failure{permit.refusal, std::string(permit.why) + "; last attempt: " + failure->message};
    return {};
  }
  st.previous_wait = go.wait;
  st.observer.retry_scheduled(go.wait);
  st.log.info("retry_attempt", {{"correlation_id", facts.correlation_id},
                                {"dependency", facts.dependency},
                                {"attempt", result.attempts + 1},
                                {"max_attempts", st.max_attempts},
                                {"backoff_ms", static_cast<long long>(go.wait.count())},
                                {"error_type", outcome_name(outcome)},
                                {"idempotency_key", facts.idempotency_key},
                                {"method", facts.method},
                                {"path", facts.path},
                                {"status", outcome.status.value_or(0)},
                                {"grpc_status", outcome.grpc_status},
                                {"grpc_method", facts.grpc ? std::optional<std::string_view>(facts.path) : std::nullopt},
                                {"duration_ms", static_cast<long long>(took.count() / 1000)}});
  return {true, go.wait, failure ? std::string() : outcome_name(outcome)};
}

/** Watches the client during a backoff: a client that hangs up cancels the wait. Bytes
    from the client are a pipelined request, which waits its turn; the watch then ends.
    Shared with the pending wait operation, which may complete after the loop moved on. */
struct client_watch {
  net::steady_timer* timer;
  bool active = true;
  bool client_gone = false;

  static void start(const std::shared_ptr<client_watch>& self, tcp::socket& client) {
    client.async_wait(tcp::socket::wait_read, [self, &client](error_code ec) {
      if (!self->active) return;  // the wait ended first; the socket may be gone
      bool gone = static_cast<bool>(ec);
      if (!gone) {
        char probe;
        error_code pec;
        auto const n = client.receive(net::buffer(&probe, 1), tcp::socket::message_peek, pec);
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

wait_end end_watch(client_watch* watch, tcp::socket* client, error_code timer_ec) {
  if (!watch) return timer_ec ? wait_end::cancelled : wait_end::elapsed;
  watch->active = false;
  if (watch->client_gone) return wait_end::client_gone;
  error_code ignored;
  client->cancel(ignored);  // nothing else waits on the client during a backoff
  return timer_ec ? wait_end::cancelled : wait_end::elapsed;
}

void log_client_gone(loop_state& st, std::string_view reason) {
  st.result.client_gone = true;
  st.log.info("retry_cancelled", {{"correlation_id", st.facts.correlation_id},
                                  {"dependency", st.facts.dependency},
                                  {"attempts", st.result.attempts},
                                  {"reason", reason}});
}

/** Whether the caller gave up on the request: the coroutine running the loop was cancelled
    (an HTTP/2 client reset its stream or closed its connection, a gRPC client cancelled or
    passed its own deadline). Read without suspending: a cancelled coroutine that suspends
    again throws. What an attempt then reports is what the cancellation did, not
    what the dependency did: counting it would let any caller open the breaker for all. */
bool caller_gave_up(const net::cancellation_state& cs) { return cs.cancelled() != net::cancellation_type::none; }

}  // namespace

dependency_gate& open_gate() {
  static dependency_gate g;  // stateless: its methods only return their defaults
  return g;
}

attempt_observer& silent_observer() {
  static attempt_observer o;  // stateless
  return o;
}

net::awaitable<attempts_result> run_attempts(const config::policy& policy, const request_facts& facts,
                                             attempt_runner& attempt, std::mt19937_64& rng, const observe::logger& log,
                                             loop_hooks hooks) {
  loop_state st{policy,
                facts,
                log,
                rng,
                hooks.gate ? *hooks.gate : open_gate(),
                hooks.observer ? *hooks.observer : silent_observer(),
                clock::now() + policy.total_timeout,
                1 + (facts.may_retry ? policy.max_retries : 0),
                duration{0},
                {}};
  if (facts.deadline) st.total_deadline = std::min(st.total_deadline, *facts.deadline);

  for (;;) {
    ++st.result.attempts;
    auto const attempt_start = clock::now();
    auto const attempt_deadline = std::min(attempt_start + policy.attempt_timeout, st.total_deadline);
    auto summary = co_await attempt.run(attempt_deadline);
    st.result.attempts += summary.hedges;
    // A client's own cancellation is nobody's failure: no breaker record, no budget, no
    // retry for a caller who left (ARCHITECTURE.md; HTTP/1.1 hang-ups end the same way).
    if (caller_gave_up(co_await net::this_coro::cancellation_state)) {
      log_client_gone(st, "the client cancelled the request");
      co_return std::move(st.result);
    }
    auto const step = between_attempts(st, summary, attempt_start, hooks.draining && *hooks.draining);
    if (!step.retry) co_return std::move(st.result);

    // The failed attempt's response is dropped with its connection and its buffers: reading
    // its body only to throw it away would spend the time the loop has left, and a request
    // waiting for its retry holds no I/O memory.
    attempt.drop();
    net::steady_timer timer(co_await net::this_coro::executor);
    timer.expires_after(step.wait);
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
    auto const ended = end_watch(watch.get(), hooks.client, ec);
    if (ended == wait_end::client_gone) {
      log_client_gone(st, "the client closed its connection");
      co_return std::move(st.result);
    }
    if (ended == wait_end::cancelled && caller_gave_up(co_await net::this_coro::cancellation_state)) {
      log_client_gone(st, "the client cancelled the request");
      co_return std::move(st.result);
    }
    if (ended == wait_end::cancelled) {
      // A drain cut the wait short. The failed attempt's response went with its connection,
      // so the client learns what it was from the message.
      if (!st.result.failure)
        st.result.failure =
            upstream::attempt_failure{error_type::deadline_exceeded,
                                      "shutting down before the retry; the last attempt answered " + step.last_outcome};
      co_return std::move(st.result);
    }
  }
}

namespace {

/// An HTTP/1.1 attempt: upstream::run_attempt, keeping the response head it returns.
class http1_attempt final : public attempt_runner {
 public:
  http1_attempt(upstream::pool& pool, upstream::destination to,
                upstream::bhttp::request<upstream::bhttp::buffer_body>& req, std::string_view body, bool is_head,
                bool sends_deadline)
      : pool_(pool), to_(to), req_(req), body_(body), is_head_(is_head), sends_deadline_(sends_deadline) {}

  net::awaitable<attempt_summary> run(clock::time_point deadline) override {
    // What this attempt has left, not what the caller first gave: the time spent on earlier
    // attempts and waits is gone, and past this attempt's own timeout nobody reads the answer.
    if (sends_deadline_) req_.set(request_timeout_header, format_request_timeout(deadline, clock::now()));
    auto attempt = co_await upstream::run_attempt(pool_, to_, req_, body_, is_head_, deadline);
    attempt_summary s;
    if (!attempt) {
      s.failure = std::move(attempt.error());
      co_return s;
    }
    response = std::move(*attempt);
    auto const& h = response->response->get();
    s.outcome.status = h.result_int();
    if (auto it = h.find(upstream::bhttp::field::retry_after); it != h.end())
      s.retry_after = std::string_view(it->value().data(), it->value().size());
    auto field = [&h](std::string_view name) -> std::optional<std::string_view> {
      auto it = h.find(name);
      if (it == h.end()) return std::nullopt;
      return std::string_view(it->value().data(), it->value().size());
    };
    s.below = read_layer_signal({field(retried_header), field("Rebound-Attempts"), field("Rebound-Error"),
                                 field(overloaded_header)});
    co_return s;
  }
  void drop() override { response.reset(); }

  std::unique_ptr<upstream::exchange> response;

 private:
  upstream::pool& pool_;
  upstream::destination to_;
  upstream::bhttp::request<upstream::bhttp::buffer_body>& req_;
  std::string_view body_;
  bool is_head_;
  bool sends_deadline_;
};

}  // namespace

net::awaitable<loop_result> run_retry_loop(const config::policy& policy, const request_facts& facts,
                                           upstream::pool& pool, upstream::destination to,
                                           upstream::bhttp::request<upstream::bhttp::buffer_body>& req,
                                           std::string_view body, bool is_head, std::mt19937_64& rng,
                                           const observe::logger& log, loop_hooks hooks) {
  // On HTTP/1.1 a caller's deadline comes only from X-Request-Timeout: it goes on the same way.
  bool const sends_deadline = facts.deadline.has_value();
  loop_result out;
  attempts_result r;
  if (hooks.hedge && hooks.hedge->max > 0) {
    // Each copy of a hedged request is an HTTP/1.1 attempt of its own (hedge.hpp).
    hedged_attempt attempt([&] { return std::make_unique<http1_attempt>(pool, to, req, body, is_head, sends_deadline); },
                           *hooks.hedge,
                           hedge_context{policy, facts, log, hooks.gate ? *hooks.gate : open_gate(),
                                         hooks.observer ? *hooks.observer : silent_observer()});
    r = co_await run_attempts(policy, facts, attempt, rng, log, hooks);
    if (!r.failure && !r.client_gone) out.response = std::move(static_cast<http1_attempt&>(attempt.answered()).response);
  } else {
    http1_attempt attempt(pool, to, req, body, is_head, sends_deadline);
    r = co_await run_attempts(policy, facts, attempt, rng, log, hooks);
    if (!r.failure && !r.client_gone) out.response = std::move(attempt.response);
  }
  out.attempts = r.attempts;
  out.failure = std::move(r.failure);
  out.client_gone = r.client_gone;
  out.gave_up = r.gave_up;
  co_return out;
}

}  // namespace rebound::retry
