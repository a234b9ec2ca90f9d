#pragma once
/** The client connections of one worker, so a drain can find them (SPEC section 1).

    A drain closes connections that sit idle between requests at once and lets busy ones
    finish their current exchange (they then close instead of reading another request).
    Used only on its worker's thread; `active()` alone is read from the control thread. */
#include "proxy/net.hpp"

#include <boost/asio/cancellation_signal.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include <atomic>
#include <list>

namespace rebound::runtime {

class session_registry {
  struct entry {
    // A constructor, not aggregate init: emplace of an aggregate with parentheses is C++20
    // that clang 14 (the fuzz build's compiler) does not have.
    entry(beast::tcp_stream* s, bool i) : stream(s), idle(i) {}
    beast::tcp_stream* stream;
    bool idle;
    /// Cuts a pending retry wait short when a drain begins; emitting with nothing waiting does nothing.
    boost::asio::cancellation_signal drain_wait;
  };

 public:
  using handle = std::list<entry>::iterator;

  handle add(beast::tcp_stream& s) {
    active_.fetch_add(1, std::memory_order_relaxed);
    return entries_.emplace(entries_.end(), &s, true);
  }
  void remove(handle h) {
    entries_.erase(h);
    active_.fetch_sub(1, std::memory_order_relaxed);
  }
  /// Marks a session as waiting for its next request (true) or serving one (false).
  void set_idle(handle h, bool idle) { h->idle = idle; }

  bool draining() const { return draining_; }
  const bool* draining_flag() const { return &draining_; }

  /** Idle sessions are closed, but for those whose next request already sits unread in
      the socket (a keep-alive client that sent it just as the drain began, or a worker too
      busy to have read it yet): they read and answer it with `Connection: close`, as the
      forward path does once draining. Closing them would lose a request that arrived. */
  void begin_drain() {
    draining_ = true;
    for (auto& e : entries_) {
      if (e.idle && !has_unread_bytes(e.stream->socket())) e.stream->close();
      e.drain_wait.emit(boost::asio::cancellation_type::terminal);
    }
  }

  std::size_t active() const { return active_.load(std::memory_order_relaxed); }

 private:
  std::list<entry> entries_;
  std::atomic<std::size_t> active_{0};
  bool draining_ = false;
};

/// Registers a session for its lifetime.
class session_guard {
 public:
  session_guard(session_registry& r, beast::tcp_stream& s) : r_(r), h_(r.add(s)) {}
  ~session_guard() { r_.remove(h_); }
  session_guard(const session_guard&) = delete;
  session_guard& operator=(const session_guard&) = delete;
  void set_idle(bool idle) { r_.set_idle(h_, idle); }
  /// The retry loop binds its backoff wait here, so a drain cuts it short.
  boost::asio::cancellation_slot drain_slot() { return h_->drain_wait.slot(); }

 private:
  session_registry& r_;
  session_registry::handle h_;
};

}  // namespace rebound::runtime
