#include "proxy/upstream/pool.hpp"

#include "proxy/upstream/attempt.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <vector>

namespace rebound::upstream {
namespace {

/// A peek that does not block: EOF or stray bytes (on TLS: an alert, a close_notify) both
/// mean the connection is no longer a clean place to start a request.
bool still_open(std::optional<connection>& s) {
  if (!s) return false;
  auto& sock = s->socket();
  if (!sock.is_open()) return false;
  char c;
  auto const n = ::recv(sock.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

void close(std::optional<connection>& s) {
  boost::system::error_code ec;
  if (s) s->socket().close(ec);
}

}  // namespace

pool::pool(std::size_t max_idle_per_key, std::size_t max_idle_total, std::chrono::milliseconds idle_timeout,
           std::function<clock::time_point()> now)
    : max_idle_per_key_(max_idle_per_key),
      max_idle_total_(max_idle_total),
      idle_timeout_(idle_timeout),
      now_(std::move(now)),
      spare_exchanges_(min_spare_exchanges, max_spare_exchanges) {}

pool::~pool() = default;

std::unique_ptr<exchange> pool::spare_exchange() {
  auto spare = spare_exchanges_.take();
  return spare ? std::move(*spare) : std::make_unique<exchange>();
}

void pool::trim_spares() { spare_exchanges_.trim(); }

void pool::recycle(std::unique_ptr<exchange> ex) {
  if (!ex) return;
  ex->stream.reset();  // closes a connection that did not go back to the pool
  ex->response.reset();
  ex->buffer.clear();
  ex->head_text.clear();
  // Only what a typical answer grows is kept: a spare that once held a 64 KiB head would
  // keep that memory for as long as it waits.
  if (ex->buffer.capacity() <= first_read_size && ex->fields.capacity_bytes() <= max_spare_head_bytes &&
      ex->head_text.capacity() <= max_spare_head_bytes)
    spare_exchanges_.give(std::move(ex));
}

void pool::drop(entry e) {
  auto it = by_key_.find(e->key);
  if (it != by_key_.end()) {
    auto& q = it->second;
    if (auto pos = std::find(q.begin(), q.end(), e); pos != q.end()) q.erase(pos);
    if (q.empty()) emptied(it);
  }
  close(e->stream);
  retire(e);
}

void pool::emptied(std::unordered_map<std::string, std::deque<entry>>::iterator it) {
  if (empty_queues_ < max_empty_queues)
    ++empty_queues_;
  else
    by_key_.erase(it);
}

void pool::retire(entry e) {
  e->stream.reset();
  if (spare_.size() >= max_spare)
    lru_.erase(e);
  else
    spare_.splice(spare_.end(), lru_, e);
}

std::optional<connection> pool::take(const std::string& key) { return take_first(key, nullptr); }

std::optional<connection> pool::take_avoiding(const std::string& key, const std::vector<net::ip::address>& avoid) {
  return take_first(key, &avoid);
}

std::optional<connection> pool::take_first(const std::string& key, const std::vector<net::ip::address>* avoid) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return std::nullopt;
  auto const now = now_();
  std::optional<connection> out;
  auto& q = it->second;
  // Newest first; one found closed on the way is dropped, one to an avoided address left.
  for (auto i = q.size(); i-- > 0 && !out;) {
    auto const e = q[i];
    if (avoid && std::find(avoid->begin(), avoid->end(), e->stream->peer()) != avoid->end()) continue;
    q.erase(q.begin() + static_cast<std::ptrdiff_t>(i));
    auto const idle_for = now - e->since;
    if (idle_for < idle_timeout_ && (idle_for < known_live_for || still_open(e->stream)))
      out.emplace(std::move(*e->stream));
    else
      close(e->stream);
    retire(e);
  }
  if (q.empty()) emptied(it);
  return out;
}

void pool::put(const std::string& key, connection stream) {
  if (max_idle_per_key_ == 0 || max_idle_total_ == 0) {
    boost::system::error_code ec;
    stream.socket().close(ec);
    return;
  }
  if (auto it = by_key_.find(key); it != by_key_.end() && it->second.size() >= max_idle_per_key_)
    drop(it->second.front());
  entry e;
  if (spare_.empty()) {
    e = lru_.insert(lru_.end(), idle{key, std::move(stream), now_()});
  } else {
    e = std::prev(spare_.end());  // the most recently retired: its memory is the warmest
    e->key.assign(key);  // keeps the string's room: most keys come back to the same node
    e->stream.emplace(std::move(stream));
    e->since = now_();
    lru_.splice(lru_.end(), spare_, e);
  }
  auto [it, made] = by_key_.try_emplace(key);
  if (!made && it->second.empty()) --empty_queues_;
  it->second.push_back(e);
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

void pool::check(const std::string& key) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return;
  // Copied first: drop() edits the queue being walked, and may erase it.
  std::vector<entry> const entries(it->second.begin(), it->second.end());
  for (auto e : entries)
    if (!still_open(e->stream)) drop(e);
}

void pool::sweep() {
  auto const now = now_();
  for (auto e = lru_.begin(); e != lru_.end();) {
    auto const next = std::next(e);
    if (now - e->since >= idle_timeout_ || !still_open(e->stream)) drop(e);
    e = next;
  }
  std::erase_if(by_key_, [](const auto& kv) { return kv.second.empty(); });
  empty_queues_ = 0;
}

}  // namespace rebound::upstream
