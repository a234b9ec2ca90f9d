#pragma once
/** A worker: one thread with its single-threaded io_context, its listeners, upstream pools
    and sessions (the nginx/Envoy worker model: a connection's state never crosses threads),
    and what runs on it: the accept loop and the pool sweep. Internal to app/. */
#include "proxy/h2/client_connection.hpp"
#include "proxy/http/relay.hpp"
#include "proxy/runtime/session_context.hpp"
#include "proxy/runtime/session_registry.hpp"
#include "proxy/net.hpp"
#include "proxy/observe/log.hpp"
#include "proxy/retry/dependency_guard.hpp"
#include "proxy/upstream/pool.hpp"

#include <boost/asio/io_context.hpp>

#include <sys/resource.h>

#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>

namespace rebound::app {

/// Idle pooled upstream connections live this long; upstreams commonly close at 60 s or
/// later, so reuse never races their own idle close.
inline constexpr std::chrono::seconds pool_idle_timeout{30};
/// Enough for 1,000 concurrent clients of one upstream: with 256, a burst that wide closed
/// three connections in four after answering and opened them again for the next requests
/// (bench/run.sh c1000: 2.4x HAProxy's CPU per request).
inline constexpr std::size_t pool_max_idle_per_upstream = 1024;
/// Until the first sweep sets it from the descriptor limit (idle_upstream_cap).
inline constexpr std::size_t pool_max_idle_at_start = 256;

/// Member order is destruction order in reverse: the pool and the acceptor go before the
/// io_context they use; the registry outlives it, since destroying the io_context destroys
/// suspended sessions, which unregister.
struct worker {
  runtime::session_registry sessions;
  runtime::relay_buffers buffers;  ///< outlives the io_context: suspended relays hold leases
  /** No lock per socket operation (Asio's per-descriptor mutex: two lock pairs per read or
      write). Safe because only this thread starts, cancels or closes an I/O object of `ioc`:
      other threads reach it through net::post, and the scheduler and timer queue keep
      their locks for that. */
  net::io_context ioc{BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO};
  upstream::pool pool{pool_max_idle_per_upstream, pool_max_idle_at_start, pool_idle_timeout};
  h2::client_pool h2_pool;  ///< HTTP/2 upstreams of gRPC calls: one connection carries many calls
  std::optional<tcp_acceptor> acceptor;
  std::optional<tcp_acceptor> inbound_acceptor;   ///< `inbound.listen`, when configured
  std::mt19937_64 rng{std::random_device{}()};    // jitter only; keys come from OpenSSL's CSPRNG
  std::optional<retry::guard_cache> guards;
  std::shared_ptr<const runtime::running_config> running;  ///< current; only this worker's thread touches it
  std::thread thread;
};


/// Runs `ioc` until it stops, logging (and surviving) what a handler throws.
void run_guarded(net::io_context& ioc, const observe::logger& log, const char* what);

/// The client connections the descriptor limit leaves room for; `nofile`: the soft limit.
std::size_t descriptor_cap(std::optional<rlim_t> nofile);
/// The soft descriptor limit, read once per accept wake-up; none when unlimited or unknown.
std::optional<rlim_t> nofile_limit();

/// Accepts on `acceptor` and starts a session per client, until the acceptor closes.
net::awaitable<void> accept_loop(worker& w, tcp_acceptor& acceptor, runtime::session_context ctx);
/** Gives the pages a burst freed back to the system every few seconds (glibc's malloc_trim,
    as HAProxy trims its pools): a thousand clients served at once leave their coroutine
    frames, buffers and heads freed but resident, scattered between what the connections
    that stay still hold, where glibc returns nothing of its own. Runs on the control thread;
    a trim locks each arena for about a millisecond. */
net::awaitable<void> return_freed_memory(net::io_context& control);
/** Closes idle upstream connections that outlived their welcome, every five seconds, and
    gives back each second the spare exchanges and relay buffers a burst left
    (runtime::spares). */
net::awaitable<void> sweep_pool(worker& w, std::size_t workers);

/// A listener on `ep` (`key` names it in the error); start-up only, so a failure throws.
tcp_acceptor bind_listener(net::io_context& ioc, const tcp::endpoint& ep, bool share_port, std::string_view key);
std::string to_string(const tcp::endpoint& ep);

}  // namespace rebound::app
