#include "proxy/http/cancel_at.hpp"

#include <boost/asio/bind_allocator.hpp>

namespace rebound::http {

connection_deadline::connection_deadline(tcp_socket& socket) : state_(std::make_shared<state>(socket)) {}

connection_deadline::~connection_deadline() {
  state_->socket = nullptr;
  state_->deadline = never;
  state_->timer.cancel();
}

void connection_deadline::arm(std::chrono::steady_clock::time_point when) {
  auto& st = *state_;
  st.deadline = when;
  st.fired = false;
  if (st.waiting && st.wake <= when) return;  // it wakes first, then sleeps on to `when`
  sleep_until(state_, when);
}

void connection_deadline::sleep_until(const std::shared_ptr<state>& st, std::chrono::steady_clock::time_point t) {
  st->wake = t;
  st->waiting = true;
  // Re-arming cancels the pending wait; its handler then sees operation_aborted and leaves
  // the new wait alone.
  st->timer.expires_at(t);
  // Pending while the connection idles: its own size from malloc (net.hpp).
  st->timer.async_wait(net::bind_allocator(exact_allocator<void>(), [st](error_code ec) {
    if (ec || !st->socket) return;
    // A wait already complete when a re-arm came runs here too; it judges by the deadline
    // now in force, so it is harmless.
    st->waiting = false;
    if (st->deadline == never) return;
    if (std::chrono::steady_clock::now() < st->deadline) return sleep_until(st, st->deadline);
    st->fired = true;
    error_code ignored;
    st->socket->cancel(ignored);
  }));
}

}  // namespace rebound::http
