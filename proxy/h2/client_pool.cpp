#include "proxy/h2/client_connection.hpp"

#include "proxy/upstream/attempt.hpp"
#include "proxy/upstream/connect.hpp"

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <memory>
#include <vector>

// A worker's HTTP/2 connections to its upstreams: one shared by many calls, opened once for a
// burst of them, passed over when it goes to an address the call should avoid.
namespace rebound::h2 {

net::awaitable<boost::system::result<std::shared_ptr<client_connection>, retry::attempt_failure>> client_pool::get(
    const upstream::destination& to, clock::time_point deadline) {
  auto const ex = co_await net::this_coro::executor;
  std::vector<net::ip::address> shunned;
  auto const* avoid = upstream::addresses_to_avoid(ex, to, shunned);
  auto const avoided = [avoid](const client_connection& c) {
    return avoid && std::find(avoid->begin(), avoid->end(), c.peer()) != avoid->end();
  };
  for (;;) {
    // Looked up afresh after every wait: the map may have moved meanwhile.
    auto& open = conns_[to.pool_key];
    std::erase_if(open, [](const std::shared_ptr<client_connection>& c) { return c->closed(); });
    for (auto const& c : open)
      if (c->can_take_stream() && !avoided(*c)) co_return c;
    auto it = connecting_.find(to.pool_key);
    if (it == connecting_.end()) break;
    if (clock::now() >= deadline)
      co_return retry::attempt_failure{retry::error_type::connect_timeout,
                                       "no connection to the upstream by the deadline", false};
    auto pending = it->second;  // kept: the connect may end and erase it while this waits
    net::steady_timer wake(co_await net::this_coro::executor, deadline);
    // Unlisted however the wait ends: a cancelled call throws out of its next co_await.
    struct listed {
      std::vector<net::steady_timer*>& in;
      net::steady_timer* timer;
      ~listed() { std::erase(in, timer); }
    } const entry{pending->waiters, &wake};
    pending->waiters.push_back(&wake);
    co_await wake.async_wait(use_tuple);
  }
  auto const pending = std::make_shared<pending_connect>();
  connecting_.emplace(to.pool_key, pending);
  std::string_view const alpn = to.tls ? std::string_view("h2") : std::string_view();
  auto opened = co_await upstream::open_connection(to.host, to.port, to.tls, deadline, alpn, avoid);
  connecting_.erase(to.pool_key);
  for (auto* waiter : pending->waiters) waiter->cancel();  // they look again: at the new connection, or connect
  for (auto const& a : opened.failed) upstream::report_address(ex, to, a, true);
  if (!opened.conn) co_return retry::attempt_failure{opened.error, std::move(opened.message), false};
  auto c = client_connection::start(std::move(*opened.conn));
  conns_[to.pool_key].push_back(c);
  co_return c;
}

void client_pool::sweep(clock::duration idle_timeout) {
  auto const now = clock::now();
  for (auto& [key, list] : conns_)
    std::erase_if(list, [&](const std::shared_ptr<client_connection>& c) {
      if (c->closed()) return true;
      if (c->idle_for(now) < idle_timeout) return false;
      c->shut_down();  // GOAWAY; with no stream left it closes at once
      return true;
    });
  std::erase_if(conns_, [](const auto& kv) { return kv.second.empty(); });
}

void client_pool::shut_down() {
  for (auto& [key, list] : conns_)
    for (auto& c : list) c->shut_down();
  conns_.clear();
}

}  // namespace rebound::h2
