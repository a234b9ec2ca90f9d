#pragma once
/** Name resolution for upstream connections (issue 50): c-ares on the worker's own event loop.

    Asio's resolver runs getaddrinfo on one hidden thread per io_context: the lookups of a
    worker queue behind each other, a slow DNS server stalls every new connection of the
    worker, and no TTL is known. This one is an io_context service (as Asio's own resolver
    is): each worker has its own, whose c-ares sockets the worker's reactor watches, with no
    thread and no lock. Each answer is kept for its TTL (address_cache.hpp) and asked again in
    the background as it runs out, so only a request for a name with no usable answer waits
    for the servers; concurrent requests for it wait for one lookup, for `dns.timeout` at most.

    A worker configures it at start and on reload (`configure`); an io_context nobody
    configured (the trace exporter's) resolves with /etc/resolv.conf and the defaults. */
#include "config/config.hpp"
#include "proxy/wire/error_response.hpp"
#include "proxy/net.hpp"

#include <boost/asio/execution_context.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rebound::observe {
class logger;
class metrics;
}  // namespace rebound::observe

namespace rebound::upstream {

class address_cache;

struct resolve_result {
  std::vector<net::ip::address> addresses;  ///< in the order to try them; empty on failure
  http::error_type error = http::error_type::dns_failure;
  std::string message;  ///< why it failed, for the client and the log
};

class resolver_service : public net::execution_context::service {
 public:
  using clock = std::chrono::steady_clock;
  static net::execution_context::id id;

  explicit resolver_service(net::io_context& ioc);
  ~resolver_service() override;

  /** The worker's settings; `log` and `metrics` may be null (nothing logged or counted);
      `now`: the clock TTLs are measured with (tests pass their own). Settings change on a
      reload; the answers already kept stay until their TTL. */
  void configure(const config::dns_settings& s, const observe::logger* log, observe::metrics* metrics,
                 std::function<clock::time_point()> now = &clock::now);
  const config::dns_settings& settings() const { return settings_; }

  /** The addresses of `host` (a name, not an IP literal), from the cache or one lookup.
      The request waits until `deadline` at most. `host` is taken by reference: the caller
      keeps it alive across the await (a GCC 12 coroutine bug destroys by-value arguments twice). */
  net::awaitable<resolve_result> resolve(const std::string& host, clock::time_point deadline);

  /** Whether the last answer for `host` has an address not in `tried` (no lookup is made); true
      while this worker has no answer for it yet, since the connect that asks puts `tried` last. */
  bool offers_another(const std::string& host, const std::vector<net::ip::address>& tried) const;

  /// How many addresses the last answer for `host` had (0: none kept; no lookup is made).
  std::size_t address_count(const std::string& host) const;

  /// Lookups sent to the servers so far (tests: concurrent requests share one).
  std::size_t lookups_started() const { return lookups_started_; }
  /// Lookups not yet settled, those in the background included.
  std::size_t lookups_pending() const { return pending_.size(); }

 private:
  struct lookup;
  struct watch;
  void shutdown() override;
  void open_channel();
  void close_channel();
  /// A new lookup of `host`, pending until it settles (at once, from /etc/hosts).
  std::shared_ptr<lookup> ask(const std::string& host);
  void start(const std::shared_ptr<lookup>& l);
  void finish(lookup& l, int status, std::vector<net::ip::address> addresses, std::chrono::seconds ttl);
  void give_up(lookup& l);
  void servers_failed(lookup& l, std::string_view why);
  void settle(lookup& l, resolve_result r);
  void on_socket_state(int fd, bool readable, bool writable);
  void arm(const std::shared_ptr<watch>& w);
  void process(int read_fd, int write_fd);
  void schedule_timeout();

  net::io_context& ioc_;
  config::dns_settings settings_;
  const observe::logger* log_ = nullptr;
  observe::metrics* metrics_ = nullptr;
  std::function<clock::time_point()> now_ = &clock::now;
  void* channel_ = nullptr;  ///< ares_channel
  std::unique_ptr<address_cache> cache_;
  std::unordered_map<std::string, std::shared_ptr<lookup>> pending_;  ///< one lookup per name
  std::unordered_map<int, std::shared_ptr<watch>> watches_;           ///< c-ares's sockets
  net::steady_timer timeouts_;
  std::size_t lookups_started_ = 0;
  bool stopped_ = false;
};

/// The resolver of the io_context `ex` runs on.
resolver_service& resolver_of(const net::executor& ex);

}  // namespace rebound::upstream
