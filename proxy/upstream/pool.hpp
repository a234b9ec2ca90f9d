#pragma once
/** Idle upstream connections of one worker thread, keyed by scheme://host:port (https for a
    TLS origin, so a plain and a TLS connection never stand in for each other).

    A worker's sessions run on its single-threaded io_context, so the pool needs no lock.
    Only connections that finished a whole exchange cleanly come back here: a timed-out,
    failed or cancelled Beast stream is unusable and is closed instead.

    Idle connections are bounded per key and in total. The total matters for an app that
    calls many distinct hosts (a webhook sender with an endpoint per subscriber): one idle
    connection per host would otherwise hold every descriptor until its idle timeout, and
    each new host would be refused. Past the total, the least recently used idle connection
    is closed (Envoy's dynamic forward proxy bounds its hosts the same way, `max_hosts`). */
#include "proxy/runtime/spares.hpp"
#include "proxy/upstream/connection.hpp"

#include <chrono>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace rebound::upstream {

struct exchange;

class pool {
 public:
  using clock = std::chrono::steady_clock;

  /// `now` is the clock idle times are measured with (tests pass their own).
  pool(std::size_t max_idle_per_key, std::size_t max_idle_total, std::chrono::milliseconds idle_timeout,
       std::function<clock::time_point()> now = &clock::now);
  ~pool();  // out of line, as is the constructor: exchange is complete only in pool.cpp
  pool(const pool&) = delete;
  pool& operator=(const pool&) = delete;

  /** A connection idle for less than this was in use moments ago: it is handed out without
      the liveness check, saving a syscall on every request of a busy dependency. Should it
      turn out closed, the request is one that may be sent again (only those take pooled
      connections: attempt.hpp's `may_reuse`), and it goes again on a fresh connection
      within the same attempt, as HAProxy and Envoy do. Servers close idle connections after
      a second or more, so a window this short rarely hands out a closed one. */
  static constexpr std::chrono::milliseconds known_live_for{250};

  /** The most recently used connection for `key` that is not known to be closed. One idle
      for `known_live_for` or longer is checked first: one the peer has closed (or sent
      unsolicited bytes on) is dropped here, not handed out. An upstream that restarts
      closes its connections at once, and one with a short keep-alive timeout (Node 5 s,
      gunicorn 2 s, nginx configured at 1 s) within a second. The check is one non-blocking
      recv. */
  std::optional<connection> take(const std::string& key);

  /** The same, of the connections to an address not in `avoid` (a retry's previous_hosts,
      attempt.hpp): the most recently used such one, or none. Connections to avoided
      addresses stay pooled for other requests. */
  std::optional<connection> take_avoiding(const std::string& key, const std::vector<net::ip::address>& avoid);

  /** A connection taken for `key` turned out closed before it answered: its siblings idled
      as long or longer, and an upstream restart closed them all. Each is checked now, so
      the requests after this one do not find the same. */
  void check(const std::string& key);

  void put(const std::string& key, connection stream);

  /// Closes connections idle for longer than the idle timeout, or closed by their peer.
  void sweep();
  /// Frees the spare exchanges no request took since the last trim (runtime::spares).
  void trim_spares();

  /** Closes the least recently used idle connection, giving its descriptor back: what a
      connect that found no descriptor left does before it tries once more. False when
      nothing was idle. */
  bool close_oldest();

  /// A new total bound (the descriptor limit it derives from can change while running);
  /// connections past it are closed, oldest first.
  void set_max_idle_total(std::size_t n);

  std::size_t idle_count() const { return lru_.size(); }

  /** An exchange to run an attempt in (upstream/attempt.hpp): one a finished request gave
      back, its buffer's room kept, or a new one. Every attempt used to allocate its 20 KiB
      read buffer and free it when the answer was relayed; a busy worker now reuses them. */
  std::unique_ptr<exchange> spare_exchange();
  /** Takes back an exchange whose answer went out: kept, emptied, while fewer than
      max_spare_exchanges are and its buffer and field list are no larger than a typical
      answer needs (a large head's memory is not held for the next small one); otherwise freed.
      As many are kept as were out at once, up to max_spare_exchanges, so 1,000 requests in
      flight do not go to malloc for 20 KiB each; trim_spares() gives a burst's ~21 KiB each
      back. */
  void recycle(std::unique_ptr<exchange> ex);
  std::size_t spare_exchange_count() const { return spare_exchanges_.size(); }

 private:
  struct idle {
    std::string key;
    std::optional<connection> stream;  ///< empty in a spare node
    clock::time_point since;
  };
  using entry = std::list<idle>::iterator;
  void drop(entry e);
  /// take() and take_avoiding(): the newest live connection for `key` not to an address in `avoid`.
  std::optional<connection> take_first(const std::string& key, const std::vector<net::ip::address>* avoid);
  /// Moves `e` from lru_ to spare_ (or frees it past max_spare), keeping its node and key
  /// string for the next put: a busy dependency then allocates nothing per request here.
  void retire(entry e);
  /// A key's queue became empty: kept (a busy key's next put then allocates nothing) while
  /// fewer than max_empty_queues are, else erased; sweep() erases them all.
  void emptied(std::unordered_map<std::string, std::deque<entry>>::iterator it);

  std::size_t max_idle_per_key_;
  std::size_t max_idle_total_;
  std::chrono::milliseconds idle_timeout_;
  std::function<clock::time_point()> now_;
  std::list<idle> lru_;  ///< oldest first, every key
  /** Nodes of connections taken or closed, kept for the next put (at most max_spare): at
      1,000 requests in flight, as many connections are out and come back at once. A node
      and its key are ~150 bytes, so a worker keeps at most ~150 KB of them. */
  std::list<idle> spare_;
  static constexpr std::size_t max_spare = 1024;
  /// Each key's entries, oldest first: the same order as in lru_, since both are appended
  /// to when a connection comes back and taken from where it went in.
  std::unordered_map<std::string, std::deque<entry>> by_key_;
  std::size_t empty_queues_ = 0;  ///< queues in by_key_ holding nothing
  static constexpr std::size_t max_empty_queues = 64;
  static constexpr std::size_t max_spare_exchanges = 1024;
  /// A trim leaves this many however few were taken: a worker's usual concurrency.
  static constexpr std::size_t min_spare_exchanges = 16;
  runtime::spares<std::unique_ptr<exchange>> spare_exchanges_;  ///< made in pool.cpp, where exchange is complete
  /// A spare's field list and request head may each keep this much: a dozen fields of a few
  /// hundred bytes.
  static constexpr std::size_t max_spare_head_bytes = 4096;
};

}  // namespace rebound::upstream
