#include "proxy/retry/loop.hpp"

#include "proxy/retry/backoff.hpp"
#include "proxy/retry/classify.hpp"
#include "proxy/retry/retry_after.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/this_coro.hpp>

namespace rebound::retry {
namespace {

using clock = std::chrono::steady_clock;

/// No attempt starts with less time than this left: it could not finish.
constexpr duration min_attempt_time{50};

std::string outcome_name(const attempt_outcome& o) {
  if (o.status) return "http_" + std::to_string(*o.status);
  return std::string(http::to_string(*o.error));
}

enum class wait_end { elapsed, cancelled, client_gone };

/** The backoff sleep. It also watches the client: one that hangs up while its retry waits
    ends the loop (no retries for nobody). Bytes from the client are a pipelined request,
    which waits its turn; from then on only the timer is watched. */
net::awaitable<wait_end> backoff_wait(net::steady_timer& timer, tcp::socket* client) {
  using namespace boost::asio::experimental::awaitable_operators;
  for (;;) {
    if (!client) {
      auto [ec] = co_await timer.async_wait(use_tuple);
      co_return ec ? wait_end::cancelled : wait_end::elapsed;
    }
    auto expire = timer.async_wait(use_tuple);
    auto readable = client->async_wait(tcp::socket::wait_read, use_tuple);
    auto first = co_await (std::move(expire) || std::move(readable));
    if (first.index() == 0) co_return std::get<0>(std::get<0>(first)) ? wait_end::cancelled : wait_end::elapsed;
    if (std::get<0>(std::get<1>(first))) co_return wait_end::client_gone;
    char probe;
    error_code pec;
    auto const n = client->receive(net::buffer(&probe, 1), tcp::socket::message_peek, pec);
    if (pec == net::error::would_block || pec == net::error::try_again) continue;
    if (pec || n == 0) co_return wait_end::client_gone;
    client = nullptr;
  }
}

}  // namespace

dependency_gate& open_gate() {
  static dependency_gate g;  // stateless: its methods only return their defaults
  return g;
}

attempt_observer& silent_observer() {
  static attempt_observer o;  // stateless
  return o;
}

net::awaitable<loop_result> run_retry_loop(const config::policy& policy, const request_facts& facts,
                                           upstream::pool& pool, upstream::destination to,
                                           upstream::bhttp::request<upstream::bhttp::buffer_body>& req,
                                           std::string_view body, bool is_head, std::mt19937_64& rng,
                                           const observe::logger& log, loop_hooks hooks, upstream::exchange& ex) {
  loop_result result;
  dependency_gate& gate = hooks.gate ? *hooks.gate : open_gate();
  attempt_observer& observer = hooks.observer ? *hooks.observer : silent_observer();
  auto const start = clock::now();
  auto const total_deadline = start + policy.total_timeout;
  unsigned const max_attempts = 1 + (facts.may_retry ? policy.max_retries : 0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  duration previous_wait = policy.backoff.base;

  for (;;) {
    ++result.attempts;
    auto const attempt_start = clock::now();
    auto const attempt_deadline = std::min(attempt_start + policy.attempt_timeout, total_deadline);
    auto failure = co_await upstream::run_attempt(pool, to, req, body, is_head, attempt_deadline, ex);
    // when the loop's deadline, not the attempt's, cut the attempt short, the whole
    // request is out of time.
    if (failure && failure->type == http::error_type::attempt_timeout && attempt_deadline == total_deadline)
      failure = upstream::attempt_failure{http::error_type::deadline_exceeded, "total_timeout reached"};
    attempt_outcome const outcome =
        failure ? attempt_outcome{std::nullopt, failure->type} : attempt_outcome{ex.response->get().result_int(), std::nullopt};
    result.failure = failure;
    auto const took = std::chrono::duration_cast<duration>(clock::now() - attempt_start);
    observer.attempt_done({result.attempts, outcome, took});
    // The breaker counts what R-4 calls a transient failure, whatever retry_on narrows.
    gate.record(classify(outcome, retry_on::r4_default()) == verdict::retryable);

    if (classify(outcome, policy.retry_on) != verdict::retryable) co_return result;
    if (!facts.may_retry) {
      if (policy.max_retries > 0 && result.attempts == 1)
        log.info("retry_skipped", {{"correlation_id", facts.correlation_id}, {"dependency", facts.dependency},
                                   {"method", facts.method}, {"path", facts.path}, {"error_type", outcome_name(outcome)},
                                   {"reason", facts.why_not}});
      co_return result;
    }
    bool const dns_spent = outcome.error == http::error_type::dns_failure && result.attempts >= dns_failure_max_attempts;
    if (result.attempts >= max_attempts || dns_spent) {
      log.warn("retry_exhausted", {{"correlation_id", facts.correlation_id}, {"dependency", facts.dependency},
                                   {"attempts", result.attempts}, {"max_attempts", max_attempts},
                                   {"error_type", outcome_name(outcome)}, {"idempotency_key", facts.idempotency_key}});
      observer.exhausted();
      co_return result;
    }
    if (hooks.draining && *hooks.draining) co_return result;

    unsigned const retry_number = result.attempts;  // the retry about to happen: 1, 2, ...
    double const u = uniform(rng);
    duration const backoff = policy.backoff.jitter == config::jitter_kind::full
                                 ? full_jitter(retry_number, policy.backoff.base, policy.backoff.cap, u)
                                 : decorrelated_jitter(previous_wait, policy.backoff.base, policy.backoff.cap, u);
    std::optional<duration> retry_after;
    if (ex.response) {
      auto const& h = ex.response->get();
      if (auto it = h.find(upstream::bhttp::field::retry_after); it != h.end())
        retry_after = parse_retry_after(it->value(), std::chrono::system_clock::now());
    }
    auto const remaining = std::chrono::duration_cast<duration>(total_deadline - clock::now());
    auto const plan = plan_wait(backoff, retry_after, remaining, std::min(policy.attempt_timeout, min_attempt_time));
    if (!plan.retry) {
      log.warn("retry_stopped", {{"correlation_id", facts.correlation_id}, {"dependency", facts.dependency},
                                 {"attempts", result.attempts}, {"error_type", outcome_name(outcome)},
                                 {"reason", http::to_string(*plan.why_not)},
                                 {"retry_after_ms", static_cast<long long>(retry_after ? retry_after->count() : -1)}});
      // a Retry-After past the deadline returns that response at once. Without a
      // response to return, the client learns why from the error type.
      if (failure) result.failure = upstream::attempt_failure{*plan.why_not, "no time left for another attempt"};
      co_return result;
    }
    // the budget is asked last, so only a retry that would really go spends it.
    if (!gate.allow_retry()) {
      log.warn("retry_suppressed", {{"correlation_id", facts.correlation_id}, {"dependency", facts.dependency},
                                    {"attempts", result.attempts}, {"error_type", outcome_name(outcome)},
                                    {"reason", "retry budget exhausted (R-7)"}});
      if (failure) result.failure = upstream::attempt_failure{http::error_type::budget_exhausted,
                                                              "the dependency's retry budget is exhausted; last attempt: " +
                                                                  failure->message};
      co_return result;
    }
    previous_wait = plan.wait;
    observer.retry_scheduled(plan.wait);
    log.info("retry_attempt",
             {{"correlation_id", facts.correlation_id}, {"dependency", facts.dependency},
              {"attempt", result.attempts + 1}, {"max_attempts", max_attempts},
              {"backoff_ms", static_cast<long long>(plan.wait.count())}, {"error_type", outcome_name(outcome)},
              {"idempotency_key", facts.idempotency_key}, {"method", facts.method}, {"path", facts.path},
              {"duration_ms", static_cast<long long>(took.count())}});
    // The failed attempt's response is dropped with its connection: reading its body only
    // to throw it away would spend the time the loop has left.
    ex.response.reset();
    ex.stream.reset();
    net::steady_timer timer(co_await net::this_coro::executor);
    timer.expires_after(plan.wait);
    if (hooks.current_wait) *hooks.current_wait = &timer;
    auto const ended = co_await backoff_wait(timer, hooks.client);
    if (hooks.current_wait) *hooks.current_wait = nullptr;
    if (ended == wait_end::client_gone) {
      log.info("retry_cancelled", {{"correlation_id", facts.correlation_id}, {"dependency", facts.dependency},
                                   {"attempts", result.attempts}, {"reason", "the client closed its connection"}});
      result.client_gone = true;
      co_return result;
    }
    if (ended == wait_end::cancelled) {
      // A drain cut the wait short. The failed attempt's response went with its
      // connection, so the client learns what it was from the message.
      if (!failure)
        result.failure = upstream::attempt_failure{http::error_type::deadline_exceeded,
                                                   "shutting down before the retry; the last attempt answered " +
                                                       outcome_name(outcome)};
      co_return result;
    }
  }
}

}  // namespace rebound::retry
