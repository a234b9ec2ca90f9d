#pragma once
#include "proxy/runtime/spares.hpp"

#include <cstddef>
#include <memory>
#include <vector>

namespace rebound::runtime {

/** A worker's spare relay buffers, in two sizes. A body streams through a buffer; kept in
    the relay's coroutine frame it made every forwarded response a malloc and free of its size.
    Only a body the parser re-frames (chunked) takes one; a body of known length goes out
    from its read buffer (http/relay.cpp). It starts with a small one; a body that outgrows
    it moves to a large one, which quarters the reads, writes and resumptions per MiB
    (bench/run.sh get1m: 1.30 -> 0.82 CPU-seconds per GB, HAProxy 0.78) without giving every
    small response, or every one of 1,000 clients, 64 KiB. A worker's sessions share its one
    thread: no lock. */
class relay_buffers {
 public:
  static constexpr std::size_t small_size = 16 * 1024;
  static constexpr std::size_t large_size = 64 * 1024;

  /// A buffer taken from `owner` (null: from the heap), given back when the lease ends.
  class lease {
   public:
    lease(relay_buffers* owner, std::unique_ptr<char[]> b, std::size_t size)
        : owner_(owner), b_(std::move(b)), size_(size) {}
    lease(lease&&) noexcept = default;
    lease& operator=(lease&&) = delete;
    ~lease() {
      if (owner_ && b_) owner_->give_back(std::move(b_), size_);
    }
    char* data() { return b_.get(); }
    std::size_t size() const { return size_; }

   private:
    relay_buffers* owner_;
    std::unique_ptr<char[]> b_;
    std::size_t size_;
  };

  /// A spare buffer of `size` (small_size or large_size), or a new one when none is spare.
  lease take(std::size_t size);
  /// Takes from `pool` when there is one, else from the heap.
  static lease take_from(relay_buffers* pool, std::size_t size);

  /// Frees the spares no relay took since the last trim (runtime::spares).
  void trim() {
    small_.trim();
    large_.trim();
  }
  std::size_t spare_count() const { return small_.size() + large_.size(); }

 private:
  /// Kept of each size at most (a burst of large responses does not stay resident) and at
  /// least, however quiet the worker.
  static constexpr std::size_t max_spare = 16;
  static constexpr std::size_t min_spare = 2;
  void give_back(std::unique_ptr<char[]> b, std::size_t size);
  using kept = runtime::spares<std::unique_ptr<char[]>>;
  kept& spares_of(std::size_t size) { return size == large_size ? large_ : small_; }
  kept small_{min_spare, max_spare};
  kept large_{min_spare, max_spare};
};

}  // namespace rebound::runtime
