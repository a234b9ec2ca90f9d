#include "proxy/upstream/connect.hpp"

#include "proxy/upstream/resolver.hpp"
#include "proxy/upstream/tls_client.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/beast/core/error.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <utility>
#include <vector>

namespace rebound::upstream {

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

namespace {

/** RFC 8305 section 5 (Happy Eyeballs v2): the addresses are tried in order, the next one
    `stagger` after the last began while none has connected (at once when all begun have
    failed); the first to connect wins and the others are closed. A blackholed first address
    then costs `stagger`, not the attempt. */
struct connect_race {
  explicit connect_race(const net::executor& ex) : wake(ex) {}
  net::steady_timer wake;  ///< cancelled by each attempt that ends
  std::vector<std::unique_ptr<tcp_socket>> sockets;
  std::optional<tcp_socket> winner;
  std::size_t winner_at = 0;  ///< its index in the endpoints
  std::size_t failed = 0;
  std::vector<bool> ended;    ///< by index in the endpoints: its connect failed
  error_code last_error;
  bool signalled = false;  ///< the wake-up came from an attempt, not from outside
};

struct race_result {
  error_code ec;
  std::optional<tcp_socket> socket;
  net::ip::address peer;
  std::vector<net::ip::address> failed;  ///< connect_result::failed
};

net::awaitable<race_result> connect_first(
    const std::vector<tcp::endpoint>& endpoints, std::chrono::steady_clock::time_point deadline,
    std::chrono::steady_clock::duration stagger) {
  auto ex = co_await net::this_coro::executor;
  auto race = std::make_shared<connect_race>(ex);
  race->ended.assign(endpoints.size(), false);
  std::size_t started = 0;
  auto next_start = std::chrono::steady_clock::now();
  error_code outcome;
  for (;;) {
    if (race->winner) break;
    auto const now = std::chrono::steady_clock::now();
    if (started < endpoints.size() && (now >= next_start || race->failed == started)) {
      auto& sock = race->sockets.emplace_back(std::make_unique<tcp_socket>(ex));
      sock->async_connect(endpoints[started], [race, sp = sock.get(), at = started](error_code ec) {
        if (!ec && !race->winner) {
          race->winner.emplace(std::move(*sp));
          race->winner_at = at;
        } else if (ec) {
          ++race->failed;
          race->last_error = ec;
          // A loser closed once another won, or rebound out of descriptors: not the address's doing.
          if (ec != net::error::operation_aborted && classify_connect_error(ec) != http::error_type::overloaded)
            race->ended[at] = true;
        }
        race->signalled = true;
        race->wake.cancel();
      });
      ++started;
      next_start = now + stagger;
      continue;
    }
    if (race->failed == endpoints.size()) {
      outcome = race->last_error;
      break;
    }
    if (now >= deadline) {
      outcome = beast::error::timeout;
      break;
    }
    race->wake.expires_at(started < endpoints.size() ? std::min(deadline, next_start) : deadline);
    race->signalled = false;
    auto [wec] = co_await race->wake.async_wait(use_tuple);
    if (wec == net::error::operation_aborted && !race->signalled) {
      outcome = net::error::operation_aborted;  // the attempt was cancelled (a hedge that lost)
      break;
    }
  }
  for (auto& sock : race->sockets) {
    error_code ignored;
    if (sock->is_open()) sock->close(ignored);  // the losers; their handlers hold `race`
  }
  race_result out;
  // Addresses that refused, and, when the deadline came first, those that never answered.
  for (std::size_t i = 0; i < started; ++i)
    if (race->ended[i] || (outcome == beast::error::timeout && !race->winner)) out.failed.push_back(endpoints[i].address());
  if (race->winner && race->winner->is_open()) {
    out.socket = std::move(race->winner);
    out.peer = endpoints[race->winner_at].address();
    co_return out;
  }
  out.ec = outcome ? outcome : error_code(net::error::operation_aborted);
  if (out.ec == net::error::operation_aborted) out.failed.clear();  // cancelled: nobody's failure
  co_return out;
}

std::string addresses_of(const std::vector<tcp::endpoint>& endpoints) {
  std::string s;
  for (auto const& ep : endpoints) s += (s.empty() ? "" : ", ") + ep.address().to_string();
  return s;
}

}  // namespace

net::awaitable<connect_result> connect_to(const std::string& host, std::uint16_t port,
                                          std::chrono::steady_clock::time_point deadline,
                                          const std::vector<net::ip::address>* avoid) {
  auto ex = co_await net::this_coro::executor;
  connect_result out;
  std::vector<tcp::endpoint> endpoints;
  std::chrono::steady_clock::duration stagger = std::chrono::milliseconds(250);
  error_code ec;
  auto const addr = net::ip::make_address(host, ec);
  if (!ec) {
    endpoints.emplace_back(addr, port);
  } else {
    auto& resolver = resolver_of(ex);
    auto found = co_await resolver.resolve(host, deadline);
    if (found.addresses.empty()) {
      out.error = found.error;
      out.message = std::move(found.message);
      co_return out;
    }
    for (auto const& a : found.addresses) endpoints.emplace_back(a, port);
    if (avoid && !avoid->empty())  // previous_hosts: what this request has not tried goes first
      std::stable_partition(endpoints.begin(), endpoints.end(), [avoid](const tcp::endpoint& ep) {
        return std::find(avoid->begin(), avoid->end(), ep.address()) == avoid->end();
      });
    stagger = resolver.settings().connect_stagger;
  }
  error_code cec;
  std::optional<beast::tcp_stream> stream;
  if (endpoints.size() == 1) {
    stream.emplace(ex);
    stream->expires_at(deadline);
    std::tie(cec) = co_await stream->async_connect(endpoints.front(), use_tuple);
    out.peer = endpoints.front().address();
    if (cec && cec != net::error::operation_aborted) out.failed.push_back(out.peer);
  } else {
    auto race = co_await connect_first(endpoints, deadline, stagger);
    cec = race.ec;
    out.peer = race.peer;
    out.failed = std::move(race.failed);
    if (race.socket) stream.emplace(std::move(*race.socket));
  }
  if (cec) {
    // A name says which of its addresses were tried.
    auto const where = host + ":" + std::to_string(port) + (ec ? " (" + addresses_of(endpoints) + ")" : "");
    out.error =
        cec != beast::error::timeout && out_of_sockets() ? http::error_type::overloaded : classify_connect_error(cec);
    if (out.error == http::error_type::overloaded) out.failed.clear();  // rebound's shortage, not the addresses
    out.message = out.error == http::error_type::overloaded
                      ? "rebound is out of descriptors or memory for a connection to " + where + " (" +
                            cec.message() + ")"
                      : "connect to " + where +
                            " failed: " + (cec == beast::error::timeout ? std::string("timed out") : cec.message());
    co_return out;
  }
  stream->expires_never();
  error_code ignored;
  stream->socket().set_option(tcp::no_delay(true), ignored);
  out.stream.emplace(std::move(*stream));
  co_return out;
}

net::awaitable<open_result> open_connection(const std::string& host, std::uint16_t port, tls_client* tls,
                                            std::chrono::steady_clock::time_point deadline, std::string_view alpn,
                                            const std::vector<net::ip::address>* avoid) {
  open_result out;
  auto c = co_await connect_to(host, port, deadline, avoid);
  out.failed = std::move(c.failed);
  if (!c.stream) {
    out.error = c.error;
    out.message = std::move(c.message);
    co_return out;
  }
  if (!tls) {
    out.conn.emplace(std::move(*c.stream));
    out.conn->set_peer(c.peer);
    co_return out;
  }
  auto h = co_await tls->handshake(*c.stream, deadline, alpn);
  if (!h.conn) {
    out.error = h.error;
    out.message = std::move(h.message);
    co_return out;
  }
  out.conn.emplace(std::move(*h.conn));
  out.conn->set_peer(c.peer);
  co_return out;
}

}  // namespace rebound::upstream
