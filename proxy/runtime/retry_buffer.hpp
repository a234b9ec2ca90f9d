#pragma once
/** What the process keeps of request bodies for a replay (`limits.retry_buffer`). Each body
    kept so that a retry can send it again is counted here, across all workers, so that the
    sum stays under the limit however many requests wait for a slow upstream: 400 waiting
    1 MiB POSTs would otherwise hold 400 MiB, and `max_connections` allows ~10 GiB. A body
    that does not fit is streamed through once instead (R-6 still holds: it is simply not
    retried), so calls keep flowing while memory stays bounded. Envoy keeps a retry body only
    within its buffer limit; HAProxy retries only what fits its buffer. */
#include <atomic>
#include <cstdint>
#include <utility>

namespace rebound::runtime {

class retry_buffer {
 public:
  /// Bytes taken from the budget; given back when the lease goes.
  class lease {
   public:
    lease() = default;
    lease(lease&& o) noexcept : owner_(std::exchange(o.owner_, nullptr)), bytes_(o.bytes_) {}
    lease& operator=(lease&& o) noexcept {
      if (this != &o) {
        release();
        owner_ = std::exchange(o.owner_, nullptr);
        bytes_ = o.bytes_;
      }
      return *this;
    }
    lease(const lease&) = delete;
    lease& operator=(const lease&) = delete;
    ~lease() { release(); }
    explicit operator bool() const { return owner_ != nullptr; }

   private:
    friend class retry_buffer;
    lease(retry_buffer* owner, std::uint64_t bytes) : owner_(owner), bytes_(bytes) {}
    void release() {
      if (owner_) owner_->used_.fetch_sub(bytes_, std::memory_order_relaxed);
      owner_ = nullptr;
    }
    retry_buffer* owner_ = nullptr;
    std::uint64_t bytes_ = 0;
  };

  /// `bytes` of the budget if they fit under `limit` (the config's, which a reload may
  /// change), else an empty lease.
  lease take(std::uint64_t bytes, std::uint64_t limit) {
    auto used = used_.load(std::memory_order_relaxed);
    do {
      if (bytes > limit || used > limit - bytes) return {};
    } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
    return lease(this, bytes);
  }

  /// What leases hold now.
  std::uint64_t in_use() const { return used_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> used_{0};
};

}  // namespace rebound::runtime
