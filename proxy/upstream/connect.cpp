#include "proxy/upstream/connect.hpp"

#include "proxy/upstream/tls_client.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/beast/core/error.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace rebound::upstream {

using namespace boost::asio::experimental::awaitable_operators;

namespace {

/** Whether this process is out of descriptors (or socket memory) right now. A connect that
    fails for want of a socket reports its error inconsistently through Beast's connect
    (EMFILE, or "operation canceled"), so the failure path asks the kernel directly. */
bool out_of_sockets() {
  int const fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM;
  ::close(fd);
  return false;
}

}  // namespace

http::error_type classify_connect_error(const error_code& ec) {
  if (ec == beast::error::timeout) return http::error_type::connect_timeout;
  // rebound's own resources, not the upstream's doing: answered 503 overloaded, never
  // retried, and not a failure of the dependency's breaker (R-4 does not call it transient).
  // (No comparison with std::errc here: it goes through Boost.System's std interop, which
  // UBSan reports as a bad vptr in Boost 1.81.)
  if (ec == net::error::no_descriptors || ec == net::error::no_buffer_space || ec == net::error::no_memory)
    return http::error_type::overloaded;
  if (ec == net::error::connection_reset) return http::error_type::connect_reset;
  return http::error_type::connect_refused;
}

net::awaitable<connect_result> connect_to(const std::string& host, std::uint16_t port,
                                          std::chrono::steady_clock::time_point deadline) {
  auto ex = co_await net::this_coro::executor;
  connect_result out;
  tcp::resolver::results_type endpoints;
  error_code ec;
  auto const addr = net::ip::make_address(host, ec);
  if (!ec) {
    endpoints = tcp::resolver::results_type::create(tcp::endpoint(addr, port), host, std::to_string(port));
  } else {
    // The resolver runs getaddrinfo on a helper thread and has no deadline of its own, so
    // it races a timer; the loser is cancelled.
    tcp::resolver resolver(ex);
    net::steady_timer timer(ex);
    timer.expires_at(deadline);
    // Named operands: GCC 12 destroys temporaries of a co_await (a || b) expression twice.
    auto const service = std::to_string(port);
    auto resolve = resolver.async_resolve(host, service, use_tuple);
    auto expire = timer.async_wait(use_tuple);
    auto winner = co_await (std::move(resolve) || std::move(expire));
    if (winner.index() == 1) {
      out.error = http::error_type::dns_failure;
      out.message = "DNS lookup of " + host + " timed out";
      co_return out;
    }
    auto [rec, results] = std::get<0>(std::move(winner));
    if (rec || results.empty()) {
      out.error = http::error_type::dns_failure;
      out.message = "DNS lookup of " + host + " failed: " + (rec ? rec.message() : std::string("no addresses"));
      co_return out;
    }
    endpoints = std::move(results);
  }
  beast::tcp_stream stream(ex);
  stream.expires_at(deadline);
  auto [cec, ep] = co_await stream.async_connect(endpoints, use_tuple);
  if (cec) {
    out.error =
        cec != beast::error::timeout && out_of_sockets() ? http::error_type::overloaded : classify_connect_error(cec);
    out.message = out.error == http::error_type::overloaded
                      ? "rebound is out of descriptors or memory for a connection to " + host + ":" +
                            std::to_string(port) + " (" + cec.message() + ")"
                      : "connect to " + host + ":" + std::to_string(port) +
                            " failed: " + (cec == beast::error::timeout ? std::string("timed out") : cec.message());
    co_return out;
  }
  stream.expires_never();
  error_code ignored;
  stream.socket().set_option(tcp::no_delay(true), ignored);
  out.stream.emplace(std::move(stream));
  co_return out;
}

net::awaitable<open_result> open_connection(const std::string& host, std::uint16_t port, tls_client* tls,
                                            std::chrono::steady_clock::time_point deadline, std::string_view alpn) {
  open_result out;
  auto c = co_await connect_to(host, port, deadline);
  if (!c.stream) {
    out.error = c.error;
    out.message = std::move(c.message);
    co_return out;
  }
  if (!tls) {
    out.conn.emplace(std::move(*c.stream));
    co_return out;
  }
  auto h = co_await tls->handshake(*c.stream, deadline, alpn);
  if (!h.conn) {
    out.error = h.error;
    out.message = std::move(h.message);
    co_return out;
  }
  out.conn.emplace(std::move(*h.conn));
  co_return out;
}

}  // namespace rebound::upstream
