#include "proxy/h2/answer_budget.hpp"

#include <boost/asio/post.hpp>

#include <algorithm>
#include <utility>

namespace rebound::h2 {

bool answer_budget::may_receive(const void* who) {
  if (held_ < limit_) return true;
  // Past the budget, one answer at a time, and only while the client has taken every complete
  // one: a client that reads gets them all, one that does not stops them after one.
  if (settled_ > 0) return false;
  if (through_ == nullptr) through_ = who;
  return through_ == who;
}

void answer_budget::settle(const void* who, std::size_t n) {
  settled_ += n;
  if (through_ == who) through_ = nullptr;
  wake();
}

void answer_budget::release(std::size_t n, bool settled) {
  held_ -= std::min(n, held_);
  if (settled) settled_ -= std::min(n, settled_);
  wake();
}

void answer_budget::when_room(std::function<void()> f) { waiting_.push_back(std::move(f)); }

void answer_budget::wake() {
  if (waiting_.empty()) return;
  // Posted: a release can come from inside nghttp2's callbacks (a stream closing), where the
  // waiters (which credit upstream streams) must not re-enter a session.
  for (auto& f : std::exchange(waiting_, {})) net::post(ex_, std::move(f));
}

}  // namespace rebound::h2
