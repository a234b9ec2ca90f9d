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

net::awaitable<attempts_result> run_attempts(const step_context& ctx, attempt_runner& attempt, loop_hooks hooks) {
  // Only this coroutine's locals and the step live in its frame: everything between two
  // attempts runs in the step's plain functions, so their temporaries (log fields, strings)
  // stay on the stack and not in every waiting request's frame (issue 4 measures it).
  auto const& policy = ctx.policy;
  retry_step step(ctx, clock::now() + policy.total_timeout);
  for (;;) {
    auto const attempt_start = clock::now();
    auto const attempt_deadline = std::min(attempt_start + policy.attempt_timeout, step.deadline());
    auto summary = co_await attempt.run(attempt_deadline);
    step.attempt_made(summary.hedges);
    // A client's own cancellation is nobody's failure: no breaker record, no budget, no
    // retry for a caller who left (HTTP/1.1 hang-ups end the same way).
    if (caller_gave_up(co_await net::this_coro::cancellation_state)) {
      step.caller_left("the client cancelled the request");
      co_return step.take_result();
    }
    auto const next = step.after(summary, attempt_start, {clock::now(), std::chrono::system_clock::now()},
                                 hooks.draining && *hooks.draining);
    if (!next.retry) co_return step.take_result();

    // The failed attempt's response is dropped with its connection and its buffers: reading
    // its body only to throw it away would spend the time the loop has left, and a request
    // waiting for its retry holds no I/O memory.
    attempt.drop();
    net::steady_timer timer(co_await net::this_coro::executor);
    timer.expires_after(next.wait);
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
      step.caller_left("the client closed its connection");
      co_return step.take_result();
    }
    if (ended == wait_end::cancelled && caller_gave_up(co_await net::this_coro::cancellation_state)) {
      step.caller_left("the client cancelled the request");
      co_return step.take_result();
    }
    if (ended == wait_end::cancelled) {
      step.drain_cut(next.last_outcome);  // a drain cut the wait short
      co_return step.take_result();
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
    s.below = read_layer_signal(
        {field(retried_header), field("Rebound-Attempts"), field("Rebound-Error"), field(overloaded_header)});
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

net::awaitable<loop_result> run_retry_loop(const step_context& ctx, const http1_request& request, loop_hooks hooks,
                                           const hedge_plan* hedge) {
  // On HTTP/1.1 a caller's deadline comes only from X-Request-Timeout: it goes on the same way.
  bool const sends_deadline = ctx.facts.deadline.has_value();
  auto make = [&request, sends_deadline] {
    return std::make_unique<http1_attempt>(request.pool, request.to, request.req, request.body, request.is_head,
                                           sends_deadline);
  };
  loop_result out;
  attempts_result r;
  if (hedge && hedge->max > 0) {
    // Each copy of a hedged request is an HTTP/1.1 attempt of its own (hedge.hpp).
    hedged_attempt attempt(make, *hedge, ctx);
    r = co_await run_attempts(ctx, attempt, hooks);
    if (!r.failure && !r.client_gone)
      out.response = std::move(static_cast<http1_attempt&>(attempt.answered()).response);
  } else {
    auto attempt = make();
    r = co_await run_attempts(ctx, *attempt, hooks);
    if (!r.failure && !r.client_gone) out.response = std::move(attempt->response);
  }
  out.attempts = r.attempts;
  out.failure = std::move(r.failure);
  out.client_gone = r.client_gone;
  out.gave_up = r.gave_up;
  co_return out;
}

}  // namespace rebound::retry
