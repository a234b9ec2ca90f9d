#include "proxy/http/forward.hpp"
#include "proxy/http/session_registry.hpp"
#include "proxy/retry/dependency_guard.hpp"
#include "proxy/retry/loop.hpp"
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

/** A CONNECT's attempt: one TCP connect. Only the connect is retried: rebound cannot see
    inside the tunnel, and once the 200 is sent bytes may flow, so nothing after it ever is.
    The retry loop around it, and with it every rule and effect of a retry, is the one HTTP
    requests go through (retry/loop.hpp, retry/step.hpp). */
class connect_attempt final : public retry::attempt_runner {
 public:
  explicit connect_attempt(const request_target& target) : target_(target) {}

  net::awaitable<retry::attempt_summary> run(clock::time_point deadline) override {
    auto r = co_await upstream::connect_to(target_.connect_host, target_.port, deadline);
    retry::attempt_summary s;
    if (!r.stream) s.failure = retry::attempt_failure{r.error, r.message, false};
    last.emplace(std::move(r));
    co_return s;
  }
  void drop() override { last.reset(); }

  std::optional<upstream::connect_result> last;  ///< the last connect's, kept when it succeeded

 private:
  const request_target& target_;
};

}  // namespace

net::awaitable<void> run_tunnel(const session_context& ctx, beast::tcp_stream& client, beast::flat_buffer& buffer,
                                const tunnel_request& tunnel) {
  auto const& target = tunnel.target;
  auto const& route = tunnel.route;
  auto const idle = ctx.cfg().limits.idle_timeout;
  std::string_view const dependency = route.name;
  auto const& policy = *route.policy;
  auto& guard = *route.guard;
  if (auto refusal = refused_by_breaker(guard)) {
    guard.answered(refusal->status);
    co_await send_error(client, *refusal, false, idle);
    co_return;
  }
  retry::request_facts facts;
  facts.may_retry = true;  // nothing has been sent: a connect can always be tried again
  facts.dependency = dependency;
  facts.method = "CONNECT";
  facts.correlation_id = tunnel.correlation_id;
  connect_attempt attempt(target);
  retry::step_context const step{policy, facts, *ctx.log, *ctx.rng, guard, guard};
  retry::loop_hooks const hooks{ctx.sessions->draining_flag(), {}, &client.socket()};
  auto const r = co_await retry::run_attempts(step, attempt, hooks);
  if (r.client_gone) co_return;
  if (r.failure) {
    auto const& f = *r.failure;
    ctx.log->warn("upstream_error", {{"correlation_id", facts.correlation_id},
                                     {"dependency", dependency},
                                     {"method", "CONNECT"},
                                     {"path", ""},
                                     {"error_type", to_string(f.type)},
                                     {"status", default_status(f.type)},
                                     {"attempts", r.attempts},
                                     {"message", f.message}});
    error_reply const reply{default_status(f.type), f.type, f.message, std::string(dependency), r.attempts};
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
  auto& up = attempt.last->stream->socket();
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
