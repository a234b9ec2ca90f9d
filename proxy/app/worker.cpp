#include "proxy/app/worker.hpp"

#include "config/config.hpp"

#include "proxy/grpc/serve.hpp"
#include "proxy/http/client_session.hpp"
#include "proxy/inbound/serve.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>

#include <malloc.h>

#include <algorithm>
#include <stdexcept>

namespace rebound::app {
namespace {

using reuse_port = net::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;

}  // namespace

/** Runs `ioc` until it stops. Nothing on the data path throws (errors are values, every
    parser limit is set); this is the last line of defence if something still does, e.g. a
    library function in a completion handler: the process logs it and keeps serving instead
    of aborting every connection it holds. The operation that threw is lost with its
    handler, and its connection closes when its socket is released. Asio allows run() to be
    called again after a handler threw. */
void run_guarded(net::io_context& ioc, const observe::logger& log, const char* what) {
  for (;;) {
    try {
      ioc.run();
      return;
    } catch (const std::exception& x) {
      log.error("internal_error", {{"task", what}, {"message", x.what()}});
    } catch (...) {
      log.error("internal_error", {{"task", what}, {"message", "unknown exception"}});
    }
  }
}

/** The client connections the descriptor limit (RLIMIT_NOFILE, read at each accept: an operator
    may change it) leaves room for: each client may need an upstream socket too, and a reserve
    stays for the admin listener, the store, logs and the listeners, so that a crowd of idle
    clients can never take the descriptor a liveness probe needs (HAProxy derives its maxconn
    from ulimit-n the same way). `nofile`: the soft limit, none when unlimited. */
std::size_t descriptor_cap(std::optional<rlim_t> nofile) {
  if (!nofile) return SIZE_MAX;
  auto const reserve = std::min<rlim_t>(64, *nofile / 4);
  return static_cast<std::size_t>((*nofile - reserve) / 2);
}

namespace {

/** Idle pooled upstream connections one worker may keep: its share of a quarter of the
    descriptors, so idle connections to many distinct hosts never take what clients and
    their active upstream connections need. Without a limit, 4,096 a worker. */
std::size_t idle_upstream_cap(std::optional<rlim_t> nofile, std::size_t workers) {
  if (!nofile) return 4096;
  auto const reserve = std::min<rlim_t>(64, *nofile / 4);
  return std::max<std::size_t>(4,
                               static_cast<std::size_t>((*nofile - reserve) / 4) / std::max<std::size_t>(1, workers));
}

}  // namespace

/// The soft descriptor limit, read once per accept wake-up; none when unlimited or unknown.
std::optional<rlim_t> nofile_limit() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return std::nullopt;
  return lim.rlim_cur;
}

namespace {

/// Starts a session for an accepted client, or refuses it past limits.max_connections (or
/// what the descriptor limit allows, when that is less).
void start_session(worker& w, const runtime::session_context& ctx, tcp_socket socket, std::optional<rlim_t> nofile) {
  auto const& cfg = ctx.latest ? *(*ctx.latest)->cfg : ctx.cfg();
  auto const cap = std::min(cfg.limits.max_connections, descriptor_cap(nofile));
  if (ctx.open_connections && ctx.open_connections->load(std::memory_order_relaxed) >= cap) {
    net::co_spawn(w.ioc, http::refuse_connection(std::move(socket)), observe::report_failure{ctx.log, "refuse_connection"});
    return;
  }
  // The proxy port also speaks HTTP/2 (gRPC); the inbound listener sends every request to the app.
  http::session_doors doors;
  if (ctx.inbound)
    doors.inbound = inbound::serve_request;
  else
    doors.http2 = grpc::serve_if_http2;
  http::serve_client(ctx, doors, std::move(socket));
}

/// Connections taken at once, without waiting, after each accept that waited.
constexpr int accept_batch = 64;

/** How many more connections to take at once after the one on descriptor `fd` (descriptors
    are numbered lowest free first, so `fd` is about how many are in use). Each client may
    need an upstream connection too: while descriptors are short, a batch would take the
    ones its own requests need and answer them 503 `overloaded`, so it takes at most an
    eighth of what is left, and none near the limit. */
int accept_room(int fd, std::optional<rlim_t> nofile) {
  if (!nofile) return accept_batch - 1;
  auto const used = static_cast<rlim_t>(fd < 0 ? 0 : fd);
  auto const left = *nofile > used ? *nofile - used : 0;
  return static_cast<int>(std::min<rlim_t>(accept_batch - 1, left / 8));
}

}  // namespace

