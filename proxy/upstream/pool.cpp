#include "proxy/upstream/pool.hpp"

#include <sys/socket.h>

#include <algorithm>
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

void close(connection& s) {
  boost::system::error_code ec;
  s.socket().close(ec);
}

}  // namespace

void pool::drop(entry e) {
  auto it = by_key_.find(e->key);
  if (it != by_key_.end()) {
    auto& q = it->second;
    if (auto pos = std::find(q.begin(), q.end(), e); pos != q.end()) q.erase(pos);
    if (q.empty()) by_key_.erase(it);
  }
  close(e->stream);
  lru_.erase(e);
}

std::optional<connection> pool::take(const std::string& key) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return std::nullopt;
  auto const now = now_();
  std::optional<connection> out;
  auto& q = it->second;
  while (!q.empty() && !out) {
    auto const e = q.back();
    q.pop_back();
    if (now - e->since < idle_timeout_ && still_open(e->stream))
      out.emplace(std::move(e->stream));
    else
      close(e->stream);
    lru_.erase(e);
  }
  if (q.empty()) by_key_.erase(it);
  return out;
}

void pool::put(const std::string& key, connection stream) {
  if (max_idle_per_key_ == 0 || max_idle_total_ == 0) {
    close(stream);
    return;
  }
  if (auto it = by_key_.find(key); it != by_key_.end() && it->second.size() >= max_idle_per_key_)
    drop(it->second.front());
  auto const e = lru_.insert(lru_.end(), idle{key, std::move(stream), now_()});
  by_key_[key].push_back(e);
  while (lru_.size() > max_idle_total_) drop(lru_.begin());
}

bool pool::close_oldest() {
  if (lru_.empty()) return false;
  drop(lru_.begin());
  return true;
}

void pool::set_max_idle_total(std::size_t n) {
  max_idle_total_ = n;
  while (lru_.size() > max_idle_total_) drop(lru_.begin());
}

void pool::sweep() {
  auto const now = now_();
  for (auto e = lru_.begin(); e != lru_.end();) {
    auto const next = std::next(e);
    if (now - e->since >= idle_timeout_ || !still_open(e->stream)) drop(e);
    e = next;
  }
}

}  // namespace rebound::upstream
