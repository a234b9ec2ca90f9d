#include "proxy/wire/head_fields.hpp"

#include <array>
#include <cstdint>
#include <new>

namespace rebound::http {
namespace {

/// Size classes of 32 bytes up to 512: a field with a name and a value of a few dozen bytes
/// each takes 64-128; longer ones (cookies, tokens) go to operator new.
constexpr std::size_t head_class_bytes = 32;
constexpr std::size_t head_classes = 16;

std::size_t head_class_of(std::size_t bytes) { return (bytes + head_class_bytes - 1) / head_class_bytes; }

struct kept_block {
  kept_block* next;
};

/** One thread's kept blocks: a singly linked list per class, threaded through the blocks.
    Trivially destructible, so a block freed after the thread's cleanup below has run (a
    static object's head at exit) still finds it, marked `drained`, and goes to delete. */
struct kept_block_lists {
  std::array<kept_block*, head_classes + 1> first;
  std::array<std::uint16_t, head_classes + 1> count;
  bool registered;
  bool drained;
};
thread_local kept_block_lists kept_blocks{};

/// Gives a thread's kept blocks back when it ends.
struct kept_blocks_drain {
  bool armed = false;
  ~kept_blocks_drain() {
    for (std::size_t c = 0; c <= head_classes; ++c) {
      while (auto* b = kept_blocks.first[c]) {
        kept_blocks.first[c] = b->next;
        ::operator delete(b);
      }
      kept_blocks.count[c] = 0;
    }
    kept_blocks.drained = true;
  }
};
thread_local kept_blocks_drain kept_blocks_drain_at_exit;

/// The first use of the drain on a thread constructs it, which schedules its destructor.
void arm_kept_blocks_drain() {
  if (kept_blocks.registered) return;
  kept_blocks.registered = true;
  kept_blocks_drain_at_exit.armed = true;
}

void* take_kept(std::size_t c) {
  if (auto* b = kept_blocks.first[c]) {
    kept_blocks.first[c] = b->next;
    --kept_blocks.count[c];
    return b;
  }
  arm_kept_blocks_drain();
  return ::operator new(c * head_class_bytes);
}

void give_kept(void* block, std::size_t c) noexcept {
  if (kept_blocks.drained || kept_blocks.count[c] >= head_blocks_kept) {
    ::operator delete(block);
    return;
  }
  arm_kept_blocks_drain();
  kept_blocks.first[c] = ::new (block) kept_block{kept_blocks.first[c]};
  ++kept_blocks.count[c];
}

}  // namespace

void* take_head_block(std::size_t bytes) {
  auto const c = head_class_of(bytes);
  if (head_blocks_reused && c > 0 && c <= head_classes) return take_kept(c);
  return ::operator new(bytes);
}

void give_head_block(void* block, std::size_t bytes) noexcept {
  auto const c = head_class_of(bytes);
  if (head_blocks_reused && c > 0 && c <= head_classes) return give_kept(block, c);
  ::operator delete(block);
}

}  // namespace rebound::http
