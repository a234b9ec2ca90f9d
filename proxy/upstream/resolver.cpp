#include "proxy/upstream/resolver.hpp"

#include "config/typed_values.hpp"
#include "proxy/observe/log.hpp"
#include "proxy/observe/metrics.hpp"
#include "proxy/upstream/address_cache.hpp"

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/this_coro.hpp>

#include <ares.h>
#include <netinet/in.h>

#include <algorithm>
#include <climits>
#include <cstring>

namespace rebound::upstream {

net::execution_context::id resolver_service::id;

/// One lookup of a name at the servers, which every request for the name waits for.
struct resolver_service::lookup {
  std::string name;
  clock::time_point gives_up;  ///< dns.timeout after it began (the real clock: timers wait for it)
  bool done = false;
  resolve_result result;
  std::vector<net::steady_timer*> waiters;  ///< cancelled when it is done
};

/// One of c-ares's sockets, watched by the worker's reactor.
struct resolver_service::watch {
  watch(net::io_context& ioc, int fd) : fd(fd), desc(ioc) {}
  int fd;
  net::posix::stream_descriptor desc;
  bool want_read = false, want_write = false, reading = false, writing = false, closed = false;
};

namespace {

struct ares_query_arg {
  resolver_service* self;
  std::shared_ptr<void> keep;  ///< the lookup, alive until c-ares calls back
  void (*done)(resolver_service*, void*, int, ares_addrinfo*);
};

ares_channel channel_of(void* p) { return static_cast<ares_channel>(p); }

std::string lookup_failed(const std::string& name, std::string_view why) {
  return "DNS lookup of " + name + " failed: " + std::string(why);
}

}  // namespace

resolver_service::resolver_service(net::io_context& ioc)
    : net::execution_context::service(ioc),
      ioc_(ioc),
      cache_(std::make_unique<address_cache>(settings_)),
      timeouts_(ioc) {}

resolver_service::~resolver_service() { close_channel(); }

void resolver_service::configure(const config::dns_settings& s, const observe::logger* log, observe::metrics* metrics,
                                 std::function<clock::time_point()> now) {
  bool const servers_changed = s.servers != settings_.servers || s.timeout != settings_.timeout;
  settings_ = s;
  log_ = log;
  metrics_ = metrics;
  now_ = std::move(now);
  cache_->set_settings(s);
  // The next lookup opens a channel with the new servers; one under way ends as a failure.
  if (servers_changed) close_channel();
}

void resolver_service::open_channel() {
  ares_options o{};
  o.sock_state_cb = [](void* data, ares_socket_t fd, int readable, int writable) {
    static_cast<resolver_service*>(data)->on_socket_state(fd, readable != 0, writable != 0);
  };
  o.sock_state_cb_data = this;
  // c-ares doubles the wait of each try (half of dns.timeout, then all of it): dns.timeout
  // itself is kept by give_up(), which always comes first and says so.
  o.timeout = static_cast<int>(std::max<long long>(
      std::chrono::duration_cast<std::chrono::milliseconds>(settings_.timeout).count() / 2, 10));
  o.tries = 2;
  ares_channel ch = nullptr;
  if (int const rc = ares_init_options(&ch, &o, ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES);
      rc != ARES_SUCCESS) {
    if (log_) log_->error("dns_unavailable", {{"message", std::string("c-ares: ") + ares_strerror(rc)}});
    return;
  }
  if (!settings_.servers.empty()) {
    std::string csv;
    for (auto const& s : settings_.servers) csv += (csv.empty() ? "" : ",") + s;
    if (int const rc = ares_set_servers_ports_csv(ch, csv.c_str()); rc != ARES_SUCCESS && log_)
      log_->error("dns_unavailable", {{"servers", csv}, {"message", std::string("c-ares: ") + ares_strerror(rc)}});
  }
  channel_ = ch;
}

void resolver_service::close_channel() {
  if (!channel_) return;
  auto* ch = channel_of(channel_);
  channel_ = nullptr;
  ares_destroy(ch);  // calls back every lookup (ARES_EDESTRUCTION) and closes every socket
  for (auto& [fd, w] : watches_) {
    w->closed = true;
    error_code ignored;
    w->desc.cancel(ignored);
    (void)w->desc.release();
  }
  watches_.clear();
}

void resolver_service::shutdown() {
  stopped_ = true;
  close_channel();
  timeouts_.cancel();
  auto pending = std::move(pending_);
  for (auto& [name, l] : pending) settle(*l, {{}, http::error_type::dns_failure, lookup_failed(name, "shutting down")});
}

net::awaitable<resolve_result> resolver_service::resolve(const std::string& host, clock::time_point deadline) {
  auto const found = cache_->find(host, now_());
  switch (found.s) {
    case address_cache::state::fresh:
    case address_cache::state::bridged:
      co_return resolve_result{*found.addresses, {}, {}};
    case address_cache::state::refresh:
    case address_cache::state::expired: {
      // Used now; asked again in the background (copied first: an answer given at once by
      // /etc/hosts replaces the cache entry).
      resolve_result now_known{*found.addresses, {}, {}};
      if (!pending_.contains(host)) ask(host);
      co_return now_known;
    }
    case address_cache::state::absent:
      co_return resolve_result{{}, http::error_type::dns_failure, lookup_failed(host, found.why)};
    case address_cache::state::unknown:
      break;
  }
  auto const it = pending_.find(host);
  auto l = it != pending_.end() ? it->second : ask(host);
  auto ex = co_await net::this_coro::executor;
  while (!l->done) {
    net::steady_timer wake(ex);
    wake.expires_at(std::min(deadline, l->gives_up));
    l->waiters.push_back(&wake);
    struct unlist {
      lookup& l;
      net::steady_timer* t;
      ~unlist() { std::erase(l.waiters, t); }  // also when the request's frame is destroyed
    } listed{*l, &wake};
    co_await wake.async_wait(use_tuple);
    if (l->done) break;
    auto const now = clock::now();
    if (now >= l->gives_up) {
      give_up(*l);
      break;
    }
    if (now >= deadline)
      co_return resolve_result{{}, http::error_type::dns_failure, "DNS lookup of " + host + " timed out"};
    if ((co_await net::this_coro::cancellation_state).cancelled() != net::cancellation_type::none)
      co_return resolve_result{{}, http::error_type::dns_failure, "the attempt was cancelled"};
  }
  co_return l->result;
}

bool resolver_service::offers_another(const std::string& host, const std::vector<net::ip::address>& tried) const {
  auto const* all = cache_->last_answer(host);
  // Not asked on this worker yet: its connect will ask, and try the addresses in `tried`
  // last. Saying no here let a worker's first call go straight to an ejected address.
  if (!all) return true;
  return std::any_of(all->begin(), all->end(), [&tried](const net::ip::address& a) {
           return std::find(tried.begin(), tried.end(), a) == tried.end();
         });
}

std::size_t resolver_service::address_count(const std::string& host) const {
  auto const* all = cache_->last_answer(host);
  return all ? all->size() : 0;
}

std::shared_ptr<resolver_service::lookup> resolver_service::ask(const std::string& host) {
  auto l = std::make_shared<lookup>();
  l->name = host;
  l->gives_up = clock::now() + settings_.timeout;
  pending_.emplace(host, l);
  start(l);
  return l;
}

void resolver_service::start(const std::shared_ptr<lookup>& l) {
  ++lookups_started_;
  if (!channel_ && !stopped_) open_channel();
  if (!channel_) {
    settle(*l, {{}, http::error_type::dns_failure, lookup_failed(l->name, "no resolver (see the dns_unavailable log)")});
    return;
  }
  ares_addrinfo_hints hints{};
  hints.ai_family = AF_UNSPEC;  // A and AAAA together (RFC 8305 section 3)
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = ARES_AI_NOSORT;  // sorting would connect a UDP socket per address; interleave_families orders
  auto* q = new ares_query_arg{this, l, [](resolver_service* self, void* lp, int status, ares_addrinfo* res) {
                        std::vector<net::ip::address> addresses;
                        int ttl = INT_MAX;
                        for (auto* n = res ? res->nodes : nullptr; n; n = n->ai_next) {
                          net::ip::address a;
                          if (n->ai_family == AF_INET) {
                            auto const* sin = reinterpret_cast<const sockaddr_in*>(n->ai_addr);
                            a = net::ip::address_v4(ntohl(sin->sin_addr.s_addr));
                          } else if (n->ai_family == AF_INET6) {
                            auto const* sin6 = reinterpret_cast<const sockaddr_in6*>(n->ai_addr);
                            net::ip::address_v6::bytes_type b;
                            std::memcpy(b.data(), &sin6->sin6_addr, b.size());
                            a = net::ip::address_v6(b, sin6->sin6_scope_id);
                          } else {
                            continue;
                          }
                          if (std::find(addresses.begin(), addresses.end(), a) == addresses.end())
                            addresses.push_back(a);
                          ttl = std::min(ttl, std::max(n->ai_ttl, 0));
                        }
                        if (res) ares_freeaddrinfo(res);
                        auto const held = std::chrono::seconds(addresses.empty() ? 0 : ttl);
                        self->finish(*static_cast<lookup*>(lp), status, std::move(addresses), held);
                      }};
  ares_getaddrinfo(
      channel_of(channel_), l->name.c_str(), nullptr, &hints,
      [](void* arg, int status, int, ares_addrinfo* res) {
        std::unique_ptr<ares_query_arg> q(static_cast<ares_query_arg*>(arg));
        q->done(q->self, q->keep.get(), status, res);
      },
      q);
  schedule_timeout();
}

void resolver_service::finish(lookup& l, int status, std::vector<net::ip::address> addresses,
                              std::chrono::seconds ttl) {
  if (stopped_) {  // the channel is being destroyed with the io_context: nobody to answer
    if (!l.done) settle(l, {{}, http::error_type::dns_failure, lookup_failed(l.name, "shutting down")});
    return;
  }
  auto const now = now_();
  if (status == ARES_SUCCESS && !addresses.empty()) {
    // Kept even when the requests gave up waiting: the next one finds it.
    cache_->answered(l.name, std::move(addresses), ttl, now);
    if (metrics_) metrics_->dns_lookup("answered");
    if (!l.done) settle(l, {*cache_->find(l.name, now).addresses, {}, {}});
    return;
  }
  if (status == ARES_SUCCESS || status == ARES_ENOTFOUND || status == ARES_ENODATA) {
    std::string const why = status == ARES_ENODATA || status == ARES_SUCCESS ? "no address" : "no such name";
    cache_->absent(l.name, why, now);
    if (metrics_) metrics_->dns_lookup("absent");
    if (!l.done) settle(l, {{}, http::error_type::dns_failure, lookup_failed(l.name, why)});
    return;
  }
  if (l.done) return;  // given up on already: counted then
  servers_failed(l, ares_strerror(status));
}

void resolver_service::give_up(lookup& l) {
  servers_failed(l, "no answer within " + config::format_duration(settings_.timeout) + " (dns.timeout)");
}

void resolver_service::servers_failed(lookup& l, std::string_view why) {
  auto const bridge = cache_->failed(l.name, now_());
  if (!bridge.addresses) {
    if (metrics_) metrics_->dns_lookup("failed");
    settle(l, {{}, http::error_type::dns_failure, lookup_failed(l.name, why)});
    return;
  }
  if (metrics_) metrics_->dns_lookup("stale");
  if (bridge.first && log_)
    log_->warn("dns_stale_answer", {{"host", l.name},
                                    {"message", lookup_failed(l.name, why) + "; its last answer is used for up to "
                                                    "dns.stale_for past its TTL"}});
  settle(l, {*bridge.addresses, {}, {}});
}

void resolver_service::settle(lookup& l, resolve_result r) {
  l.done = true;
  l.result = std::move(r);
  if (auto it = pending_.find(l.name); it != pending_.end() && it->second.get() == &l) pending_.erase(it);
  for (auto* t : l.waiters) t->cancel();
  l.waiters.clear();
}

void resolver_service::on_socket_state(int fd, bool readable, bool writable) {
  auto it = watches_.find(fd);
  if (!readable && !writable) {  // c-ares closes it next
    if (it == watches_.end()) return;
    auto const w = it->second;
    watches_.erase(it);
    w->closed = true;
    error_code ignored;
    w->desc.cancel(ignored);
    (void)w->desc.release();
    return;
  }
  if (it == watches_.end()) {
    auto w = std::make_shared<watch>(ioc_, fd);
    error_code ec;
    w->desc.assign(fd, ec);
    if (ec) {
      if (log_) log_->error("dns_unavailable", {{"message", "cannot watch a DNS socket: " + ec.message()}});
      return;  // the query times out
    }
    it = watches_.emplace(fd, std::move(w)).first;
  }
  it->second->want_read = readable;
  it->second->want_write = writable;
  arm(it->second);
}

void resolver_service::arm(const std::shared_ptr<watch>& w) {
  if (w->closed) return;
  if (w->want_read && !w->reading) {
    w->reading = true;
    w->desc.async_wait(net::posix::stream_descriptor::wait_read, [this, w](error_code ec) {
      w->reading = false;
      if (ec || w->closed || stopped_) return;
      process(w->fd, ARES_SOCKET_BAD);
      arm(w);
    });
  }
  if (w->want_write && !w->writing) {
    w->writing = true;
    w->desc.async_wait(net::posix::stream_descriptor::wait_write, [this, w](error_code ec) {
      w->writing = false;
      if (ec || w->closed || stopped_) return;
      process(ARES_SOCKET_BAD, w->fd);
      arm(w);
    });
  }
}

void resolver_service::process(int read_fd, int write_fd) {
  if (!channel_) return;
  ares_process_fd(channel_of(channel_), read_fd, write_fd);
  schedule_timeout();
}

void resolver_service::schedule_timeout() {
  if (!channel_ || stopped_) return;
  timeval tv{};
  if (!ares_timeout(channel_of(channel_), nullptr, &tv)) {
    timeouts_.cancel();
    return;
  }
  timeouts_.expires_after(std::chrono::seconds(tv.tv_sec) + std::chrono::microseconds(tv.tv_usec));
  timeouts_.async_wait([this](error_code ec) {
    if (ec || stopped_) return;
    // A read the reactor saw before c-ares wanted it is picked up here too.
    std::vector<int> readable;
    for (auto const& [fd, w] : watches_)
      if (w->want_read) readable.push_back(fd);
    for (int fd : readable) process(fd, ARES_SOCKET_BAD);
    process(ARES_SOCKET_BAD, ARES_SOCKET_BAD);
  });
}

resolver_service& resolver_of(const net::executor& ex) { return net::use_service<resolver_service>(ex.context()); }

}  // namespace rebound::upstream
