#pragma once
// One worker's worth of a session in process, for tests of what sits on the HTTP/1.1 session
// (the session itself, the doors app/ plugs into it): the config, the shared parts a
// session_context points at, a listener on 127.0.0.1 and a client that talks to it. It runs
// over a loopback socket pair, not beast::test::stream: the session owns a tcp_stream, and
// its deadlines and its socket's unread bytes (what a drain looks at) are part of what is
// tested.
#include "proxy/http/client_session.hpp"

#include "config/load.hpp"
#include "proxy/auth/secure_origins.hpp"
#include "proxy/http/client_request.hpp"
#include "proxy/plan/loop_guard.hpp"
#include "proxy/runtime/session_registry.hpp"
#include "proxy/observe/log.hpp"
#include "proxy/observe/metrics.hpp"
#include "proxy/retry/dependency_guard.hpp"
#include "proxy/upstream/pool.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/sinks/ostream_sink.h>

#include <functional>
#include <sstream>

namespace session_rig {

using namespace rebound;
using namespace std::chrono_literals;
using enough_fn = std::function<bool(const std::string&)>;

inline constexpr std::string_view instance_token = "ab12cd34";

/// A worker of one session: the config, the shared parts a session_context points at, and a
/// listener on 127.0.0.1. Member order is destruction order reversed, as in app/worker.hpp.
struct rig {
  explicit rig(std::string_view yaml = "")
      : cfg(std::make_shared<const config::config>(config::load_config_text(yaml, "session_test.yaml"))),
        guards(cfg->guarded(), log, metrics),
        cache(guards) {
    running = std::make_shared<const runtime::running_config>(
        runtime::running_config{cfg, std::make_shared<const auth::secure_origins>(*cfg, &log)});
    ctx.running = running;
    ctx.pool = &pool;
    ctx.log = &log;
    ctx.sessions = &sessions;
    ctx.rng = &rng;
    ctx.guards = &cache;
    ctx.instance_token = instance_token;
    ctx.open_connections = &open;
  }

  /// Serves the next client that connects, through `doors`.
  void serve(http::session_doors doors) {
    net::co_spawn(
        ioc,
        [this, doors]() -> net::awaitable<void> {
          auto [ec, socket] = co_await acceptor.async_accept(use_tuple);
          if (!ec) http::serve_client(ctx, doors, std::move(socket));
        },
        net::detached);
  }

  /** Connects, sends `out` (then half-closes when `shut`), and reads until `enough` says so,
      the session closes, or 5 s pass: what came back, and whether the session closed. */
  std::string talk(std::string out, const enough_fn& enough, bool* closed = nullptr, bool shut = false) {
    std::string in;
    bool eof = false;
    net::co_spawn(
        ioc,
        [&]() -> net::awaitable<void> {
          beast::tcp_stream c(ioc);
          c.expires_after(5s);
          auto [cec] = co_await c.async_connect(acceptor.local_endpoint(), use_tuple);
          if (cec) co_return;
          auto [wec, wn] = co_await net::async_write(c, net::buffer(out), use_tuple);
          if (wec) co_return;
          if (shut) c.socket().shutdown(rebound::tcp_socket::shutdown_send);
          std::array<char, 4096> chunk;
          while (!enough || !enough(in)) {
            auto [rec, n] = co_await c.async_read_some(net::buffer(chunk), use_tuple);
            in.append(chunk.data(), n);
            if (rec) {
              eof = rec == net::error::eof || rec == net::error::connection_reset;
              break;
            }
          }
        },
        [this](std::exception_ptr) { ioc.stop(); });
    ioc.restart();
    ioc.run();
    if (closed) *closed = eof;
    return in;
  }

  std::ostringstream log_text;
  observe::logger log{
      std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::ostream_sink_st>(log_text))};
  observe::metrics metrics{"session_test"};
  std::shared_ptr<const config::config> cfg;
  retry::guard_registry guards;
  retry::guard_cache cache;
  std::shared_ptr<const runtime::running_config> running;
  runtime::session_registry sessions;
  std::mt19937_64 rng{7};
  std::atomic<std::size_t> open{0};
  runtime::session_context ctx;
  net::io_context ioc{1};
  upstream::pool pool{16, 16, 30s};
  rebound::tcp_acceptor acceptor{ioc, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0)};
};

/// Counts the occurrences of `what` in `text`.
inline std::size_t count(const std::string& text, std::string_view what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

}  // namespace session_rig
