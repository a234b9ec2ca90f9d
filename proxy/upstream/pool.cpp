#include "proxy/upstream/pool.hpp"

#include <sys/socket.h>

#include <cerrno>

namespace rebound::upstream {
namespace {

/// A peek that does not block: EOF or stray bytes (on TLS: an alert, a close_notify) both
/// mean the connection is no longer a clean place to start a request.
bool still_open(connection& s) {
  auto& sock = s.socket();
  if (!sock.is_open()) return false;
  char c;
  auto const n = ::recv(sock.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

}  // namespace

std::optional<connection> pool::take(const std::string& key) {
  auto it = idle_.find(key);
  if (it == idle_.end()) return std::nullopt;
  auto& q = it->second;
  auto const now = now_();
  while (!q.empty()) {
    idle entry = std::move(q.back());
    q.pop_back();
    auto const idle_for = now - entry.since;
    if (idle_for < idle_timeout_ && still_open(entry.stream)) return std::move(entry.stream);
    boost::system::error_code ec;
    entry.stream.socket().close(ec);
  }
  return std::nullopt;
}

void pool::put(const std::string& key, connection stream) {
  auto& q = idle_[key];
  if (q.size() >= max_idle_per_key_) {
    boost::system::error_code ec;
    q.front().stream.socket().close(ec);
    q.pop_front();
  }
  q.push_back(idle{std::move(stream), now_()});
}

void pool::sweep() {
  auto const now = now_();
  for (auto it = idle_.begin(); it != idle_.end();) {
    auto& q = it->second;
    while (!q.empty() && (now - q.front().since >= idle_timeout_ || !still_open(q.front().stream))) {
      boost::system::error_code ec;
      q.front().stream.socket().close(ec);
      q.pop_front();
    }
    it = q.empty() ? idle_.erase(it) : std::next(it);
  }
}

std::size_t pool::idle_count() const {
  std::size_t n = 0;
  for (auto const& [k, q] : idle_) n += q.size();
  return n;
}

}  // namespace rebound::upstream
