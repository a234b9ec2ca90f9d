#include "proxy/http/tunnel.hpp"
#include "proxy/plan/request_plan.hpp"
#include "proxy/plan/upstream_error.hpp"

#include "proxy/http/forward.hpp"
#include "proxy/http/relay.hpp"
#include "proxy/runtime/session_registry.hpp"
#include "proxy/retry/dependency_guard.hpp"
#include "proxy/retry/loop.hpp"
#include "proxy/upstream/connect.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/write.hpp>

namespace rebound::http {
namespace {

using namespace boost::asio::experimental::awaitable_operators;
using clock = std::chrono::steady_clock;

/// What the two directions of a tunnel and its watchdog share.
struct tunnel_state {
  clock::time_point last_activity = clock::now();
  std::string_view closed_by;  ///< the first side seen to end; empty while both flow
  void ended_by(std::string_view side) {
    if (closed_by.empty()) closed_by = side;
  }
};

void close_end(tcp_socket& s) {
  error_code ignored;
  s.close(ignored);
}
void close_end(upstream::connection& c) {
  error_code ignored;
  c.socket().close(ignored);
}
void half_close(tcp_socket& s) {
  error_code ignored;
  s.shutdown(tcp_socket::shutdown_send, ignored);
}
void half_close(upstream::connection& c) { c.shutdown_send(); }

/// Waits until the side has bytes (or its end) to read, so no buffer is held meanwhile. TLS
/// may already hold decrypted bytes that no socket readiness announces: its read waits itself.
net::awaitable<error_code> readable(tcp_socket& s) {
  auto [ec] = co_await s.async_wait(tcp_socket::wait_read, use_tuple);
  co_return ec;
}
net::awaitable<error_code> readable(upstream::connection& c) {
  if (c.is_tls()) co_return error_code{};
  auto [ec] = co_await c.socket().async_wait(tcp_socket::wait_read, use_tuple);
  co_return ec;
}

/// Names a side in `closed_by`.
struct side {
  std::string_view from, to;
};

/** Copies one direction. End of stream is passed on as a half-close (the write side shut),
    so the other direction keeps flowing; any error tears both down. It returns rather than
    throws, so `&&` waits for both directions. */
template <class From, class To>
net::awaitable<void> transfer(From& from, To& to, std::uint64_t& moved, side names, tunnel_state& state,
                              runtime::relay_buffers* buffers) {
  for (;;) {
    if (auto ec = co_await readable(from)) {
      state.ended_by(names.from);
      close_end(from);
      close_end(to);
      co_return;
    }
    auto buf = runtime::relay_buffers::take_from(buffers, runtime::relay_buffers::small_size);
    auto [ec, n] = co_await from.async_read_some(net::buffer(buf.data(), buf.size()), use_tuple);
    if (ec) {
      state.ended_by(names.from);
      if (upstream::ends_stream(ec)) {
        half_close(to);
      } else {
        close_end(from);
        close_end(to);
      }
      co_return;
    }
    state.last_activity = clock::now();
    moved += n;
    auto [wec, wn] = co_await net::async_write(to, net::buffer(buf.data(), n), use_tuple);
    if (wec) {
      state.ended_by(names.to);
      close_end(from);
      close_end(to);
      co_return;
    }
    state.last_activity = clock::now();
  }
}

/// Ends the tunnel, closing both sides, once neither direction has moved for `idle`.
net::awaitable<void> idle_watchdog(tunnel_state& state, std::chrono::milliseconds idle, tcp_socket& client,
                                   upstream::connection& up) {
  net::steady_timer timer(co_await net::this_coro::executor);
  for (;;) {
    timer.expires_at(state.last_activity + idle);
    auto [ec] = co_await timer.async_wait(use_tuple);
    if (ec) co_return;  // cancelled: the tunnel ended
    if (clock::now() - state.last_activity >= idle) break;
  }
  state.ended_by("idle_timeout");
  // Closed here, not only cancelled: the directions then end whatever their operations
  // make of a cancellation.
  close_end(client);
  close_end(up);
}

/// Writes what was read past a head on one side to the other; false when that failed.
template <class To>
net::awaitable<bool> hand_on(beast::flat_buffer& read_ahead, To& to, std::uint64_t& moved) {
  if (read_ahead.size() == 0) co_return true;
  auto [ec, n] = co_await net::async_write(to, read_ahead.data(), use_tuple);
  moved += n;
  read_ahead.consume(read_ahead.size());
  co_return !ec;
}

/** A CONNECT's attempt: one TCP connect. Only the connect is retried: rebound cannot see
    inside the tunnel, and once the 200 is sent bytes may flow, so nothing after it ever is.
    The retry loop around it, and with it every rule and effect of a retry, is the one HTTP
    requests go through (retry/loop.hpp, retry/step.hpp). */
class connect_attempt final : public retry::attempt_runner {
 public:
  explicit connect_attempt(const plan::request_target& target) : target_(target) {}

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
  const plan::request_target& target_;
};

}  // namespace

net::awaitable<tunnel_totals> pump_tunnel(tunnel_end<tcp_socket> client, tunnel_end<upstream::connection> up,
                                          std::chrono::milliseconds idle, runtime::relay_buffers* buffers) {
  auto const start = clock::now();
  tunnel_totals totals;
  tunnel_state state;
  // Bytes that came right behind a head belong to the tunnel, ahead of anything read next.
  // One await a statement: GCC 12 mishandles co_await inside && and ?: expressions.
  bool handed_on = co_await hand_on(up.read_ahead, client.stream, totals.to_client);
  if (handed_on) handed_on = co_await hand_on(client.read_ahead, up.stream, totals.to_upstream);
  // Their bytes are passed on: a tunnel that sits idle for hours need not keep their room.
  client.read_ahead.shrink_to_fit();
  up.read_ahead.shrink_to_fit();
  if (handed_on) {
    // Named operands: GCC 12 destroys temporaries of a co_await (a || b) expression twice.
    auto downstream = transfer(client.stream, up.stream, totals.to_upstream, {"client", "upstream"}, state, buffers);
    auto upstream = transfer(up.stream, client.stream, totals.to_client, {"upstream", "client"}, state, buffers);
    auto both = std::move(downstream) && std::move(upstream);
    auto watchdog = idle_watchdog(state, idle, client.stream, up.stream);
    co_await (std::move(both) || std::move(watchdog));
  } else {
    state.ended_by("error");
  }
  close_end(client.stream);
  close_end(up.stream);
  totals.closed_by = state.closed_by.empty() ? std::string_view("error") : state.closed_by;
  totals.lasted = clock::now() - start;
  co_return totals;
}

void log_tunnel_closed(const runtime::session_context& ctx, const tunnel_label& label, const tunnel_totals& totals) {
  ctx.log->info("tunnel_closed", {label.correlation_id, label.dependency, {}, label.path},
                {{"protocol", label.protocol},
                 {"duration_ms", std::chrono::duration_cast<std::chrono::milliseconds>(totals.lasted).count()},
                 {"bytes_to_upstream", totals.to_upstream},
                 {"bytes_to_client", totals.to_client},
                 {"closed_by", totals.closed_by}});
}

net::awaitable<void> run_tunnel(const runtime::session_context& ctx, beast::tcp_stream& client,
                                beast::flat_buffer& buffer, const tunnel_request& tunnel) {
  auto const& target = tunnel.target;
  auto const& route = tunnel.route;
  auto const idle = ctx.cfg().limits.idle_timeout;
  std::string_view const dependency = route.name;
  auto const& policy = *route.policy;
  auto& guard = *route.guard;
  if (auto refusal = plan::admit(guard)) {
    guard.answered(refusal->status);
    co_await send_error(client, *refusal, false, idle);
    co_return;
  }
  auto facts = plan::facts_of(route, "CONNECT", target);
  facts.may_retry = true;  // nothing has been sent: a connect can always be tried again
  facts.correlation_id = tunnel.correlation_id;
  connect_attempt attempt(target);
  retry::step_context const step{policy, facts, *ctx.log, *ctx.rng, guard, guard};
  retry::loop_hooks const hooks{ctx.sessions->draining_flag(), {}, &client.socket()};
  auto const r = co_await retry::run_attempts(step, attempt, hooks);
  if (r.client_gone) co_return;
  if (r.failure) {
    auto const& f = *r.failure;
    plan::log_upstream_error(ctx, facts, {to_string(f.type), default_status(f.type), r.attempts, f.message});
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
  upstream::connection up(std::move(*attempt.last->stream));
  beast::flat_buffer nothing_ahead;
  auto pump = pump_tunnel({client.socket(), buffer}, {up, nothing_ahead}, idle, ctx.buffers);
  auto const totals = co_await std::move(pump);
  log_tunnel_closed(ctx, {"connect", facts.correlation_id, dependency, {}}, totals);
}

}  // namespace rebound::http
