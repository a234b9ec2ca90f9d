#include "proxy/http/forward.hpp"
#include "proxy/retry/classify.hpp"
#include "proxy/retry/decide.hpp"
#include "proxy/retry/dependency_guard.hpp"
#include "proxy/upstream/connect.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/write.hpp>

#include <array>

namespace rebound::http {
namespace {

using namespace boost::asio::experimental::awaitable_operators;
using clock = std::chrono::steady_clock;

/** Copies one direction. End of stream is passed on as a half-close (shutdown of the
    write side), so the other direction keeps flowing; any error tears both down. It
    returns rather than throws, so `&&` waits for both directions. */
net::awaitable<void> transfer(tcp::socket& from, tcp::socket& to, clock::time_point& last_activity) {
  std::array<char, 16 * 1024> buf;
  error_code ignored;
  for (;;) {
    auto [ec, n] = co_await from.async_read_some(net::buffer(buf), use_tuple);
    if (ec) {
      if (ec == net::error::eof) {
        to.shutdown(tcp::socket::shutdown_send, ignored);
      } else {
        from.close(ignored);
        to.close(ignored);
      }
      co_return;
    }
    last_activity = clock::now();
    auto [wec, wn] = co_await net::async_write(to, net::buffer(buf.data(), n), use_tuple);
    if (wec) {
      from.close(ignored);
      to.close(ignored);
      co_return;
    }
    last_activity = clock::now();
  }
}

/// Ends when neither direction has moved for `idle`.
net::awaitable<void> idle_watchdog(const clock::time_point& last_activity, std::chrono::milliseconds idle) {
  net::steady_timer timer(co_await net::this_coro::executor);
  for (;;) {
    timer.expires_at(last_activity + idle);
    auto [ec] = co_await timer.async_wait(use_tuple);
    if (ec) co_return;  // cancelled: the tunnel ended
    if (clock::now() - last_activity >= idle) co_return;
  }
}

/** After one connect attempt of a CONNECT: the wait before the next attempt, or nothing
    when there is none. Only the TCP connect is retried: rebound cannot see inside the
    tunnel, and once the 200 is sent bytes may flow, so nothing after it ever is. The
    decision is `retry::decide`, as for HTTP requests; this function does its effects
    (breaker, budget, logs). A plain function, so its temporaries stay off the coroutine frame. */
std::optional<retry::duration> next_connect_attempt(const session_context& ctx, const upstream::connect_result& c,
                                                    unsigned attempts, std::chrono::microseconds took,
                                                    retry::duration previous_wait, std::string_view dependency,
                                                    const config::policy& policy, retry::dependency_guard& guard,
                                                    clock::time_point deadline) {
  retry::attempt_outcome const outcome{std::nullopt, c.stream ? std::nullopt : std::optional(c.error)};
  guard.attempt_done({attempts, outcome, took});
  if (c.stream) {
    guard.record(false);
    return std::nullopt;
  }
  guard.record(retry::classify(outcome, retry::retry_on::r4_default()) == retry::verdict::retryable);
  retry::attempt_facts f;
  f.outcome = outcome;
  f.attempts = attempts;
  f.may_repeat = true;  // nothing has been sent: a connect can always be tried again
  f.previous_wait = previous_wait;
  f.now = clock::now();
  f.deadline = deadline;
  f.wall_now = std::chrono::system_clock::now();
  f.u = std::uniform_real_distribution<double>(0.0, 1.0)(*ctx.rng);
  auto const d = retry::decide(policy, f);
  unsigned const max_attempts = policy.max_retries + 1;
  auto const error = to_string(c.error);
  if (auto const* s = std::get_if<retry::stop>(&d)) {
    if (s->reason == retry::stop_reason::exhausted) {
      ctx.log->warn("retry_exhausted", {{"correlation_id", ""},
                                        {"dependency", dependency},
                                        {"attempts", attempts},
                                        {"max_attempts", max_attempts},
                                        {"error_type", error},
                                        {"idempotency_key", ""}});
      guard.exhausted();
    } else if (s->reason != retry::stop_reason::final) {
      ctx.log->warn("retry_stopped", {{"correlation_id", ""},
                                      {"dependency", dependency},
                                      {"attempts", attempts},
                                      {"error_type", error},
                                      {"reason", retry::to_string(s->reason)},
                                      {"retry_after_ms", -1}});
    }
    return std::nullopt;
  }
  auto const wait = std::get<retry::retry_in>(d).wait;
  if (auto const permit = guard.allow_retry(); !permit.granted) {
    ctx.log->warn("retry_suppressed", {{"correlation_id", ""},
                                       {"dependency", dependency},
                                       {"attempts", attempts},
                                       {"error_type", error},
                                       {"reason", permit.why}});
    return std::nullopt;
  }
  guard.retry_scheduled(wait);
  ctx.log->info("retry_attempt", {{"correlation_id", ""},
                                  {"dependency", dependency},
                                  {"attempt", attempts + 1},
                                  {"max_attempts", max_attempts},
                                  {"backoff_ms", static_cast<long long>(wait.count())},
                                  {"error_type", error},
                                  {"idempotency_key", ""},
                                  {"method", "CONNECT"},
                                  {"path", ""},
                                  {"status", 0},
                                  {"duration_ms", static_cast<long long>(took.count() / 1000)}});
  return wait;
}

}  // namespace

net::awaitable<void> run_tunnel(const session_context& ctx, beast::tcp_stream& client, beast::flat_buffer& buffer,
                                const request_target& target, const dependency_route& route) {
  auto const idle = ctx.cfg().limits.idle_timeout;
  std::string_view const dependency = route.name;
  auto const& policy = *route.policy;
  auto& guard = *route.guard;
  if (auto refusal = refused_by_breaker(guard)) {
    guard.answered(refusal->status);
    co_await send_error(client, *refusal, false, idle);
    co_return;
  }
  auto const deadline = clock::now() + policy.total_timeout;
  unsigned attempts = 0;
  retry::duration previous_wait{0};
  std::optional<upstream::connect_result> last;
  net::steady_timer backoff(co_await net::this_coro::executor);
  for (;;) {
    ++attempts;
    auto const started = clock::now();
    auto const attempt_deadline = std::min(deadline, started + policy.attempt_timeout);
    auto r = co_await upstream::connect_to(target.connect_host, target.port, attempt_deadline);
    auto const took = std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - started);
    auto const wait = next_connect_attempt(ctx, r, attempts, took, previous_wait, dependency, policy, guard, deadline);
    if (!wait) {
      last.emplace(std::move(r));
      break;
    }
    previous_wait = *wait;
    backoff.expires_after(*wait);
    co_await backoff.async_wait(use_tuple);
  }
  auto& c = *last;
  if (!c.stream) {
    ctx.log->warn("upstream_error", {{"correlation_id", ""},
                                     {"dependency", dependency},
                                     {"method", "CONNECT"},
                                     {"path", ""},
                                     {"error_type", to_string(c.error)},
                                     {"status", default_status(c.error)},
                                     {"attempts", attempts},
                                     {"message", c.message}});
    error_reply const reply{default_status(c.error), c.error, c.message, std::string(dependency), attempts};
    guard.answered(reply.status);
    co_await send_error(client, reply, false, idle);
    co_return;
  }
  guard.answered(200);
  // A 2xx answer to CONNECT has no Content-Length or Transfer-Encoding (RFC 9110 9.3.6),
  // so it is written as bytes, not through a Beast message.
  static constexpr std::string_view established = "HTTP/1.1 200 Connection established\r\nVia: 1.1 rebound\r\n\r\n";
  client.expires_after(idle);
  auto [ec, n] = co_await net::async_write(client, net::buffer(established), use_tuple);
  if (ec) co_return;
  client.expires_never();
  auto& up = c.stream->socket();
  auto& down = client.socket();
  // Bytes the client sent right behind its CONNECT head belong to the tunnel.
  if (buffer.size() > 0) {
    auto [wec, wn] = co_await net::async_write(up, buffer.data(), use_tuple);
    if (wec) co_return;
    buffer.consume(buffer.size());
  }
  auto last_activity = clock::now();
  // Named operands: GCC 12 destroys temporaries of a co_await (a || b) expression twice.
  auto downstream = transfer(down, up, last_activity);
  auto upstream = transfer(up, down, last_activity);
  auto both = std::move(downstream) && std::move(upstream);
  auto watchdog = idle_watchdog(last_activity, idle);
  co_await (std::move(both) || std::move(watchdog));
  error_code ignored;
  up.close(ignored);
  down.close(ignored);
}

}  // namespace rebound::http