net::awaitable<void> accept_loop(worker& w, tcp_acceptor& acceptor, runtime::session_context ctx) {
  // The batch below must not block: a queue found empty answers would_block.
  error_code nb_ec;
  acceptor.non_blocking(true, nb_ec);
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(use_tuple);
    if (ec) {
      if (!acceptor.is_open() || ec == net::error::operation_aborted) co_return;
      // Out of descriptors and the like: pause rather than spin on the failing accept.
      ctx.log->warn("accept_failed", {{"listener", ctx.inbound ? "inbound" : "proxy"}, {"message", ec.message()}});
      net::steady_timer pause(w.ioc, std::chrono::milliseconds(100));
      co_await pause.async_wait(use_tuple);
      continue;
    }
    auto const nofile = nofile_limit();  // once for the whole batch
    int const room = nb_ec ? 0 : accept_room(socket.native_handle(), nofile);
    start_session(w, ctx, std::move(socket), nofile);
    // One accept per turn of the scheduler let a burst of 1,000 connects wait behind every
    // other ready handler for each one: clients connected at once waited seconds for their
    // first byte (bench/run.sh c1000: wrk timeouts, p99 ~1 s). Whatever else is queued is
    // taken now, as HAProxy's maxaccept does.
    for (int i = 0; i < room; ++i) {
      error_code aec;
      tcp_socket more(w.ioc);
      acceptor.accept(more, aec);
      if (aec) break;  // would_block: the queue is empty; anything else shows on the next async_accept
      start_session(w, ctx, std::move(more), nofile);
    }
  }
}

net::awaitable<void> sweep_pool(worker& w, std::size_t workers) {
  constexpr int seconds_per_sweep = 5;
  net::steady_timer timer(w.ioc);
  for (int tick = 0;; ++tick) {
    // The limit first: an operator may change the descriptor limit while rebound runs.
    if (tick % seconds_per_sweep == 0) w.pool.set_max_idle_total(idle_upstream_cap(nofile_limit(), workers));
    timer.expires_after(std::chrono::seconds(1));
    auto [ec] = co_await timer.async_wait(use_tuple);
    if (ec) co_return;
    w.pool.trim_spares();
    w.buffers.trim();
    if (tick % seconds_per_sweep != seconds_per_sweep - 1) continue;
    w.pool.sweep();
    w.h2_pool.sweep(pool_idle_timeout);
  }
}

net::awaitable<void> return_freed_memory(net::io_context& control) {
  net::steady_timer timer(control);
  for (;;) {
    timer.expires_after(std::chrono::seconds(5));
    auto [ec] = co_await timer.async_wait(use_tuple);
    if (ec) co_return;
    ::malloc_trim(0);
  }
}

/// Start-up only, so a failure throws; the message names the key and the address, not
/// Asio's source location.
tcp_acceptor bind_listener(net::io_context& ioc, const tcp::endpoint& ep, bool share_port, std::string_view key) {
  tcp_acceptor a(ioc);
  error_code ec;
  auto const step = [&](std::string_view what) {
    if (ec)
      throw std::runtime_error(std::string(key) + " " + to_string(ep) + ": " + std::string(what) + ": " + ec.message());
  };
  a.open(ep.protocol(), ec);
  step("socket");
  a.set_option(net::socket_base::reuse_address(true), ec);
  step("SO_REUSEADDR");
  if (share_port) {
    a.set_option(reuse_port(true), ec);
    step("SO_REUSEPORT");
  }
  a.bind(ep, ec);
  step("bind");
  a.listen(net::socket_base::max_listen_connections, ec);
  step("listen");
  return a;
}

std::string to_string(const tcp::endpoint& ep) {
  auto const a = ep.address();
  return (a.is_v6() ? "[" + a.to_string() + "]" : a.to_string()) + ":" + std::to_string(ep.port());
}

}  // namespace rebound::app
