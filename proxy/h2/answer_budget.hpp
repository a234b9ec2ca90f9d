#pragma once
/** What one HTTP/2 server connection may hold of answers held whole: a unary gRPC answer waits
    whole for its trailers (R-4 reads its grpc-status there) before the client gets a byte. A
    client that announces a zero window and never opens it made rebound hold every such answer
    for as long as the connection lived: 100 streams x 4 MiB per connection.

    Past the budget the connection refuses new streams (REFUSED_STREAM: never processed, so a
    gRPC client may send them again), and the upstream streams of its calls get no further
    flow-control credit, except one at a time while the client has taken every answer already
    complete (so a client that reads always sees the next one finish). Only a stream's credit
    is held back, never the upstream connection's: other calls on the same upstream
    connection, other clients' among them, go on. What is held can pass the budget by at most
    one answer and one stream window per call in flight. An answer's bytes come back
    when the last copy of it is let go (sent and its stream closed, reset by the client or the
    idle timeout, dropped for a retry). Used on the connection's thread only. */
#include "proxy/net.hpp"

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

namespace rebound::h2 {

class answer_budget {
 public:
  answer_budget(net::executor ex, std::size_t limit) : ex_(std::move(ex)), limit_(limit) {}

  /// Whether a new stream would find room.
  bool full() const { return held_ >= limit_; }
  std::size_t held() const { return held_; }

  /// `n` bytes of an answer under way now held.
  void hold(std::size_t n) { held_ += n; }
  /** Whether the answer under way `who` may be sent more (its stream credited): while under
      the budget, or as the one answer let through while no complete one waits for the client. */
  bool may_receive(const void* who);
  /// The answer `who` is complete (`n` bytes) or gone: it no longer needs to be let through.
  void settle(const void* who, std::size_t n);
  /// Gives `n` bytes back (`settled`: of a complete answer); what waits for room runs, posted.
  void release(std::size_t n, bool settled);
  /// Runs `f` on the connection's executor once something was released or settled.
  void when_room(std::function<void()> f);

 private:
  void wake();

  net::executor ex_;
  std::size_t limit_;
  std::size_t held_ = 0;
  std::size_t settled_ = 0;           ///< of held_: answers complete, waiting for the client
  const void* through_ = nullptr;     ///< the answer under way let through past the budget
  std::vector<std::function<void()>> waiting_;
};

/// A complete answer's bytes held against a budget, given back with the last copy of it.
class budget_share {
 public:
  budget_share(std::shared_ptr<answer_budget> budget, std::size_t bytes)
      : budget_(std::move(budget)), bytes_(bytes) {}
  ~budget_share() {
    if (budget_) budget_->release(bytes_, true);
  }
  budget_share(const budget_share&) = delete;
  budget_share& operator=(const budget_share&) = delete;

 private:
  std::shared_ptr<answer_budget> budget_;
  std::size_t bytes_;
};

}  // namespace rebound::h2
